/*
 * halfvec.cpp — the `halfvec` type where cagra owns the types (pgvector is
 * absent): vectors of IEEE half-precision elements with pgvector's text form
 * ('[1,2,3]'), binary form (int16 dim, int16 unused, uint16 halves) and
 * layout, the typmod halfvec(n), casts to and from vector and arrays, and the
 * functions and operators on it (sql/install/vector.sql).
 *
 * Every operation widens its halfvec arguments to float vectors and calls
 * the vector function, so the two types compute alike, and as the index
 * does, which reads halfvec elements as floats.  Results that are vectors
 * are rounded back to halves; one that no half holds is an overflow.
 */
#include "type/vector.h"
#include "type/vector_math.h"
#include "type/vector_ops.h"

#include <cmath>

#include "core/distance.h"
#include "core/half.h"

extern "C" {
#include "catalog/pg_type.h"
#include "libpq/pqformat.h"
#include "utils/float.h"

PG_FUNCTION_INFO_V1(halfvec_in);
PG_FUNCTION_INFO_V1(halfvec_out);
PG_FUNCTION_INFO_V1(halfvec_typmod_in);
PG_FUNCTION_INFO_V1(halfvec_recv);
PG_FUNCTION_INFO_V1(halfvec_send);
PG_FUNCTION_INFO_V1(halfvec_typmod);
PG_FUNCTION_INFO_V1(array_to_halfvec);
PG_FUNCTION_INFO_V1(halfvec_to_float4);
PG_FUNCTION_INFO_V1(halfvec_to_vector);
PG_FUNCTION_INFO_V1(vector_to_halfvec);
PG_FUNCTION_INFO_V1(halfvec_l2_distance);
PG_FUNCTION_INFO_V1(halfvec_inner_product);
PG_FUNCTION_INFO_V1(halfvec_negative_inner_product);
PG_FUNCTION_INFO_V1(halfvec_cosine_distance);
PG_FUNCTION_INFO_V1(halfvec_l1_distance);
PG_FUNCTION_INFO_V1(halfvec_vector_dims);
PG_FUNCTION_INFO_V1(halfvec_l2_norm);
PG_FUNCTION_INFO_V1(halfvec_l2_normalize);
PG_FUNCTION_INFO_V1(halfvec_subvector);
PG_FUNCTION_INFO_V1(halfvec_add);
PG_FUNCTION_INFO_V1(halfvec_sub);
PG_FUNCTION_INFO_V1(halfvec_mul);
PG_FUNCTION_INFO_V1(halfvec_concat);
PG_FUNCTION_INFO_V1(halfvec_lt);
PG_FUNCTION_INFO_V1(halfvec_le);
PG_FUNCTION_INFO_V1(halfvec_eq);
PG_FUNCTION_INFO_V1(halfvec_ne);
PG_FUNCTION_INFO_V1(halfvec_ge);
PG_FUNCTION_INFO_V1(halfvec_gt);
PG_FUNCTION_INFO_V1(halfvec_cmp);
PG_FUNCTION_INFO_V1(halfvec_accum);
PG_FUNCTION_INFO_V1(halfvec_avg);
}

static HalfVector *
halfvec_new(int dim)
{
	Size		size = HALFVEC_SIZE(dim);
	HalfVector *h = (HalfVector *) palloc0(size);

	SET_VARSIZE(h, size);
	h->dim = (int16) dim;
	return h;
}

/* dim floats, each already checked to fit a half, as a halfvec. */
static HalfVector *
halfvec_of_floats(const float *x, int dim)
{
	HalfVector *h = halfvec_new(dim);

	cagra::floats_to_halves(x, h->x, (uint32_t) dim);
	return h;
}

/* A vector computed from halfvecs, rounded back to a halfvec. */
static Datum
halfvec_of_result(Datum vector)
{
	Vector	   *v = DatumGetVector(vector);

	for (int i = 0; i < v->dim; i++)
		if (std::fabs(v->x[i]) >= cagra::kHalfOverflow)
			float_overflow_error();
	return PointerGetDatum(halfvec_of_floats(v->x, v->dim));
}

