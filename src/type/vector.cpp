/*
 * vector.cpp — the `vector` type: text and binary I/O, the typmod vector(n),
 * and casts between vector and arrays.
 *
 * Text form and binary form are pgvector's ('[1,2,3]'; int16 dim, int16
 * unused, float4 values), so dumps move freely between the two extensions.
 * Every function here is plain C-style code: nothing with a destructor lives
 * in a frame that may ereport(ERROR).
 */
#include "type/vector.h"

#include "core/format.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>

extern "C" {
#include "catalog/pg_type.h"
#include "common/shortest_dec.h"
#include "lib/stringinfo.h"
#include "libpq/pqformat.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/syscache.h"
#include "access/htup_details.h"

PG_FUNCTION_INFO_V1(vector_in);
PG_FUNCTION_INFO_V1(vector_out);
PG_FUNCTION_INFO_V1(vector_typmod_in);
PG_FUNCTION_INFO_V1(vector_recv);
PG_FUNCTION_INFO_V1(vector_send);
PG_FUNCTION_INFO_V1(vector);
PG_FUNCTION_INFO_V1(array_to_vector);
PG_FUNCTION_INFO_V1(vector_to_float4);
}

Vector *
vector_new(int dim)
{
	Size		size = VECTOR_SIZE(dim);
	Vector	   *v = (Vector *) palloc0(size);

	SET_VARSIZE(v, size);
	v->dim = (int16) dim;
	return v;
}

void
vector_check_dim_of(const char *type_name, int dim)
{
	if (dim < 1)
		ereport(ERROR,
				(errcode(ERRCODE_DATA_EXCEPTION),
				 errmsg("%s must have at least 1 dimension", type_name)));
	if (dim > VECTOR_MAX_DIM)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("%s cannot have more than %d dimensions", type_name, VECTOR_MAX_DIM)));
}

void
vector_check_dim(int dim)
{
	vector_check_dim_of("vector", dim);
}

void
vector_check_same_dims(const Vector *a, const Vector *b)
{
	if (a->dim != b->dim)
		ereport(ERROR,
				(errcode(ERRCODE_DATA_EXCEPTION),
				 errmsg("different vector dimensions %d and %d", a->dim, b->dim)));
}

/* NaN and infinity have no distance; reject them wherever a value enters. */
void
vector_check_element_of(const char *type_name, float value)
{
	if (std::isnan(value))
		ereport(ERROR,
				(errcode(ERRCODE_DATA_EXCEPTION),
				 errmsg("NaN not allowed in %s", type_name)));
	if (std::isinf(value))
		ereport(ERROR,
				(errcode(ERRCODE_DATA_EXCEPTION),
				 errmsg("infinite value not allowed in %s", type_name)));
}

void
vector_check_element(float value)
{
	vector_check_element_of("vector", value);
}

/* A typmod of -1 means "any dimension"; otherwise it is the dimension. */
void
vector_check_typmod_dims(int dim, int32 typmod)
{
	if (typmod != -1 && dim != typmod)
		ereport(ERROR,
				(errcode(ERRCODE_DATA_EXCEPTION),
				 errmsg("expected %d dimensions, not %d", typmod, dim)));
}

static void
syntax_error(const char *type_name, const char *input, const char *detail)
{
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_TEXT_REPRESENTATION),
			 errmsg("invalid input syntax for type %s: \"%s\"", type_name, input),
			 errdetail("%s", detail)));
}

