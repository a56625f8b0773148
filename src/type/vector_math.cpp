/*
 * vector_math.cpp — the rest of pgvector's vector functions, for servers
 * where cagra owns the type: element-wise +, -, *, concatenation (||), the
 * L1 distance (<+>), l2_normalize, subvector, and the sum and avg
 * aggregates.  Same names, semantics and errors as pgvector 0.8, so a query
 * written for pgvector means the same here (docs/sql-vector.md).
 */
#include "type/vector_math.h"

#include <cmath>

extern "C" {
#include "catalog/pg_type.h"
#include "utils/array.h"
#include "utils/float.h"

PG_FUNCTION_INFO_V1(vector_add);
PG_FUNCTION_INFO_V1(vector_sub);
PG_FUNCTION_INFO_V1(vector_mul);
PG_FUNCTION_INFO_V1(vector_concat);
PG_FUNCTION_INFO_V1(l1_distance);
PG_FUNCTION_INFO_V1(l2_normalize);
PG_FUNCTION_INFO_V1(subvector);
PG_FUNCTION_INFO_V1(vector_accum);
PG_FUNCTION_INFO_V1(vector_combine);
PG_FUNCTION_INFO_V1(vector_avg);
}

/* An element-wise operation on two vectors of the same dimensions. */
template <class Op>
static Datum
elementwise(FunctionCallInfo fcinfo, Op op)
{
	Vector	   *a = PG_GETARG_VECTOR_P(0);
	Vector	   *b = PG_GETARG_VECTOR_P(1);

	vector_check_same_dims(a, b);

	Vector	   *r = vector_new(a->dim);

	for (int i = 0; i < a->dim; i++)
		r->x[i] = op(a->x[i], b->x[i]);
	PG_RETURN_VECTOR_P(r);
}

static float
checked_sum(float x, float y)
{
	float		r = x + y;

	if (std::isinf(r))
		float_overflow_error();
	return r;
}

Datum
vector_add(PG_FUNCTION_ARGS)
{
	return elementwise(fcinfo, checked_sum);
}

Datum
vector_sub(PG_FUNCTION_ARGS)
{
	return elementwise(fcinfo, [](float x, float y) { return checked_sum(x, -y); });
}

Datum
vector_mul(PG_FUNCTION_ARGS)
{
	return elementwise(fcinfo, [](float x, float y) {
		float		r = x * y;

		if (std::isinf(r))
			float_overflow_error();
		if (r == 0.0f && x != 0.0f && y != 0.0f)
			float_underflow_error();
		return r;
	});
}

/* vector || vector: the elements of both, in order */
Datum
vector_concat(PG_FUNCTION_ARGS)
{
	Vector	   *a = PG_GETARG_VECTOR_P(0);
	Vector	   *b = PG_GETARG_VECTOR_P(1);
	int			dim = a->dim + b->dim;

	vector_check_dim(dim);

	Vector	   *r = vector_new(dim);

	memcpy(r->x, a->x, sizeof(float) * a->dim);
	memcpy(r->x + a->dim, b->x, sizeof(float) * b->dim);
	PG_RETURN_VECTOR_P(r);
}

/* l1_distance(vector, vector), the <+> operator: the taxicab distance */
Datum
l1_distance(PG_FUNCTION_ARGS)
{
	Vector	   *a = PG_GETARG_VECTOR_P(0);
	Vector	   *b = PG_GETARG_VECTOR_P(1);
	float		sum = 0.0f;

	vector_check_same_dims(a, b);
	for (int i = 0; i < a->dim; i++)
		sum += std::fabs(a->x[i] - b->x[i]);
	PG_RETURN_FLOAT8((double) sum);
}

/* l2_normalize(vector): unit length (a zero vector stays zero) */
Datum
l2_normalize(PG_FUNCTION_ARGS)
{
	Vector	   *a = PG_GETARG_VECTOR_P(0);
	Vector	   *r = vector_new(a->dim);
	double		norm = 0.0;

	for (int i = 0; i < a->dim; i++)
		norm += (double) a->x[i] * (double) a->x[i];
	norm = std::sqrt(norm);
	if (norm > 0)
		for (int i = 0; i < a->dim; i++)
		{
			r->x[i] = (float) (a->x[i] / norm);
			if (std::isinf(r->x[i]))
				float_overflow_error();
		}
	PG_RETURN_VECTOR_P(r);
}

int
vector_subrange(int dim, int32 start, int32 count, const char *type_name, int *first)
{
	int64		end = (int64) start + count;

	if (count < 1 || end <= 1 || start > dim)
		ereport(ERROR,
				(errcode(ERRCODE_DATA_EXCEPTION),
				 errmsg("%s must have at least 1 dimension", type_name)));
	if (start < 1)
		start = 1;
	if (end > (int64) dim + 1)
		end = (int64) dim + 1;
	*first = start - 1;
	return (int) (end - start);
}