static Vector *
halfvec_widen(const HalfVector *h)
{
	Vector	   *v = vector_new(h->dim);

	cagra::halves_to_floats(h->x, v->x, (uint32_t) h->dim);
	return v;
}

/* Argument n, a halfvec, as a vector datum. */
static Datum
widened_arg(FunctionCallInfo fcinfo, int n)
{
	return PointerGetDatum(halfvec_widen(PG_GETARG_HALFVEC_P(n)));
}

static void
check_same_dims(FunctionCallInfo fcinfo)
{
	HalfVector *a = PG_GETARG_HALFVEC_P(0);
	HalfVector *b = PG_GETARG_HALFVEC_P(1);

	if (a->dim != b->dim)
		ereport(ERROR,
				(errcode(ERRCODE_DATA_EXCEPTION),
				 errmsg("different halfvec dimensions %d and %d", a->dim, b->dim)));
}

/* The vector function `fn` of two halfvecs of the same dimensions. */
static Datum
call_on_pair(FunctionCallInfo fcinfo, PGFunction fn)
{
	check_same_dims(fcinfo);
	return DirectFunctionCall2(fn, widened_arg(fcinfo, 0), widened_arg(fcinfo, 1));
}

/* ---- input and output ---- */

/* halfvec_in(cstring, oid, integer): '[1, 2, 3]' -> halfvec */
Datum
halfvec_in(PG_FUNCTION_ARGS)
{
	int			dim;
	float	   *values = vector_parse_text(PG_GETARG_CSTRING(0), true, &dim);

	vector_check_typmod_dims(dim, PG_GETARG_INT32(2));
	PG_RETURN_POINTER(halfvec_of_floats(values, dim));
}

/* halfvec_out(halfvec): each element as the shortest text of its float */
Datum
halfvec_out(PG_FUNCTION_ARGS)
{
	Vector	   *v = DatumGetVector(widened_arg(fcinfo, 0));

	PG_RETURN_CSTRING(vector_floats_out(v->x, v->dim));
}

/* halfvec_typmod_in(cstring[]): halfvec(n) with 1 <= n <= 16000 */
Datum
halfvec_typmod_in(PG_FUNCTION_ARGS)
{
	PG_RETURN_INT32(vector_typmod_of(PG_GETARG_ARRAYTYPE_P(0), "halfvec"));
}

/* halfvec_recv(internal, oid, integer): int16 dim, int16 unused, uint16[dim] */
Datum
halfvec_recv(PG_FUNCTION_ARGS)
{
	StringInfo	buf = (StringInfo) PG_GETARG_POINTER(0);
	int16		dim = (int16) pq_getmsgint(buf, sizeof(int16));
	int16		unused = (int16) pq_getmsgint(buf, sizeof(int16));
	HalfVector *result;

	vector_check_dim_of("halfvec", dim);
	vector_check_typmod_dims(dim, PG_GETARG_INT32(2));
	if (unused != 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_BINARY_REPRESENTATION),
				 errmsg("invalid binary halfvec: the unused field must be 0, not %d", unused)));

	result = halfvec_new(dim);
	for (int i = 0; i < dim; i++)
	{
		result->x[i] = (uint16) pq_getmsgint(buf, sizeof(uint16));
		vector_check_element_of("halfvec", cagra::half_to_float(result->x[i]));
	}
	PG_RETURN_POINTER(result);
}

/* halfvec_send(halfvec) */
Datum
halfvec_send(PG_FUNCTION_ARGS)
{
	HalfVector *h = PG_GETARG_HALFVEC_P(0);
	StringInfoData buf;

	pq_begintypsend(&buf);
	pq_sendint16(&buf, h->dim);
	pq_sendint16(&buf, h->unused);
	for (int i = 0; i < h->dim; i++)
		pq_sendint16(&buf, h->x[i]);
	PG_RETURN_BYTEA_P(pq_endtypsend(&buf));
}

/* ---- casts ---- */

