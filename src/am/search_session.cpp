/*
 * search_session.cpp — one search of an index for any number of prepared
 * queries (search_session.h): its candidates through the worker or on the
 * CPU (a traversal, or every allowed node measured), and their settling.
 */
#include "am/search_session.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "am/accessor.h"
#include "am/worker_copy.h"
#include "core/search.h"

extern "C" {
#include "miscadmin.h"
}

/* ---- the plan ---- */

/*
 * The rows the last index scans of an index returned from their worker
 * rounds in this backend, for the first round of the next
 * (cagra::scan_first_round_k): under a filter the index cannot see (WHERE
 * ... ORDER BY v <-> q LIMIT k, the index scan plan) a scan returns about k
 * / the filter's pass rate of them, so a first round of itopk_size runs out
 * and further rounds must follow, each a request to the worker.
 */
#define CAGRA_ROUND_MEMORY 8	/* indexes remembered */
#define CAGRA_ROUND_HISTORY 16	/* scans remembered per index */

static struct
{
	Oid			index;
	uint32		returned[CAGRA_ROUND_HISTORY];	/* 0: no scan yet */
	int			next;
}			cagra_round_memory[CAGRA_ROUND_MEMORY];
static int	cagra_round_memory_next = 0;

/* The rows remembered of `index`'s last scans, or NULL. */
static const uint32 *
cagra_recent_rows(Oid index)
{
	for (int i = 0; i < CAGRA_ROUND_MEMORY; i++)
		if (cagra_round_memory[i].index == index)
			return cagra_round_memory[i].returned;
	return NULL;
}

void
cagra_session_remember_rows(const CagraSearchSession *s, uint32 rows)
{
	Oid			index = RelationGetRelid(s->index);
	int			i;

	for (i = 0; i < CAGRA_ROUND_MEMORY && cagra_round_memory[i].index != index; i++)
		;
	if (i == CAGRA_ROUND_MEMORY)
	{
		i = cagra_round_memory_next;
		cagra_round_memory_next = (cagra_round_memory_next + 1) % CAGRA_ROUND_MEMORY;
		memset(&cagra_round_memory[i], 0, sizeof(cagra_round_memory[i]));
		cagra_round_memory[i].index = index;
	}
	cagra_round_memory[i].returned[cagra_round_memory[i].next] = Max(rows, 1);
	cagra_round_memory[i].next = (cagra_round_memory[i].next + 1) % CAGRA_ROUND_HISTORY;
}

void
cagra_session_init(CagraSearchSession *s, Relation index, const CagraMetaData *meta, CagraAllowed *allowed,
				   Snapshot snapshot)
{
	const uint32 *recent = cagra_recent_rows(RelationGetRelid(index));

	s->index = index;
	s->meta = *meta;
	s->plan = cagra_search_plan(meta);
	cagra::resolve_search_site(s->plan, cagra_client_worker_serves_searches(), recent,
							   recent ? CAGRA_ROUND_HISTORY : 0, CAGRA_WORKER_MAX_K);
	s->allowed = allowed;
	s->snapshot = snapshot;
}

bool
cagra_session_on_worker(const CagraSearchSession *s)
{
	/* with cagra.device = gpu, cagra_client_wants_worker raises the error */
	return s->plan.site == cagra::SearchSite::Worker ||
		(cagra_device == CAGRA_SEARCH_GPU && cagra_client_wants_worker("search"));
}

void
cagra_session_check_params(const CagraSearchSession *s)
{
	cagra_guard_or_error([s] { cagra::validate_search_params(s->plan.params, 0); });
}

uint32
cagra_session_candidates_per_query(const CagraSearchSession *s, uint32 k)
{
	return Min((uint32) CAGRA_WORKER_MAX_K, Max(s->plan.params.itopk_size, k));
}

/* ---- on the worker ---- */

CagraSearchRequest
cagra_session_request(const CagraSearchSession *s, const CagraCandidates *c)
{
	CagraSearchRequest req = s->plan;

	req.k = c->kk;
	req.params.itopk_size = c->kk;	/* the worker's limit, CAGRA_WORKER_MAX_K */
	return req;
}

