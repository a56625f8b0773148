/*
 * search_resolve.h — what cagra_search (search_sql.cpp) and the resolution of
 * a whole batch's candidates (search_resolve.cpp) share: the candidates of
 * every query with what is known of each, and scratch arrays kept between
 * calls.  Backends only.
 */
#pragma once

extern "C" {
#include "postgres.h"
#include "storage/itemptr.h"
#include "utils/rel.h"
#include "utils/snapshot.h"
}

#include "am/cagra_am.h"

/* What is known of one candidate (query q, rank i: candidate q * kk + i). */
#define CAGRA_CAND_UNKNOWN 0
#define CAGRA_CAND_LIVE 1		/* header read: a live node, tid = its heap TID */
#define CAGRA_CAND_DROPPED 2	/* deleted node or no visible tuple */
#define CAGRA_CAND_VISIBLE 3	/* tid = the visible tuple's TID */

typedef struct CagraCandidates
{
	int			nq;
	uint32		kk;				/* candidates per query */
	uint32	   *ids;			/* nq x kk node ids, cagra::kInvalidNode padded */
	float	   *dists;			/* nq x kk */
	uint8	   *state;			/* nq x kk CAGRA_CAND_* */
	ItemPointerData *tids;		/* nq x kk */
	uint64	   *copy_tids;		/* nq x kk heap TIDs from the worker's copy, or NULL */
} CagraCandidates;

/* ---- scratch arrays ----
 *
 * A batch of 10,000 queries needs some 20 MB of arrays (queries, candidates,
 * sort records).  Allocated afresh for every call, each of their pages
 * costs a page fault (and its zeroing by the kernel) every time, a large
 * part of the call's CPU time.  So the backend keeps them between calls, up
 * to CAGRA_SCRATCH_KEEP bytes in all; larger needs get call-lifetime memory.
 * Nothing in them outlives a call.
 */
typedef enum CagraScratchKind
{
	CAGRA_SCRATCH_QUERIES,
	CAGRA_SCRATCH_IDS,
	CAGRA_SCRATCH_DISTS,
	CAGRA_SCRATCH_STATE,
	CAGRA_SCRATCH_TIDS,
	CAGRA_SCRATCH_COPY_TIDS,
	CAGRA_SCRATCH_CANDS,
	CAGRA_SCRATCH_WORK,
	CAGRA_SCRATCH_SORTED,
	CAGRA_SCRATCH_COUNTS,
	CAGRA_SCRATCH_KINDS
} CagraScratchKind;

/* An uninitialised array of `size` bytes, valid until the call returns. */
void	   *cagra_scratch(CagraScratchKind kind, Size size);

/*
 * Settle the candidates of c until each present query has k VISIBLE slots
 * (or has no more candidates), reading node headers index page by page and
 * heap pages block by block.
 */
void		cagra_resolve(Relation index, const CagraMetaData *meta, Relation heap, Snapshot snapshot,
						  const bool *present, uint32 k, CagraCandidates *c);
