/*
 * search_stream.h — one query's rows of a search session (search_session.h),
 * nearest first, for as long as the caller asks: what the index scan
 * (scan.cpp) and the filtered scan (filtered_scan.cpp) return.
 *
 * The rows come in stages, each skipping what the stream returned before
 * and anything nearer than the last row it returned (CagraReturnedRows), so
 * the order the executor trusts holds:
 *
 *   1. rounds: the nearest kk candidates of the query, on the GPU worker
 *      (or, with allowed rows, on the CPU when the worker does not serve
 *      them); when the caller wants more than a round gave, the next round
 *      asks for twice as many, up to what the worker answers in one search
 *      (CAGRA_WORKER_MAX_K), or with allowed rows up to what one traversal
 *      keeps, the allowed rows or cagra.max_scan_tuples;
 *   2. without allowed rows, the CPU searcher continues where the rounds
 *      stop (or does it all without the worker), until cagra.max_scan_tuples
 *      rows or live / graph_degree of its own results;
 *   3. the exhaustive pass (exhaustive.h): every live node, of the allowed
 *      rows when there are, not yet returned, in distance order.
 *
 * Rows are heap TIDs as the index holds them (HOT chains' roots), of live
 * nodes; the caller checks them against its snapshot.
 */
#pragma once

#include "am/search_session.h"

typedef struct CagraSearchStream CagraSearchStream;

/* What a stream's searches did, for EXPLAIN ANALYZE. */
typedef struct CagraStreamCounts
{
	uint64		rounds;
	uint64		worker_rounds;	/* of them, served by the worker */
	uint64		exhaustive_passes;
} CagraStreamCounts;

/*
 * A stream of the rows nearest the prepared `query`, living in the current
 * memory context, its first round asked for at once.  ask_worker false
 * keeps a search without allowed rows off the worker (a NULL query, any
 * order); `limit`: the rows the caller's LIMIT wants (0 unknown), the first
 * round's size with allowed rows.
 */
CagraSearchStream *cagra_stream_begin(const CagraSearchSession *session, const float *query, bool ask_worker,
									  uint32 limit);

/* The next row (its heap TID and distance); false when none is left. */
bool		cagra_stream_next(CagraSearchStream *s, ItemPointer tid, float *distance);

const CagraStreamCounts *cagra_stream_counts(const CagraSearchStream *s);

/* The normal end of a stream (before its memory context is reset): pins
 * released; on error the resource owner releases them. */
void		cagra_stream_end(CagraSearchStream *s);
