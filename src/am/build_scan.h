/*
 * build_scan.h — the heap scan of a build (build_scan.cpp): serial or with
 * parallel workers, the rows streamed to the worker as they come.
 */
#pragma once

#include "am/build_rows.h"

/* Scan the heap into bs (vectors, TIDs, n); returns the heap's tuples. */
double		cagra_build_scan(Relation heap, Relation index, IndexInfo *indexInfo, CagraBuildState *bs);
void		cagra_build_stream_open(CagraBuildState *bs);