/* halfvec(halfvec, integer, boolean): the length coercion behind halfvec(n) */
Datum
halfvec_typmod(PG_FUNCTION_ARGS)
{
	HalfVector *h = PG_GETARG_HALFVEC_P(0);

	vector_check_typmod_dims(h->dim, PG_GETARG_INT32(1));
	PG_RETURN_POINTER(h);
}

/* array_to_halfvec(integer[] | real[] | double precision[] | numeric[],
 * integer, boolean) */
Datum
array_to_halfvec(PG_FUNCTION_ARGS)
{
	int			dim;
	float	   *values = vector_array_floats(PG_GETARG_ARRAYTYPE_P(0), PG_GETARG_INT32(1), true, &dim);

	PG_RETURN_POINTER(halfvec_of_floats(values, dim));
}

/* halfvec_to_float4(halfvec, integer, boolean): halfvec to real[] */
Datum
halfvec_to_float4(PG_FUNCTION_ARGS)
{
	Vector	   *v = DatumGetVector(widened_arg(fcinfo, 0));
	Datum	   *elems = (Datum *) palloc(sizeof(Datum) * v->dim);

	for (int i = 0; i < v->dim; i++)
		elems[i] = Float4GetDatum(v->x[i]);
	PG_RETURN_POINTER(construct_array(elems, v->dim, FLOAT4OID, sizeof(float4), true, TYPALIGN_INT));
}

/* halfvec_to_vector(halfvec, integer, boolean): exact, every half is a float */
Datum
halfvec_to_vector(PG_FUNCTION_ARGS)
{
	Vector	   *v = DatumGetVector(widened_arg(fcinfo, 0));

	vector_check_typmod_dims(v->dim, PG_GETARG_INT32(1));
	PG_RETURN_VECTOR_P(v);
}

/* vector_to_halfvec(vector, integer, boolean): each element rounded to the
 * nearest half; one beyond the largest half is an error */
Datum
vector_to_halfvec(PG_FUNCTION_ARGS)
{
	Vector	   *v = PG_GETARG_VECTOR_P(0);

	vector_check_typmod_dims(v->dim, PG_GETARG_INT32(1));
	for (int i = 0; i < v->dim; i++)
		vector_check_half_range(v->x[i], NULL, 0);
	PG_RETURN_POINTER(halfvec_of_floats(v->x, v->dim));
}

/* ---- distances and norms ---- */

Datum
halfvec_l2_distance(PG_FUNCTION_ARGS)
{
	return call_on_pair(fcinfo, l2_distance);
}

Datum
halfvec_inner_product(PG_FUNCTION_ARGS)
{
	return call_on_pair(fcinfo, inner_product);
}

Datum
halfvec_negative_inner_product(PG_FUNCTION_ARGS)
{
	return call_on_pair(fcinfo, vector_negative_inner_product);
}

Datum
halfvec_cosine_distance(PG_FUNCTION_ARGS)
{
	return call_on_pair(fcinfo, cosine_distance);
}

Datum
halfvec_l1_distance(PG_FUNCTION_ARGS)
{
	return call_on_pair(fcinfo, l1_distance);
}

/* vector_dims(halfvec) */
Datum
halfvec_vector_dims(PG_FUNCTION_ARGS)
{
	PG_RETURN_INT32(PG_GETARG_HALFVEC_P(0)->dim);
}

/* l2_norm(halfvec) */
Datum
halfvec_l2_norm(PG_FUNCTION_ARGS)
{
	return DirectFunctionCall1(vector_norm, widened_arg(fcinfo, 0));
}

/* ---- functions returning a halfvec ---- */

Datum
halfvec_l2_normalize(PG_FUNCTION_ARGS)
{
	return halfvec_of_result(DirectFunctionCall1(l2_normalize, widened_arg(fcinfo, 0)));
}