uint64 *
cagra_session_copy_tids_room(const CagraCandidates *c)
{
	return (uint64 *) cagra_scratch_of(c->scratch_set, CAGRA_SCRATCH_COPY_TIDS,
									   sizeof(uint64) * (Size) c->nq * c->kk);
}

void
cagra_session_take_worker(const CagraSearchSession *s, const float *queries, const bool *present,
						  const CagraCopyExtent *copy, uint64 *copy_tids, CagraCandidates *c)
{
	c->by_worker = true;
	/* the merge moves candidates: their copy TIDs would not follow */
	if (cagra_copy_is_partial(&s->meta, copy))
		cagra_merge_tail(s->index, &s->meta, copy, c->nq, queries, present,
						 s->allowed ? &s->allowed->rows : NULL, c->kk, c->ids, c->dists);
	else
		c->copy_tids = copy_tids;
}

bool
cagra_session_worker_candidates(const CagraSearchSession *s, const float *queries, const bool *present,
								CagraCandidates *c)
{
	CagraSearchRequest req = cagra_session_request(s, c);
	char		why[256];
	CagraCopyExtent copy;
	uint64	   *copy_tids = cagra_session_copy_tids_room(c);
	CagraOffload r = cagra_search_through_worker(s->index, &s->meta, &req, (uint32) c->nq, queries,
												 s->allowed ? &s->allowed->rows : NULL, c->ids, c->dists,
												 copy_tids, NULL, &copy, why, sizeof(why));

	if (r != CAGRA_OFFLOAD_OK)
	{
		cagra_client_search_fallback(r, why);
		return false;
	}
	cagra_session_take_worker(s, queries, present, &copy, copy_tids, c);
	return true;
}

/* ---- on the CPU ---- */

/* The CPU path for one query: up to k live node ids and distances (only
 * allowed nodes, unless allowed is NULL). */
static void
cagra_cpu_search_query(Relation index, const CagraMetaData *meta, const float *query, uint32 k,
					   const cagra::SearchParams &params, const CagraAllowed *allowed, uint32 *ids, float *dists,
					   CagraStatus *st) noexcept
{
	cagra_guard(st, [&] {
		/* pinned pages and the entry-vector cache, as an index scan has */
		CagraPageAccessor acc(index, *meta, true, true);
		std::vector<uint32_t> entries(meta->entries, meta->entries + meta->entry_count);
		auto		s = cagra_new_searcher(acc, query, params, entries);
		std::vector<cagra::Neighbor> out(k);
		auto		live = [&acc, allowed](uint32_t id) {
			CagraPageAccessor::NodeInfo info;

			return (!allowed || cagra_node_bit(allowed->bits, id)) && acc.node_info(id, &info) &&
				cagra_node_is_live(info.flags);
		};
		uint32		got = s->next(k, live, out.data());

		for (uint32 i = 0; i < k; i++)
		{
			ids[i] = i < got ? out[i].id : cagra::kInvalidNode;
			dists[i] = i < got ? out[i].distance : INFINITY;
		}
		acc.release_pins();
	});
}

/*
 * Merge `count` candidates (ids, distances; sorted) into a query's sorted
 * row of kk (kInvalidNode and infinity padded), keeping the kk nearest.
 */
static void
cagra_merge_sorted(uint32 *row, float *rowd, uint32 kk, const uint32 *ids, const float *dists, uint32 count,
				   uint32 *scratch, float *scratchd)
{
	uint32		a = 0,
				b = 0;

	for (uint32 i = 0; i < kk; i++)
	{
		/* a + b == i < kk: the row is never used up */
		bool		take_new = b < count && dists[b] < rowd[a];

		scratch[i] = take_new ? ids[b] : row[a];
		scratchd[i] = take_new ? dists[b++] : rowd[a++];
	}
	memcpy(row, scratch, kk * sizeof(uint32));
	memcpy(rowd, scratchd, kk * sizeof(float));
}

