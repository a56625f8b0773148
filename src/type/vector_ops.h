/*
 * vector_ops.h — the vector type's distances, norm and comparison
 * (vector_ops.cpp), which the halfvec functions call on widened arguments.
 */
#pragma once

#include "type/vector.h"

extern "C" {
extern PGDLLEXPORT Datum l2_distance(PG_FUNCTION_ARGS);
extern PGDLLEXPORT Datum inner_product(PG_FUNCTION_ARGS);
extern PGDLLEXPORT Datum vector_negative_inner_product(PG_FUNCTION_ARGS);
extern PGDLLEXPORT Datum cosine_distance(PG_FUNCTION_ARGS);
extern PGDLLEXPORT Datum vector_norm(PG_FUNCTION_ARGS);
extern PGDLLEXPORT Datum vector_cmp(PG_FUNCTION_ARGS);
}