/* subvector(halfvec, start, count) */
Datum
halfvec_subvector(PG_FUNCTION_ARGS)
{
	HalfVector *h = PG_GETARG_HALFVEC_P(0);
	int			first;
	int			dim = vector_subrange(h->dim, PG_GETARG_INT32(1), PG_GETARG_INT32(2), "halfvec", &first);
	HalfVector *r = halfvec_new(dim);

	memcpy(r->x, h->x + first, sizeof(uint16) * dim);
	PG_RETURN_POINTER(r);
}

Datum
halfvec_add(PG_FUNCTION_ARGS)
{
	return halfvec_of_result(call_on_pair(fcinfo, vector_add));
}

Datum
halfvec_sub(PG_FUNCTION_ARGS)
{
	return halfvec_of_result(call_on_pair(fcinfo, vector_sub));
}

/* A product too small for a half underflows, as vector_mul's do for floats. */
Datum
halfvec_mul(PG_FUNCTION_ARGS)
{
	Datum		product = call_on_pair(fcinfo, vector_mul);
	HalfVector *r = (HalfVector *) DatumGetPointer(halfvec_of_result(product));
	Vector	   *v = DatumGetVector(product);

	for (int i = 0; i < r->dim; i++)
		if ((r->x[i] & 0x7FFF) == 0 && v->x[i] != 0.0f)
			float_underflow_error();
	PG_RETURN_POINTER(r);
}

/* halfvec || halfvec */
Datum
halfvec_concat(PG_FUNCTION_ARGS)
{
	HalfVector *a = PG_GETARG_HALFVEC_P(0);
	HalfVector *b = PG_GETARG_HALFVEC_P(1);
	int			dim = a->dim + b->dim;
	HalfVector *r;

	vector_check_dim_of("halfvec", dim);
	r = halfvec_new(dim);
	memcpy(r->x, a->x, sizeof(uint16) * a->dim);
	memcpy(r->x + a->dim, b->x, sizeof(uint16) * b->dim);
	PG_RETURN_POINTER(r);
}

/* ---- comparisons (the btree operator class), in vector_cmp's order ---- */

static int
compare_args(FunctionCallInfo fcinfo)
{
	return DatumGetInt32(DirectFunctionCall2(vector_cmp, widened_arg(fcinfo, 0), widened_arg(fcinfo, 1)));
}

Datum halfvec_lt(PG_FUNCTION_ARGS) { PG_RETURN_BOOL(compare_args(fcinfo) < 0); }
Datum halfvec_le(PG_FUNCTION_ARGS) { PG_RETURN_BOOL(compare_args(fcinfo) <= 0); }
Datum halfvec_eq(PG_FUNCTION_ARGS) { PG_RETURN_BOOL(compare_args(fcinfo) == 0); }
Datum halfvec_ne(PG_FUNCTION_ARGS) { PG_RETURN_BOOL(compare_args(fcinfo) != 0); }
Datum halfvec_ge(PG_FUNCTION_ARGS) { PG_RETURN_BOOL(compare_args(fcinfo) >= 0); }
Datum halfvec_gt(PG_FUNCTION_ARGS) { PG_RETURN_BOOL(compare_args(fcinfo) > 0); }
Datum halfvec_cmp(PG_FUNCTION_ARGS) { PG_RETURN_INT32(compare_args(fcinfo)); }

/* ---- avg(halfvec): vector's state (float8[] {count, sums}) ---- */

Datum
halfvec_accum(PG_FUNCTION_ARGS)
{
	return DirectFunctionCall2(vector_accum, PG_GETARG_DATUM(0), widened_arg(fcinfo, 1));
}

Datum
halfvec_avg(PG_FUNCTION_ARGS)
{
	LOCAL_FCINFO(avg, 1);
	Datum		mean;

	/* vector_avg returns NULL for no rows, which DirectFunctionCall refuses */
	InitFunctionCallInfoData(*avg, NULL, 1, InvalidOid, NULL, NULL);
	avg->args[0].value = PG_GETARG_DATUM(0);
	avg->args[0].isnull = false;
	mean = vector_avg(avg);
	if (avg->isnull)
		PG_RETURN_NULL();
	return halfvec_of_result(mean);
}