static inline bool
is_space(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

static const char *
skip_spaces(const char *p)
{
	while (is_space(*p))
		p++;
	return p;
}

/* The name of the type in messages. */
static const char *
type_name_of(bool half)
{
	return half ? "halfvec" : "vector";
}

void
vector_check_half_range(float value, const char *text, int len)
{
	if (std::fabs(value) >= cagra::kHalfOverflow)
	{
		char		shortest[FLOAT_SHORTEST_DECIMAL_LEN + 1];

		if (text == NULL)
		{
			float_to_shortest_decimal_buf(value, shortest);
			text = shortest;
			len = (int) strlen(shortest);
		}
		ereport(ERROR,
				(errcode(ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE),
				 errmsg("\"%.*s\" is out of range for type halfvec", len, text)));
	}
}

/*
 * Parse one element at *pp (leading blanks allowed) and advance past it.
 * strtof also accepts "nan" and "inf"; vector_check_element_of() rejects
 * those.
 */
static float
parse_element(const char *input, const char **pp, bool half)
{
	const char *start = skip_spaces(*pp);
	char	   *end;
	float		value;

	if (*start == ',' || *start == ']' || *start == '\0')
		syntax_error(type_name_of(half), input, "Expected a number.");
	errno = 0;
	value = strtof(start, &end);
	if (end == start)
		syntax_error(type_name_of(half), input, "Expected a number.");
	if (errno == ERANGE && std::isinf(value))
		ereport(ERROR,
				(errcode(ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE),
				 errmsg("\"%s\" is out of range for type %s",
						pnstrdup(start, end - start), half ? "halfvec" : "real")));
	vector_check_element_of(type_name_of(half), value);
	if (half)
		vector_check_half_range(value, start, (int) (end - start));
	*pp = end;
	return value;
}

/* Every element but the first follows a comma: an upper bound on the
 * number of elements, capped one past the limit. */
static int
count_elements_bound(const char *input)
{
	int			n = 1;

	for (const char *p = input; *p && n <= VECTOR_MAX_DIM; p++)
		n += (*p == ',');
	return Min(n, VECTOR_MAX_DIM);
}

float *
vector_parse_text(const char *input, bool half, int *dim_out)
{
	const char *type_name = type_name_of(half);
	int			capacity = count_elements_bound(input);
	float	   *values = (float *) palloc(sizeof(float) * capacity);
	const char *p = skip_spaces(input);
	int			dim = 0;

	if (*p != '[')
		syntax_error(type_name, input, "Vector contents must start with \"[\".");
	p = skip_spaces(p + 1);
	if (*p == ']')
		vector_check_dim_of(type_name, 0);

	for (;;)
	{
		if (dim == capacity)	/* only when capacity is VECTOR_MAX_DIM */
			vector_check_dim_of(type_name, dim + 1);
		values[dim++] = parse_element(input, &p, half);
		p = skip_spaces(p);
		if (*p == ',')
		{
			p++;
			continue;
		}
		if (*p == ']')
			break;
		syntax_error(type_name, input, *p == '\0'
					 ? "Vector contents must end with \"]\"."
					 : "Expected \",\" or \"]\" after a number.");
	}
	p = skip_spaces(p + 1);
	if (*p != '\0')
		syntax_error(type_name, input, "Junk after closing \"]\".");
	*dim_out = dim;
	return values;
}

/* vector_in(cstring, oid, integer): '[1, 2, 3]' -> vector */
Datum
vector_in(PG_FUNCTION_ARGS)
{
	int			dim;
	float	   *values = vector_parse_text(PG_GETARG_CSTRING(0), false, &dim);
	Vector	   *result;

	vector_check_typmod_dims(dim, PG_GETARG_INT32(2));
	result = vector_new(dim);
	memcpy(result->x, values, sizeof(float) * dim);
	pfree(values);
	PG_RETURN_VECTOR_P(result);
}

char *
vector_floats_out(const float *x, int dim)
{
	char	   *buf = (char *) palloc(dim * (FLOAT_SHORTEST_DECIMAL_LEN + 1) + 2);
	char	   *p = buf;

	*p++ = '[';
	for (int i = 0; i < dim; i++)
	{
		if (i > 0)
			*p++ = ',';
		p += float_to_shortest_decimal_bufn(x[i], p);
	}
	*p++ = ']';
	*p = '\0';
	return buf;
}

/* vector_out(vector): the shortest text that reads back to the same floats */
Datum
vector_out(PG_FUNCTION_ARGS)
{
	Vector	   *v = PG_GETARG_VECTOR_P(0);
	char	   *text = vector_floats_out(v->x, v->dim);

	PG_FREE_IF_COPY(v, 0);
	PG_RETURN_CSTRING(text);
}

int32
vector_typmod_of(ArrayType *mods, const char *type_name)
{
	int			n;
	int32	   *values = ArrayGetIntegerTypmods(mods, &n);

	if (n != 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid type modifier"),
				 errhint("Write %s(n), with n the number of dimensions.", type_name)));
	if (values[0] < 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("dimensions for type %s must be at least 1", type_name)));
	if (values[0] > VECTOR_MAX_DIM)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("dimensions for type %s cannot exceed %d", type_name, VECTOR_MAX_DIM)));
	return values[0];
}

/* vector_typmod_in(cstring[]): vector(n) with 1 <= n <= 16000 */
Datum
vector_typmod_in(PG_FUNCTION_ARGS)
{
	PG_RETURN_INT32(vector_typmod_of(PG_GETARG_ARRAYTYPE_P(0), "vector"));
}

/* vector_recv(internal, oid, integer): int16 dim, int16 unused, float4[dim] */
Datum
vector_recv(PG_FUNCTION_ARGS)
{
	StringInfo	buf = (StringInfo) PG_GETARG_POINTER(0);
	int32		typmod = PG_GETARG_INT32(2);
	int16		dim = (int16) pq_getmsgint(buf, sizeof(int16));
	int16		unused = (int16) pq_getmsgint(buf, sizeof(int16));
	Vector	   *result;

	vector_check_dim(dim);
	vector_check_typmod_dims(dim, typmod);
	if (unused != 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_BINARY_REPRESENTATION),
				 errmsg("invalid binary vector: the unused field must be 0, not %d", unused)));

	result = vector_new(dim);
	for (int i = 0; i < dim; i++)
	{
		result->x[i] = pq_getmsgfloat4(buf);
		vector_check_element(result->x[i]);
	}
	PG_RETURN_VECTOR_P(result);
}