/* Allowed nodes measured at a time: as many vectors as fit work_mem,
 * min_block at least. */
static uint32
cagra_allowed_block(const CagraMetaData *meta, const CagraAllowed *allowed, uint32 min_block)
{
	Size		fit = (Size) work_mem * 1024 / cagra_format_of(meta).vector_bytes();

	return (uint32) Max(Min((Size) allowed->count, Max(fit, (Size) min_block)), (Size) 1);
}

/*
 * The distances of every present query to every allowed node, the nodes
 * taken a block at a time (their vectors, read once for all queries, fit
 * work_mem, min_block nodes at least), so the memory does not grow with
 * their number: measured(first, nblock, q, d) gets query q's distances to
 * allowed->ids[first .. first + nblock).
 */
template <typename Measured>
static void
cagra_measure_allowed(Relation index, const CagraMetaData *meta, const float *queries, const bool *present, int nq,
					  const CagraAllowed *allowed, uint32 min_block, Measured measured)
{
	cagra::VectorFormat format = cagra_format_of(meta);
	uint32		vbytes = format.vector_bytes();
	uint32		voff = cagra_vector_offset(meta->graph_degree);
	uint32		block = cagra_allowed_block(meta, allowed, min_block);
	char	   *vecs = (char *) palloc_extended((Size) block * vbytes, MCXT_ALLOC_HUGE);
	float	   *d = (float *) palloc_extended(sizeof(float) * block, MCXT_ALLOC_HUGE);
	CagraStatus st;

	for (uint32 first = 0; first < allowed->count; first += block)
	{
		uint32		nblock = Min(block, allowed->count - first);

		for (uint32 i = 0; i < nblock; i++)
			cagra_read_record_bytes(index, meta, allowed->ids[first + i], voff, vbytes, vecs + (Size) i * vbytes);
		for (int q = 0; q < nq; q++)
		{
			const float *query = queries + (Size) q * meta->dims;

			if (!present[q])
				continue;
			if (!cagra_guard(&st, [&] {
					for (uint32 i = 0; i < nblock; i++)
						d[i] = format.distance(query, vecs + (Size) i * vbytes);
				}))
				cagra_report_status(&st);
			measured(first, nblock, q, d);
			CHECK_FOR_INTERRUPTS();
		}
	}
	pfree(vecs);
	pfree(d);
}

/* Every query against every allowed node: the kk nearest of them. */
static void
cagra_exact_allowed(Relation index, const CagraMetaData *meta, const float *queries, const bool *present,
					const CagraAllowed *allowed, CagraCandidates *c)
{
	uint32	   *order = (uint32 *) palloc_extended(sizeof(uint32) * cagra_allowed_block(meta, allowed, c->kk),
											   MCXT_ALLOC_HUGE);
	uint32	   *best = (uint32 *) palloc(sizeof(uint32) * c->kk * 2);
	float	   *bestd = (float *) palloc(sizeof(float) * c->kk * 2);

	/* empty rows (a worker that failed half way may have written into them) */
	for (Size i = 0; i < (Size) c->nq * c->kk; i++)
	{
		c->ids[i] = cagra::kInvalidNode;
		c->dists[i] = INFINITY;
	}
	cagra_measure_allowed(index, meta, queries, present, c->nq, allowed, c->kk,
						  [&](uint32 first, uint32 nblock, int q, const float *d) {
							  uint32	  take = Min(nblock, c->kk);

							  for (uint32 i = 0; i < nblock; i++)
								  order[i] = i;
							  std::partial_sort(order, order + take, order + nblock,
												[d](uint32 a, uint32 b) { return d[a] < d[b]; });
							  for (uint32 i = 0; i < take; i++)
							  {
								  best[i] = allowed->ids[first + order[i]];
								  bestd[i] = d[order[i]];
							  }
							  cagra_merge_sorted(c->ids + (Size) q * c->kk, c->dists + (Size) q * c->kk, c->kk,
												 best, bestd, take, best + c->kk, bestd + c->kk);
						  });
	pfree(order);
	pfree(best);
	pfree(bestd);
}

