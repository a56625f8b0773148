/*
 * vector.h — the `vector` type as it lies in memory and on disk.
 *
 * The layout is pgvector's, byte for byte, so that cagra's access method can
 * read columns of pgvector's type when pgvector is installed:
 *     varlena header (int32), int16 dim, int16 unused (always 0), float4 x[dim]
 */
#pragma once

extern "C" {
#include "postgres.h"
#include "fmgr.h"
}

/* Most dimensions a vector may have (the index accepts as many). */
#define VECTOR_MAX_DIM 16000

typedef struct Vector
{
	int32		vl_len_;		/* varlena header (do not touch directly) */
	int16		dim;			/* number of dimensions */
	int16		unused;			/* reserved, always 0 */
	float		x[FLEXIBLE_ARRAY_MEMBER];
} Vector;

#define VECTOR_SIZE(dim)		(offsetof(Vector, x) + sizeof(float) * (dim))
#define DatumGetVector(d)		((Vector *) PG_DETOAST_DATUM(d))
#define PG_GETARG_VECTOR_P(n)	DatumGetVector(PG_GETARG_DATUM(n))
#define PG_RETURN_VECTOR_P(v)	PG_RETURN_POINTER(v)

/* pgvector's halfvec, as it lies in memory: the same header, IEEE half
 * elements.  cagra indexes it (converted to float) but does not define it. */
typedef struct HalfVector
{
	int32		vl_len_;
	int16		dim;
	int16		unused;
	uint16		x[FLEXIBLE_ARRAY_MEMBER];
} HalfVector;

/* Whether type `typid` is pgvector's halfvec. */
bool		vector_type_is_halfvec(Oid typid);

/* The elements of a vector or (half = true) halfvec datum as floats: the
 * datum's own array for a vector, a palloc'd conversion for a halfvec. */
const float *vector_datum_floats(Datum d, bool half, int *dim);

/* A zeroed vector of `dim` dimensions in the current memory context. */
Vector	   *vector_new(int dim);

/* ERROR unless `dim` is a valid number of dimensions (1..VECTOR_MAX_DIM). */
void		vector_check_dim(int dim);

/* ERROR when `value` is NaN or infinite, which no vector holds. */
void		vector_check_element(float value);

/* ERROR unless both vectors have the same number of dimensions. */
void		vector_check_same_dims(const Vector *a, const Vector *b);
