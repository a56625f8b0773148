/*
 * search_session.h — one search of an index by one statement, for any
 * number of prepared queries: the meta page and the settings read once;
 * the candidates of every query, through the GPU worker (the nodes appended
 * after its copy was made measured here and merged in) or on the CPU, only
 * allowed rows when the search has a set; and their settling against the
 * snapshot, part by part for many queries.  cagra_search (search_sql.cpp)
 * runs its queries through a session; the index scan and the filtered scan take one query's rows from
 * it in distance order (search_stream.h).  Backends only.
 */
#pragma once

#include "am/search_resolve.h"

typedef struct CagraSearchSession
{
	Relation	index;
	CagraMetaData meta;			/* as the search began */
	cagra::SearchPlan plan;		/* resolved once, as the search began */
	CagraAllowed *allowed;		/* NULL: every row */
	Snapshot	snapshot;
} CagraSearchSession;

/* A session and its plan: the settings and the meta page
 * (cagra_search_plan), where it runs (cagra.device and whether the worker
 * runs) and an index scan's first worker round, from the rows the index's
 * last scans in this backend returned (core/search_plan.h
 * resolve_search_site). */
void		cagra_session_init(CagraSearchSession *s, Relation index, const CagraMetaData *meta,
							   CagraAllowed *allowed, Snapshot snapshot);

/* Whether the session's searches go to the worker (its plan's site); ERROR
 * when cagra.device = gpu and the worker does not run. */
bool		cagra_session_on_worker(const CagraSearchSession *s);

/* An index scan's worker rounds returned `rows` rows: the first rounds of
 * the index's next sessions learn from it. */
void		cagra_session_remember_rows(const CagraSearchSession *s, uint32 rows);

/* ERROR unless the settings make a valid search (as the core checks them,
 * so a search the worker serves fails on bad settings as the CPU's does). */
void		cagra_session_check_params(const CagraSearchSession *s);

/* Candidates a query wanting k rows asks for: itopk_size at least, as
 * some may be invisible to the snapshot; at most what the worker answers. */
uint32		cagra_session_candidates_per_query(const CagraSearchSession *s, uint32 k);

/* The worker's request for the candidates of c. */
CagraSearchRequest cagra_session_request(const CagraSearchSession *s, const CagraCandidates *c);

/* Room for the heap TIDs the worker's copy gives with the candidates of c
 * (scratch, valid until the next search). */
uint64	   *cagra_session_copy_tids_room(const CagraCandidates *c);

/* Take the worker's answer into c: the nodes its copy lacks are measured
 * here and merged in, else its heap TIDs are kept (c->copy_tids). */
void		cagra_session_take_worker(const CagraSearchSession *s, const float *queries, const bool *present,
									  const CagraCopyExtent *copy, uint64 *copy_tids, CagraCandidates *c);

/* The candidates of c (c->kk of each present query) from the worker, with
 * the allowed rows when there are; false, the fallback reported
 * (cagra_client_search_fallback), when it did not serve them. */
bool		cagra_session_worker_candidates(const CagraSearchSession *s, const float *queries, const bool *present,
											CagraCandidates *c);

/*
 * Candidates of every present query into c->ids/dists (c->kk each, sorted,
 * kInvalidNode padded): with ask_worker, on the worker when it runs and kk
 * is within its limit, else on the CPU; only nodes of allowed rows when
 * the session has them (the worker maps the rows to its copy's nodes; the
 * backend reads the node headers only when it searches itself, and
 * measures every allowed node when that is cheaper or kk exceeds what a
 * traversal keeps).
 */
void		cagra_session_candidates(const CagraSearchSession *s, const float *queries, const bool *present,
									 CagraCandidates *c, bool ask_worker);

/*
 * Settle the candidates of c against the session's snapshot until each
 * present query has k VISIBLE slots (search_resolve.h); with allowed rows,
 * a query left short of k while allowed nodes remain unseen measures them
 * all and settles them in distance order, so it gets min(k, visible
 * allowed rows) however many of its candidates were dead.
 */
void		cagra_session_settle(const CagraSearchSession *s, Relation heap, const float *queries,
								 const bool *present, uint32 k, CagraCandidates *c);

/*
 * Many queries through the session, in parts whose scratch memory fits
 * work_mem (one query at least), so a call's memory does not grow with
 * their number: next_queries(arg, nq, queries, present) puts the next nq
 * queries, prepared, into `queries` (nq x dims; present[q] false for a
 * query that returns nothing); settled(arg, first, present, k, c) gets each
 * part's settled candidates (its queries numbered from `first`).  Through
 * the worker, each part after the first is queued before the part before
 * it is settled, so that the worker searches while the backend settles.
 */
typedef void (*CagraNextQueries) (void *arg, int nq, float *queries, bool *present);
typedef void (*CagraSettledPart) (void *arg, int first, const bool *present, uint32 k, const CagraCandidates *c);

void		cagra_session_search_all(const CagraSearchSession *s, Relation heap, int nitems, uint32 k,
									 CagraNextQueries next_queries, CagraSettledPart settled, void *arg);