void
cagra_session_candidates(const CagraSearchSession *s, const float *queries, const bool *present,
						 CagraCandidates *c, bool ask_worker)
{
	const CagraMetaData *meta = &s->meta;
	CagraAllowed *allowed = s->allowed;
	cagra::SearchParams params = s->plan.params;

	if (ask_worker && c->kk <= CAGRA_WORKER_MAX_K && cagra_session_on_worker(s) &&
		cagra_session_worker_candidates(s, queries, present, c))
		return;
	params.itopk_size = Max(params.itopk_size, c->kk);
	if (allowed)
	{
		cagra_allowed_nodes(s->index, meta, allowed);

		/* planned at the width the backend's Searcher runs (from the entry
		 * index of the entries, when the index has any) */
		cagra::FilteredSearchPlan plan = cagra::plan_filtered_search(cagra::cpu_search_params(params,
																							  meta->entry_count > 0),
																	 meta->graph_degree, allowed->count,
																	 meta->n, cagra::kMaxItopk);

		/* more candidates than a traversal keeps: every allowed node */
		if (plan.exact || c->kk > cagra::kMaxItopk)
		{
			cagra_exact_allowed(s->index, meta, queries, present, allowed, c);
			return;
		}
		params = plan.params;
	}
	for (int q = 0; q < c->nq; q++)
	{
		CagraStatus st;

		if (!present[q])
			continue;
		cagra_cpu_search_query(s->index, meta, queries + (Size) q * meta->dims, c->kk, params, allowed,
							   c->ids + (Size) q * c->kk, c->dists + (Size) q * c->kk, &st);
		if (!st.ok)
			cagra_report_status(&st);
		CHECK_FOR_INTERRUPTS();
	}
}

/* ---- settling ---- */

/*
 * A query's candidates are its kk nearest allowed nodes at most: when the
 * nearest are dead or invisible to the snapshot, settling them leaves it
 * short of k rows while other allowed rows may be visible.  The queries so
 * left short, into short_queries; a query whose candidates already covered
 * every allowed node has all there is.
 */
static int
cagra_short_queries(const CagraSearchSession *s, const bool *present, uint32 k, const CagraCandidates *c,
					int *short_queries)
{
	const CagraMetaData *meta = &s->meta;
	CagraAllowed *allowed = s->allowed;
	int			nshort = 0;
	uint64	   *covered = NULL;

	for (int q = 0; q < c->nq; q++)
	{
		const uint8 *st = c->state + (Size) q * c->kk;
		const uint32 *row = c->ids + (Size) q * c->kk;
		uint32		visible = 0,
					distinct = 0,
					seen = 0;

		if (!present[q])
			continue;
		for (uint32 i = 0; i < c->kk; i++)
			visible += st[i] == CAGRA_CAND_VISIBLE;
		if (visible >= k)
			continue;
		if (!covered)
			covered = (uint64 *) palloc_extended(sizeof(uint64) * Max(cagra_node_bitset_words(meta->n), (Size) 1),
												 MCXT_ALLOC_HUGE | MCXT_ALLOC_ZERO);
		/* distinct candidates (a reused slot may come both from the
		 * worker's copy and from the pages), all of allowed rows; as many
		 * as the allowed rows (one live node a row at most): all of them,
		 * without reading the node headers */
		for (uint32 i = 0; i < c->kk; i++)
			if (row[i] < meta->n && !cagra_node_bit(covered, row[i]))
			{
				covered[row[i] >> 6] |= UINT64CONST(1) << (row[i] & 63);
				distinct++;
			}
		if (distinct < allowed->rows.count)
		{
			cagra_allowed_nodes(s->index, meta, allowed);
			for (uint32 i = 0; i < c->kk; i++)
				if (row[i] < meta->n && cagra_node_bit(covered, row[i]) && cagra_node_bit(allowed->bits, row[i]))
				{
					covered[row[i] >> 6] &= ~(UINT64CONST(1) << (row[i] & 63));
					seen++;
				}
			if (seen < allowed->count)
				short_queries[nshort++] = q;
		}
		for (uint32 i = 0; i < c->kk; i++)
			if (row[i] < meta->n)
				covered[row[i] >> 6] &= ~(UINT64CONST(1) << (row[i] & 63));
	}
	if (covered)
		pfree(covered);
	return nshort;
}

