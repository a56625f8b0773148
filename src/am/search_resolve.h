/*
 * search_resolve.h — the rows a filtered search may return, the candidates
 * of every query of a search with what is known of each, their settling
 * against a snapshot page by page, and scratch arrays kept between calls.
 * The search session (search_session.h) finds the candidates; backends only.
 */
#pragma once

extern "C" {
#include "postgres.h"
#include "storage/itemptr.h"
#include "utils/rel.h"
#include "utils/snapshot.h"
}

#include "am/cagra_am.h"
#include "client/client.h"

/* The nodes a filtered search may return. */
typedef struct CagraAllowed
{
	CagraAllowedTids rows;		/* what the worker is sent */
	/* the nodes, for the searches in the backend (cagra_allowed_nodes) */
	uint64	   *bits;			/* cagra_node_bitset_words(meta->n) words, or NULL */
	uint32		count;			/* bits set */
	uint32	   *ids;			/* the set bits' ids, ascending */
} CagraAllowed;

/* The allowed rows of `count` packed root TIDs (cagra_pack_tid), ascending
 * and without repeats; takes `packed`. */
CagraAllowed *cagra_allowed_packed(uint64 *packed, uint32 count);

/* Fill in the live nodes of the allowed rows (bits, count, ids), for a
 * search in the backend: the node headers read page by page, each page
 * share-locked once; nothing when they are known.  They live as long as
 * `a` (every part of a call's queries uses them). */
void		cagra_allowed_nodes(Relation index, const CagraMetaData *meta, CagraAllowed *a);

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
	bool		by_worker;		/* the worker found them (else the backend) */
	int			scratch_set;	/* which set of scratch arrays holds them */
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

/* An uninitialised array of `size` bytes, valid until the call returns.
 * Two sets: cagra_search keeps one part of its queries in each while the
 * worker searches the next (set 0 is everyone else's). */
#define CAGRA_SCRATCH_SETS 2
void	   *cagra_scratch(CagraScratchKind kind, Size size);
void	   *cagra_scratch_of(int set, CagraScratchKind kind, Size size);

/*
 * Settle the candidates of c until each present query has k VISIBLE slots
 * (or has no more candidates), reading node headers index page by page and
 * heap pages block by block.
 */
void		cagra_resolve(Relation index, const CagraMetaData *meta, Relation heap, Snapshot snapshot,
						  const bool *present, uint32 k, CagraCandidates *c);
/* As cagra_resolve, for long candidate lists of which many may be dead:
 * each round after the first takes at least as many candidates as the
 * rounds before it. */
void		cagra_resolve_widening(Relation index, const CagraMetaData *meta, Relation heap, Snapshot snapshot,
								   const bool *present, uint32 k, CagraCandidates *c);
