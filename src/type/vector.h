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
#include "utils/array.h"
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

/* halfvec, as it lies in memory: the same header, IEEE half elements.
 * pgvector's layout, and cagra's own type's when pgvector is absent
 * (halfvec.cpp); the index reads its elements as floats. */
typedef struct HalfVector
{
	int32		vl_len_;
	int16		dim;
	int16		unused;
	uint16		x[FLEXIBLE_ARRAY_MEMBER];
} HalfVector;

#define HALFVEC_SIZE(dim)		(offsetof(HalfVector, x) + sizeof(uint16) * (dim))
#define PG_GETARG_HALFVEC_P(n)	((HalfVector *) PG_DETOAST_DATUM(PG_GETARG_DATUM(n)))

/* Whether type `typid` is halfvec (pgvector's or cagra's own). */
bool		vector_type_is_halfvec(Oid typid);

/* The elements of a vector or (half = true) halfvec datum as floats: the
 * datum's own array for a vector, a palloc'd conversion for a halfvec. */
const float *vector_datum_floats(Datum d, bool half, int *dim);

/* A zeroed vector of `dim` dimensions in the current memory context. */
Vector	   *vector_new(int dim);

/* ERROR unless `dim` is a valid number of dimensions (1..VECTOR_MAX_DIM);
 * the _of form names type_name ("vector" or "halfvec") in its messages, as
 * the others below do. */
void		vector_check_dim(int dim);
void		vector_check_dim_of(const char *type_name, int dim);

/* ERROR when `value` is NaN or infinite, which no vector holds. */
void		vector_check_element(float value);
void		vector_check_element_of(const char *type_name, float value);

/* ERROR unless `value` rounds to a finite half; `text` (`len` bytes) is how
 * the input wrote it, or NULL to print the value. */
void		vector_check_half_range(float value, const char *text, int len);

/* ERROR unless `typmod` (-1: any) allows `dim` dimensions. */
void		vector_check_typmod_dims(int dim, int32 typmod);

/* The n of type_name(n), checked. */
int32		vector_typmod_of(ArrayType *mods, const char *type_name);

/* The elements of the text form '[1, 2, 3]' of a vector, or (half) of a
 * halfvec, checked for its type; palloc'd, *dim of them. */
float	   *vector_parse_text(const char *input, bool half, int *dim);

/* The text form of dim floats: each the shortest that reads back to it. */
char	   *vector_floats_out(const float *x, int dim);

/* The elements of an integer[], real[], double precision[] or numeric[]
 * cast to a vector (or halfvec) of type modifier typmod, checked as
 * vector_parse_text checks; palloc'd, *dim of them. */
float	   *vector_array_floats(ArrayType *array, int32 typmod, bool half, int *dim);

/* ERROR unless both vectors have the same number of dimensions. */
void		vector_check_same_dims(const Vector *a, const Vector *b);