/* Every allowed node as the candidates of each query of `all` (all.kk of
 * them), measured and sorted by distance; order and sorted have room for
 * all.kk. */
static void
cagra_all_allowed_in_order(const CagraSearchSession *s, const float *queries, const bool *present,
						   CagraCandidates *all, uint32 *order, float *sorted)
{
	const CagraAllowed *allowed = s->allowed;
	uint32		kk = all->kk;

	cagra_measure_allowed(s->index, &s->meta, queries, present, all->nq, allowed, 1,
						  [&](uint32 first, uint32 nblock, int q, const float *d) {
							  memcpy(all->dists + (Size) q * kk + first, d, sizeof(float) * nblock);
						  });
	for (int q = 0; q < all->nq; q++)
	{
		uint32	   *ids = all->ids + (Size) q * kk;
		float	   *dists = all->dists + (Size) q * kk;

		for (uint32 i = 0; i < kk; i++)
			order[i] = i;
		std::sort(order, order + kk, [dists](uint32 a, uint32 b) {
			return dists[a] < dists[b] || (dists[a] == dists[b] && a < b);
		});
		for (uint32 i = 0; i < kk; i++)
		{
			ids[i] = allowed->ids[order[i]];
			sorted[i] = dists[order[i]];
		}
		memcpy(dists, sorted, sizeof(float) * kk);
	}
	memset(all->state, CAGRA_CAND_UNKNOWN, (Size) all->nq * kk);
}

/* Query `to` of c becomes the first k visible rows of query `from` of all,
 * nearest first. */
static void
cagra_take_visible(const CagraCandidates *all, int from, uint32 k, CagraCandidates *c, int to)
{
	Size		src = (Size) from * all->kk;
	Size		dst = (Size) to * c->kk;
	uint32		j = 0;

	for (uint32 i = 0; i < all->kk && j < k; i++)
		if (all->state[src + i] == CAGRA_CAND_VISIBLE)
		{
			c->ids[dst + j] = all->ids[src + i];
			c->dists[dst + j] = all->dists[src + i];
			c->tids[dst + j] = all->tids[src + i];
			c->state[dst + j++] = CAGRA_CAND_VISIBLE;
		}
	for (; j < c->kk; j++)
	{
		c->ids[dst + j] = cagra::kInvalidNode;
		c->state[dst + j] = CAGRA_CAND_DROPPED;
	}
}

/*
 * The queries left short of k (cagra_short_queries) measure every allowed
 * node and settle them in distance order until k are visible or none is
 * left.  They go in groups whose candidate lists fit work_mem (one at
 * least).
 */