/* vector_send(vector) */
Datum
vector_send(PG_FUNCTION_ARGS)
{
	Vector	   *v = PG_GETARG_VECTOR_P(0);
	StringInfoData buf;

	pq_begintypsend(&buf);
	pq_sendint16(&buf, v->dim);
	pq_sendint16(&buf, v->unused);
	for (int i = 0; i < v->dim; i++)
		pq_sendfloat4(&buf, v->x[i]);
	PG_RETURN_BYTEA_P(pq_endtypsend(&buf));
}

/* vector(vector, integer, boolean): the length coercion behind vector(n) */
Datum
vector(PG_FUNCTION_ARGS)
{
	Vector	   *v = PG_GETARG_VECTOR_P(0);

	vector_check_typmod_dims(v->dim, PG_GETARG_INT32(1));
	PG_RETURN_VECTOR_P(v);
}

/* One array element as a float4, for the element types the casts accept. */
static float
element_to_float(Datum d, Oid elemtype, const char *type_name)
{
	switch (elemtype)
	{
		case INT4OID:
			return (float) DatumGetInt32(d);
		case FLOAT4OID:
			return DatumGetFloat4(d);
		case FLOAT8OID:
			{
				double		value = DatumGetFloat8(d);
				float		f = (float) value;

				if (std::isinf(f) && std::isfinite(value))
					ereport(ERROR,
							(errcode(ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE),
							 errmsg("value out of range: overflow")));
				return f;
			}
		case NUMERICOID:
			return DatumGetFloat4(DirectFunctionCall1(numeric_float4, d));
		default:
			ereport(ERROR,
					(errcode(ERRCODE_DATATYPE_MISMATCH),
					 errmsg("cannot cast an array of type %s to %s",
							format_type_be(elemtype), type_name)));
	}
	return 0;					/* not reached */
}

float *
vector_array_floats(ArrayType *array, int32 typmod, bool half, int *dim)
{
	const char *type_name = type_name_of(half);
	Oid			elemtype = ARR_ELEMTYPE(array);
	int16		typlen;
	bool		typbyval;
	char		typalign;
	Datum	   *elems;
	int			n;
	float	   *values;

	if (ARR_NDIM(array) > 1)
		ereport(ERROR,
				(errcode(ERRCODE_DATA_EXCEPTION),
				 errmsg("array must be 1-D")));
	if (array_contains_nulls(array))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("array must not contain nulls")));

	get_typlenbyvalalign(elemtype, &typlen, &typbyval, &typalign);
	deconstruct_array(array, elemtype, typlen, typbyval, typalign, &elems, NULL, &n);
	vector_check_dim_of(type_name, n);
	vector_check_typmod_dims(n, typmod);

	values = (float *) palloc(sizeof(float) * n);
	for (int i = 0; i < n; i++)
	{
		values[i] = element_to_float(elems[i], elemtype, type_name);
		vector_check_element_of(type_name, values[i]);
		if (half)
			vector_check_half_range(values[i], NULL, 0);
	}
	pfree(elems);
	*dim = n;
	return values;
}

/* array_to_vector(integer[] | real[] | double precision[] | numeric[],
 * integer, boolean): the casts from arrays */
Datum
array_to_vector(PG_FUNCTION_ARGS)
{
	int			n;
	float	   *values = vector_array_floats(PG_GETARG_ARRAYTYPE_P(0), PG_GETARG_INT32(1), false, &n);
	Vector	   *result = vector_new(n);

	memcpy(result->x, values, sizeof(float) * n);
	pfree(values);
	PG_RETURN_VECTOR_P(result);
}

/* vector_to_float4(vector, integer, boolean): vector to real[] */
Datum
vector_to_float4(PG_FUNCTION_ARGS)
{
	Vector	   *v = PG_GETARG_VECTOR_P(0);
	Datum	   *elems = (Datum *) palloc(sizeof(Datum) * v->dim);
	ArrayType  *result;

	for (int i = 0; i < v->dim; i++)
		elems[i] = Float4GetDatum(v->x[i]);
	result = construct_array(elems, v->dim, FLOAT4OID, sizeof(float4), true,
							 TYPALIGN_INT);
	pfree(elems);
	PG_FREE_IF_COPY(v, 0);
	PG_RETURN_POINTER(result);
}

/* ---- halfvec (pgvector's), read as floats ---- */

bool
vector_type_is_halfvec(Oid typid)
{
	HeapTuple	tup = SearchSysCache1(TYPEOID, ObjectIdGetDatum(typid));
	bool		half = false;

	if (HeapTupleIsValid(tup))
	{
		Form_pg_type t = (Form_pg_type) GETSTRUCT(tup);

		half = strcmp(NameStr(t->typname), "halfvec") == 0 && t->typlen == -1;
		ReleaseSysCache(tup);
	}
	return half;
}

const float *
vector_datum_floats(Datum d, bool half, int *dim)
{
	if (!half)
	{
		Vector	   *v = DatumGetVector(d);

		*dim = v->dim;
		return v->x;
	}

	HalfVector *h = (HalfVector *) PG_DETOAST_DATUM(d);
	float	   *out = (float *) palloc(sizeof(float) * Max(h->dim, 1));

	for (int i = 0; i < h->dim; i++)
		out[i] = cagra::half_to_float(h->x[i]);
	*dim = h->dim;
	return out;
}