/* subvector(vector, start, count): count elements from position start (1-based) */
Datum
subvector(PG_FUNCTION_ARGS)
{
	Vector	   *a = PG_GETARG_VECTOR_P(0);
	int			first;
	int			dim = vector_subrange(a->dim, PG_GETARG_INT32(1), PG_GETARG_INT32(2), "vector", &first);
	Vector	   *r = vector_new(dim);

	memcpy(r->x, a->x + first, sizeof(float) * dim);
	PG_RETURN_VECTOR_P(r);
}

/* ---- avg(vector): the state is float8[] {count, sum_1, ..., sum_dim} ---- */

static float8 *
accum_state(ArrayType *state, int *n)
{
	if (ARR_NDIM(state) != 1 || ARR_HASNULL(state) || ARR_ELEMTYPE(state) != FLOAT8OID ||
		ARR_DIMS(state)[0] < 1)
		elog(ERROR, "avg(vector) expected a float8[] state of at least one element");
	*n = ARR_DIMS(state)[0];
	return (float8 *) ARR_DATA_PTR(state);
}

static ArrayType *
make_state(const float8 *values, int n)
{
	Datum	   *d = (Datum *) palloc(sizeof(Datum) * n);

	for (int i = 0; i < n; i++)
		d[i] = Float8GetDatum(values[i]);
	return construct_array(d, n, FLOAT8OID, sizeof(float8), FLOAT8PASSBYVAL, TYPALIGN_DOUBLE);
}

Datum
vector_accum(PG_FUNCTION_ARGS)
{
	ArrayType  *state = PG_GETARG_ARRAYTYPE_P(0);
	Vector	   *v = PG_GETARG_VECTOR_P(1);
	int			n;
	float8	   *s = accum_state(state, &n);

	if (n == 1)
	{
		/* the first vector fixes the dimensions */
		float8	   *fresh = (float8 *) palloc0(sizeof(float8) * (v->dim + 1));

		fresh[0] = s[0];
		s = fresh;
		n = v->dim + 1;
	}
	else if (n - 1 != v->dim)
		ereport(ERROR,
				(errcode(ERRCODE_DATA_EXCEPTION),
				 errmsg("expected %d dimensions, not %d", n - 1, v->dim)));
	else
	{
		float8	   *copy = (float8 *) palloc(sizeof(float8) * n);

		memcpy(copy, s, sizeof(float8) * n);
		s = copy;
	}
	s[0] += 1.0;
	for (int i = 0; i < v->dim; i++)
	{
		s[i + 1] += (float8) v->x[i];
		if (std::isinf(s[i + 1]))
			float_overflow_error();
	}
	PG_RETURN_ARRAYTYPE_P(make_state(s, n));
}

Datum
vector_combine(PG_FUNCTION_ARGS)
{
	int			na,
				nb;
	float8	   *a = accum_state(PG_GETARG_ARRAYTYPE_P(0), &na);
	float8	   *b = accum_state(PG_GETARG_ARRAYTYPE_P(1), &nb);

	/* a state made by hand may hold more sums than a vector has dimensions
	 * (vector_accum refuses such a state: no vector matches it) */
	if (na > 1)
		vector_check_dim(na - 1);
	if (nb > 1)
		vector_check_dim(nb - 1);
	if (na == 1)
		PG_RETURN_ARRAYTYPE_P(make_state(b, nb));
	if (nb == 1)
		PG_RETURN_ARRAYTYPE_P(make_state(a, na));
	if (na != nb)
		ereport(ERROR,
				(errcode(ERRCODE_DATA_EXCEPTION),
				 errmsg("expected %d dimensions, not %d", na - 1, nb - 1)));

	float8	   *s = (float8 *) palloc(sizeof(float8) * na);

	for (int i = 0; i < na; i++)
	{
		s[i] = a[i] + b[i];
		if (std::isinf(s[i]))
			float_overflow_error();
	}
	PG_RETURN_ARRAYTYPE_P(make_state(s, na));
}

Datum
vector_avg(PG_FUNCTION_ARGS)
{
	int			n;
	float8	   *s = accum_state(PG_GETARG_ARRAYTYPE_P(0), &n);

	if (s[0] == 0.0)
		PG_RETURN_NULL();
	/* a state made by hand: nothing vector input refuses */
	vector_check_dim(n - 1);

	Vector	   *r = vector_new(n - 1);

	for (int i = 1; i < n; i++)
	{
		r->x[i - 1] = (float) (s[i] / s[0]);
		vector_check_element(r->x[i - 1]);
	}
	PG_RETURN_VECTOR_P(r);
}