static void
cagra_complete_short_queries(const CagraSearchSession *s, Relation heap, const float *queries,
							 const bool *present, uint32 k, CagraCandidates *c)
{
	const CagraMetaData *meta = &s->meta;
	int		   *short_queries = (int *) palloc(sizeof(int) * Max(c->nq, 1));
	int			nshort = cagra_short_queries(s, present, k, c, short_queries);

	if (nshort == 0)
	{
		pfree(short_queries);
		return;
	}

	CagraCandidates all;
	uint32		kk = s->allowed->count;
	Size		per_query = (Size) kk * (2 * sizeof(uint32) + sizeof(float) + 1 + sizeof(ItemPointerData));
	int			group = (int) Max((Size) 1, Min(Min((Size) nshort, (Size) work_mem * 1024 / per_query),
											  (Size) PG_UINT32_MAX / kk));
	float	   *group_queries = (float *) palloc_extended(sizeof(float) * group * meta->dims, MCXT_ALLOC_HUGE);
	bool	   *group_present = (bool *) palloc(sizeof(bool) * group);
	uint32	   *order = (uint32 *) palloc_extended(sizeof(uint32) * kk, MCXT_ALLOC_HUGE);
	float	   *sorted = (float *) palloc_extended(sizeof(float) * kk, MCXT_ALLOC_HUGE);

	memset(group_present, true, sizeof(bool) * group);
	memset(&all, 0, sizeof(all));
	all.kk = kk;
	all.ids = (uint32 *) palloc_extended(sizeof(uint32) * group * kk, MCXT_ALLOC_HUGE);
	all.dists = (float *) palloc_extended(sizeof(float) * group * kk, MCXT_ALLOC_HUGE);
	all.state = (uint8 *) palloc_extended((Size) group * kk, MCXT_ALLOC_HUGE);
	all.tids = (ItemPointerData *) palloc_extended(sizeof(ItemPointerData) * group * kk, MCXT_ALLOC_HUGE);
	all.scratch_set = c->scratch_set;
	for (int g = 0; g < nshort; g += group)
	{
		all.nq = Min(group, nshort - g);
		for (int q = 0; q < all.nq; q++)
			memcpy(group_queries + (Size) q * meta->dims, queries + (Size) short_queries[g + q] * meta->dims,
				   sizeof(float) * meta->dims);
		cagra_all_allowed_in_order(s, group_queries, group_present, &all, order, sorted);
		cagra_resolve_widening(s->index, meta, heap, s->snapshot, group_present, k, &all);
		for (int q = 0; q < all.nq; q++)
			cagra_take_visible(&all, q, k, c, short_queries[g + q]);
		CHECK_FOR_INTERRUPTS();
	}
	pfree(all.ids);
	pfree(all.dists);
	pfree(all.state);
	pfree(all.tids);
	pfree(group_queries);
	pfree(group_present);
	pfree(order);
	pfree(sorted);
	pfree(short_queries);
}

void
cagra_session_settle(const CagraSearchSession *s, Relation heap, const float *queries, const bool *present,
					 uint32 k, CagraCandidates *c)
{
	cagra_resolve(s->index, &s->meta, heap, s->snapshot, present, k, c);
	if (s->allowed)
		cagra_complete_short_queries(s, heap, queries, present, k, c);
}

/* ---- many queries, part by part ---- */

/*
 * Bytes of memory one query of a part needs: its vector (detoasted and
 * prepared), its candidates (ids, distances, states, TIDs, the worker's
 * TIDs) and the resolution's work records (search_resolve.cpp: the list,
 * the work records and their sorted copy, the counting sort's counts).
 */
static Size
cagra_search_query_bytes(const CagraMetaData *meta, uint32 kk)
{
	return (Size) meta->dims * 2 * sizeof(float) + 64 +
		(Size) kk * (sizeof(uint32) + sizeof(float) + 1 + sizeof(ItemPointerData) + sizeof(uint64) +
					 sizeof(uint32) + 2 * 12 + 4 * sizeof(uint32));
}

/*
 * Parts a call through the worker is cut into, at least: while the worker
 * searches one part the backend settles the one before, so all but the
 * first part's search is hidden behind the backend's own work.  Parts of
 * fewer queries than the minimum are not worth a request of their own:
 * smaller calls stay in one part.
 */
#define CAGRA_PIPELINE_PARTS 4
#define CAGRA_PIPELINE_PART_MIN 1024

/* Whether a call's parts are pipelined through the worker. */
static bool
cagra_search_pipelined(const CagraSearchSession *s, int nitems)
{
	/* a filtered search sends its allowed rows with each request: one
	 * request at a time */
	return nitems >= 2 * CAGRA_PIPELINE_PART_MIN && !s->allowed && cagra_session_on_worker(s);
}

/* Queries per part: as many as fit work_mem (two parts, when they are
 * pipelined: both are in memory at once), one at least. */
