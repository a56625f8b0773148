/*
 * exhaustive.h — what a search stream (search_stream.h, behind the index
 * scan and the filtered scan) does when its graph search stops
 * (cagra.max_scan_tuples rows returned, or no more found) while the
 * executor still wants rows: every node not yet returned, in distance
 * order, so that LIMIT k returns as many rows as pass its filter, up to k,
 * less any the search missed closer than the last row it returned (they
 * would break the order).  And the rows a stream returned, which every
 * later row is checked against.
 */
#pragma once

#include "am/search_resolve.h"

extern "C" {
#include "utils/hsearch.h"
}

/* The rows a scan returned: their heap TIDs (HOT chains' roots, as the
 * index holds them) and the distance of the farthest (the last, as they
 * come in order). */
typedef struct CagraReturnedRows
{
	MemoryContext cxt;
	HTAB	   *tids;			/* made by the first row (rescans are many) */
	uint64		count;
	float		farthest;
} CagraReturnedRows;

/* An empty set, to live in `cxt`. */
void		cagra_returned_init(CagraReturnedRows *r, MemoryContext cxt);

/* Whether the scan returned the row. */
bool		cagra_returned_contains(const CagraReturnedRows *r, ItemPointer tid);

/* Whether the row (tid, distance) may come next: the scan has not returned
 * it, nor a row farther than it (cagra_before_returned). */
bool		cagra_returned_admits(const CagraReturnedRows *r, ItemPointer tid, float distance);

/* The scan returns the row. */
void		cagra_returned_add(CagraReturnedRows *r, ItemPointer tid, float distance);

/*
 * The exhaustive pass: every live node (of the rows `allowed` names, when
 * not NULL) measured against the prepared `query` once, reading the index
 * page group by page group; then handed out nearest first, sorted a batch
 * at a time (each batch the nearest of the rest, twice the batch before),
 * so a pass that is stopped early sorts little.  Memory: 8 bytes a node
 * slot.
 */
typedef struct CagraExhaustivePass CagraExhaustivePass;

CagraExhaustivePass *cagra_exhaustive_begin(Relation index, const CagraMetaData *meta, const float *query,
											const CagraAllowed *allowed);

/* The next nearest node still live (its header read again: vacuum may
 * have removed it meanwhile) that `returned` admits: its heap TID and
 * distance; false when none is left. */
bool		cagra_exhaustive_next(CagraExhaustivePass *p, const CagraReturnedRows *returned, ItemPointer tid,
								  float *distance);

void		cagra_exhaustive_end(CagraExhaustivePass *p);
