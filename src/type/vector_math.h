/*
 * vector_math.h — the vector type's arithmetic, L1 distance, normalisation,
 * aggregates and subvector (vector_math.cpp), which the halfvec functions
 * call on widened arguments.
 */
#pragma once

#include "type/vector.h"

/* The part of positions [start, start + count) (1-based) inside a vector of
 * dim elements, as subvector() takes it: its first position (0-based) in
 * *first and its length; ERROR when it is empty. */
int			vector_subrange(int dim, int32 start, int32 count, const char *type_name, int *first);

extern "C" {
extern PGDLLEXPORT Datum l1_distance(PG_FUNCTION_ARGS);
extern PGDLLEXPORT Datum vector_add(PG_FUNCTION_ARGS);
extern PGDLLEXPORT Datum vector_sub(PG_FUNCTION_ARGS);
extern PGDLLEXPORT Datum vector_mul(PG_FUNCTION_ARGS);
extern PGDLLEXPORT Datum l2_normalize(PG_FUNCTION_ARGS);
extern PGDLLEXPORT Datum vector_accum(PG_FUNCTION_ARGS);
extern PGDLLEXPORT Datum vector_avg(PG_FUNCTION_ARGS);
}