static int
cagra_search_part_size(const CagraMetaData *meta, uint32 kk, int nitems, bool pipelined)
{
	Size		fit = ((Size) work_mem * 1024) / cagra_search_query_bytes(meta, kk);

	if (pipelined)
		fit = Min(fit / 2, Max((Size) CAGRA_PIPELINE_PART_MIN,
							   ((Size) nitems + CAGRA_PIPELINE_PARTS - 1) / CAGRA_PIPELINE_PARTS));
	/* candidates are numbered in 32 bits */
	fit = Min(fit, (Size) PG_UINT32_MAX / kk);
	return (int) Max((Size) 1, Min(fit, (Size) nitems));
}

static Size
cagra_queries_bytes(const CagraMetaData *meta, int nq)
{
	return (Size) nq * meta->dims * sizeof(float);
}

/*
 * One part of a call's queries on its way: collected into its own set of
 * scratch arrays, searched (on the worker, perhaps while the part before
 * it is settled), settled against the snapshot and emitted.
 */
typedef struct CagraSearchPart
{
	MemoryContext cxt;
	int			first;			/* number of its first query, from 0 */
	float	   *queries;		/* in scratch, or in the request's payload */
	bool		queries_in_request;
	bool	   *present;
	CagraCandidates c;
	CagraSearchPending request; /* request.wait.queued: the worker has it */
} CagraSearchPart;

/* Give the part's request back; with keep_queries, its queries are first
 * copied out of the request into the part's scratch, for a search the
 * usual way (which may reuse the mailbox). */
static void
cagra_part_release(CagraSearchPart *p, const CagraMetaData *meta, bool keep_queries)
{
	if (p->queries_in_request)
	{
		float	   *own = NULL;

		if (keep_queries)
		{
			Size		bytes = cagra_queries_bytes(meta, p->c.nq);

			own = (float *) cagra_scratch_of(p->c.scratch_set, CAGRA_SCRATCH_QUERIES, bytes);
			memcpy(own, p->queries, bytes);
		}
		p->queries = own;
		p->queries_in_request = false;
	}
	cagra_client_search_release(&p->request);
}

/*
 * Collect the part's queries; with to_worker, straight into a request to
 * the worker, queued at once and answered while the backend settles the
 * part before (when it cannot be queued so, cagra_part_search searches
 * the usual way).
 */
static void
cagra_part_collect(CagraSearchPart *p, int set, const CagraSearchSession *session, int first, int nq, uint32 kk,
				   bool to_worker, CagraNextQueries next_queries, void *arg)
{
	MemoryContext old = MemoryContextSwitchTo(p->cxt);
	const CagraMetaData *meta = &session->meta;
	CagraCandidates *c = &p->c;
	Size		total = (Size) nq * kk;
	float	   *into = NULL;

	p->first = first;
	c->nq = nq;
	c->kk = kk;
	c->scratch_set = set;
	if (to_worker)
	{
		CagraSearchRequest req = cagra_session_request(session, c);

		into = cagra_search_begin_through_worker(session->index, meta, &req, (uint32) nq, &p->request);
	}
	p->queries = into ? into :
		(float *) cagra_scratch_of(set, CAGRA_SCRATCH_QUERIES, cagra_queries_bytes(meta, nq));
	p->present = (bool *) palloc0(sizeof(bool) * Max(nq, 1));
	next_queries(arg, nq, p->queries, p->present);
	p->queries_in_request = into != NULL;
	if (into && !cagra_client_search_queue(&p->request))
		cagra_part_release(p, meta, true);
	c->ids = (uint32 *) cagra_scratch_of(set, CAGRA_SCRATCH_IDS, total * sizeof(uint32));
	c->dists = (float *) cagra_scratch_of(set, CAGRA_SCRATCH_DISTS, total * sizeof(float));
	c->state = (uint8 *) cagra_scratch_of(set, CAGRA_SCRATCH_STATE, total);
	c->tids = (ItemPointerData *) cagra_scratch_of(set, CAGRA_SCRATCH_TIDS, total * sizeof(ItemPointerData));
	c->copy_tids = NULL;
	c->by_worker = false;
	memset(c->state, CAGRA_CAND_UNKNOWN, total);
	for (Size i = 0; i < total; i++)
		c->ids[i] = cagra::kInvalidNode;	/* rows of NULL queries stay empty */
	MemoryContextSwitchTo(old);
}

