/*
 * vector_ops.cpp — functions behind the vector operators: the distances
 * (<->, <#>, <=>), dimensions and norm, and the comparisons of the btree
 * opclass.
 *
 * The distances use the core kernels (src/core/distance.h), the same code
 * the index uses, so that an index scan and a sequential scan agree.
 * The kernels are plain arithmetic and never throw.
 */
#include "type/vector_ops.h"

#include <cmath>

#include "core/distance.h"

extern "C" {
PG_FUNCTION_INFO_V1(l2_distance);
PG_FUNCTION_INFO_V1(inner_product);
PG_FUNCTION_INFO_V1(vector_negative_inner_product);
PG_FUNCTION_INFO_V1(cosine_distance);
PG_FUNCTION_INFO_V1(vector_dims);
PG_FUNCTION_INFO_V1(vector_norm);
PG_FUNCTION_INFO_V1(vector_lt);
PG_FUNCTION_INFO_V1(vector_le);
PG_FUNCTION_INFO_V1(vector_eq);
PG_FUNCTION_INFO_V1(vector_ne);
PG_FUNCTION_INFO_V1(vector_ge);
PG_FUNCTION_INFO_V1(vector_gt);
PG_FUNCTION_INFO_V1(vector_cmp);
}

/* l2_distance(vector, vector): Euclidean distance, the <-> operator */
Datum
l2_distance(PG_FUNCTION_ARGS)
{
	Vector	   *a = PG_GETARG_VECTOR_P(0);
	Vector	   *b = PG_GETARG_VECTOR_P(1);

	vector_check_same_dims(a, b);
	PG_RETURN_FLOAT8(std::sqrt((double) cagra::l2_squared(a->x, b->x, a->dim)));
}

/* inner_product(vector, vector) */
Datum
inner_product(PG_FUNCTION_ARGS)
{
	Vector	   *a = PG_GETARG_VECTOR_P(0);
	Vector	   *b = PG_GETARG_VECTOR_P(1);

	vector_check_same_dims(a, b);
	PG_RETURN_FLOAT8((double) cagra::inner_product(a->x, b->x, a->dim));
}

/* The <#> operator: negative inner product, so that smaller is closer. */
Datum
vector_negative_inner_product(PG_FUNCTION_ARGS)
{
	Vector	   *a = PG_GETARG_VECTOR_P(0);
	Vector	   *b = PG_GETARG_VECTOR_P(1);

	vector_check_same_dims(a, b);
	PG_RETURN_FLOAT8(-(double) cagra::inner_product(a->x, b->x, a->dim));
}

/*
 * cosine_distance(vector, vector), the <=> operator: 1 - cos(a, b).
 * NaN when either vector has norm 0, as in pgvector (the angle is undefined).
 */
Datum
cosine_distance(PG_FUNCTION_ARGS)
{
	Vector	   *a = PG_GETARG_VECTOR_P(0);
	Vector	   *b = PG_GETARG_VECTOR_P(1);
	double		dot;
	double		norms;
	double		similarity;

	vector_check_same_dims(a, b);
	dot = cagra::inner_product(a->x, b->x, a->dim);
	norms = (double) cagra::inner_product(a->x, a->x, a->dim) *
		(double) cagra::inner_product(b->x, b->x, b->dim);
	similarity = dot / std::sqrt(norms);
	/* rounding can push |similarity| a hair past 1; NaN passes through */
	if (similarity > 1.0)
		similarity = 1.0;
	else if (similarity < -1.0)
		similarity = -1.0;
	PG_RETURN_FLOAT8(1.0 - similarity);
}

/* vector_dims(vector) */
Datum
vector_dims(PG_FUNCTION_ARGS)
{
	Vector	   *v = PG_GETARG_VECTOR_P(0);

	PG_RETURN_INT32(v->dim);
}

/* vector_norm(vector): Euclidean norm, summed in double precision */
Datum
vector_norm(PG_FUNCTION_ARGS)
{
	Vector	   *v = PG_GETARG_VECTOR_P(0);
	double		sum = 0.0;

	for (int i = 0; i < v->dim; i++)
		sum += (double) v->x[i] * (double) v->x[i];
	PG_RETURN_FLOAT8(std::sqrt(sum));
}

/*
 * Total order for btree (DISTINCT, ORDER BY, UNIQUE on vectors): element by
 * element, then the shorter vector first.  Elements are never NaN.
 */
static int
compare_vectors(const Vector *a, const Vector *b)
{
	int			common = Min(a->dim, b->dim);

	for (int i = 0; i < common; i++)
	{
		if (a->x[i] < b->x[i])
			return -1;
		if (a->x[i] > b->x[i])
			return 1;
	}
	return (a->dim > b->dim) - (a->dim < b->dim);
}

static int
compare_args(FunctionCallInfo fcinfo)
{
	Vector	   *a = PG_GETARG_VECTOR_P(0);
	Vector	   *b = PG_GETARG_VECTOR_P(1);
	int			cmp = compare_vectors(a, b);

	PG_FREE_IF_COPY(a, 0);
	PG_FREE_IF_COPY(b, 1);
	return cmp;
}

Datum vector_lt(PG_FUNCTION_ARGS) { PG_RETURN_BOOL(compare_args(fcinfo) < 0); }
Datum vector_le(PG_FUNCTION_ARGS) { PG_RETURN_BOOL(compare_args(fcinfo) <= 0); }
Datum vector_eq(PG_FUNCTION_ARGS) { PG_RETURN_BOOL(compare_args(fcinfo) == 0); }
Datum vector_ne(PG_FUNCTION_ARGS) { PG_RETURN_BOOL(compare_args(fcinfo) != 0); }
Datum vector_ge(PG_FUNCTION_ARGS) { PG_RETURN_BOOL(compare_args(fcinfo) >= 0); }
Datum vector_gt(PG_FUNCTION_ARGS) { PG_RETURN_BOOL(compare_args(fcinfo) > 0); }
Datum vector_cmp(PG_FUNCTION_ARGS) { PG_RETURN_INT32(compare_args(fcinfo)); }