/* The part's candidates: the answer to its queued request, or the usual
 * search (also when the worker did not serve the queued one). */
static void
cagra_part_search(CagraSearchPart *p, const CagraSearchSession *session)
{
	MemoryContext old = MemoryContextSwitchTo(p->cxt);

	if (p->request.wait.queued)
	{
		char		why[256];
		CagraCopyExtent copy;
		uint64	   *copy_tids = cagra_session_copy_tids_room(&p->c);
		CagraOffload r = cagra_client_search_finish(&p->request, p->c.ids, p->c.dists, copy_tids, &copy, why,
													sizeof(why));

		if (r == CAGRA_OFFLOAD_OK)
		{
			cagra_session_take_worker(session, p->queries, p->present, &copy, copy_tids, &p->c);
			cagra_part_release(p, &session->meta, false);
		}
		else
		{
			/* not searched (no copy yet, loading): the usual way, which
			 * uploads the copy; failed: on the CPU, as any failure */
			cagra_part_release(p, &session->meta, true);
			if (r == CAGRA_OFFLOAD_FAILED)
				cagra_client_search_fallback(r, why);
			cagra_session_candidates(session, p->queries, p->present, &p->c, r == CAGRA_OFFLOAD_SKIPPED);
		}
	}
	else
		cagra_session_candidates(session, p->queries, p->present, &p->c, true);
	MemoryContextSwitchTo(old);
}

/* Settle the part's candidates and hand them to `settled`. */
static void
cagra_part_settle(CagraSearchPart *p, const CagraSearchSession *session, Relation heap, uint32 k,
				  CagraSettledPart settled, void *arg)
{
	MemoryContext old = MemoryContextSwitchTo(p->cxt);

	cagra_session_settle(session, heap, p->queries, p->present, k, &p->c);
	settled(arg, p->first, p->present, k, &p->c);
	MemoryContextSwitchTo(old);
	MemoryContextReset(p->cxt);
}

void
cagra_session_search_all(const CagraSearchSession *s, Relation heap, int nitems, uint32 k,
						 CagraNextQueries next_queries, CagraSettledPart settled, void *arg)
{
	uint32		kk = cagra_session_candidates_per_query(s, k);
	bool		pipelined = cagra_search_pipelined(s, nitems);
	int			part = cagra_search_part_size(&s->meta, kk, nitems, pipelined);
	CagraSearchPart *parts = (CagraSearchPart *) palloc0(sizeof(CagraSearchPart) * CAGRA_SCRATCH_SETS);

	for (int i = 0; i < CAGRA_SCRATCH_SETS; i++)
		parts[i].cxt = AllocSetContextCreate(CurrentMemoryContext, "cagra_search part", ALLOCSET_DEFAULT_SIZES);
	PG_TRY();
	{
		CagraSearchPart *prev = NULL;

		/* part n: collected and queued (from the second on: the first goes
		 * the usual way, which uploads a copy the worker lacks), the part
		 * before it settled meanwhile, then its answer taken */
		for (int first = 0, n = 0; first < nitems; first += part, n++)
		{
			CagraSearchPart *cur = &parts[n % CAGRA_SCRATCH_SETS];

			cagra_part_collect(cur, n % CAGRA_SCRATCH_SETS, s, first, Min(part, nitems - first), kk,
							   pipelined && prev, next_queries, arg);
			if (prev)
				cagra_part_settle(prev, s, heap, k, settled, arg);
			cagra_part_search(cur, s);
			prev = cur;
			CHECK_FOR_INTERRUPTS();
		}
		if (prev)
			cagra_part_settle(prev, s, heap, k, settled, arg);
	}
	PG_FINALLY();
	{
		for (int i = 0; i < CAGRA_SCRATCH_SETS; i++)
			cagra_client_search_release(&parts[i].request);
	}
	PG_END_TRY();
	for (int i = 0; i < CAGRA_SCRATCH_SETS; i++)
		MemoryContextDelete(parts[i].cxt);
	pfree(parts);
}
