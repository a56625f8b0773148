/*
 * search_sql.cpp — cagra_search(index, queries vector[] or halfvec[], k): many queries
 * in one call, sent to the worker as one batch (or searched on the CPU),
 * returning (query, ctid, distance) for rows visible to the statement's
 * snapshot only, k per query at most, in distance order.
 * The candidates of the whole batch are settled together
 * (search_resolve.cpp).
 *
 * The queries are taken in parts whose scratch memory fits work_mem (one
 * query at least), so a call's memory does not grow with the array; each
 * part is one batch.  Through the worker, each part after the first is
 * queued before the part before it is settled, so that the worker searches
 * while the backend settles (CagraSearchPart).  The caller needs SELECT on
 * the columns the index reads, and row-level security must not apply to it: the function returns
 * rows without the policies' filter (docs/reference.md).
 *
 * With a fourth argument, `allowed` (tid[]), only rows it names are
 * returned: their TIDs (HOT chains' roots) go with the queries to the
 * worker when it runs, which maps them to its copy's nodes; in the backend
 * the node headers are read to find them.  Either way the search is exact
 * over the allowed nodes when they are few, else a traversal that returns
 * only them, widened for their pass rate (cagra::plan_filtered_search).  A
 * query whose candidates settle short of k while allowed nodes remain
 * unseen measures them all (cagra_complete_short_queries), so it returns
 * min(k, visible allowed rows) however many of them are dead.
 */
#include "am/accessor.h"
#include "am/search_resolve.h"
#include "am/worker_copy.h"

#include <algorithm>
#include <vector>

#include "core/search.h"
#include "type/vector.h"

extern "C" {
#include "access/heapam.h"
#include "catalog/pg_type_d.h"
#include "access/htup_details.h"
#include "access/tupmacs.h"
#include "access/relation.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/visibilitymap.h"
#include "access/xact.h"
#include "catalog/pg_type.h"
#include "executor/tuptable.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "storage/bufmgr.h"
#include "utils/array.h"
#include "utils/arrayaccess.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/relcache.h"
#include "utils/rls.h"
#include "utils/snapmgr.h"
#include "storage/predicate.h"

PG_FUNCTION_INFO_V1(cagra_search);
}


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
 * What cagra_search asks of the caller, beyond reading the table
 * (cagra_check_read_access): no row-level security on the table for this
 * user, since the function returns rows without applying the policies.
 * Owners and roles with BYPASSRLS (RLS_NONE_ENV) search.
 */
static void
cagra_check_search_privileges(Relation index, Relation heap)
{
	Oid			relid = RelationGetRelid(heap);

	cagra_check_read_access(index, heap);
	if (check_enable_rls(relid, InvalidOid, false) == RLS_ENABLED)
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("cagra_search cannot search table \"%s\": row-level security applies to it",
						RelationGetRelationName(heap)),
				 errdetail("cagra_search does not apply row-level security policies."),
				 errhint("Use SELECT ... ORDER BY column <-> query LIMIT k, which applies them.")));
}

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
cagra_search_pipelined(int nitems, const CagraAllowed *allowed)
{
	/* a filtered search sends its allowed rows with each request: one
	 * request at a time */
	return nitems >= 2 * CAGRA_PIPELINE_PART_MIN && !allowed && cagra_worker_wanted("search");
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

/*
 * The queries array as it came: a plpgsql variable or a bound parameter is
 * often an expanded array, whose elements are read in place instead of
 * flattening the whole array first (40 MB for 10,000 queries of 1,024
 * dimensions: a sixth of the backend's time per call).
 */
typedef struct CagraQueryArray
{
	array_iter	iter;
	int			next;			/* element number of the next query */
	int16		elmlen;
	bool		elmbyval;
	char		elmalign;
	bool		half;			/* halfvec[] queries, read as floats */
} CagraQueryArray;

static void
cagra_query_array_init(CagraQueryArray *qa, AnyArrayType *arr)
{
	get_typlenbyvalalign(AARR_ELEMTYPE(arr), &qa->elmlen, &qa->elmbyval, &qa->elmalign);
	qa->half = vector_type_is_halfvec(AARR_ELEMTYPE(arr));
	array_iter_setup(&qa->iter, arr);
	qa->next = 0;
}

static Size
cagra_queries_bytes(const CagraMetaData *meta, int nq)
{
	return (Size) nq * meta->dims * sizeof(float);
}

/* The next nq queries of the array, prepared (nq x dims) into `into`, or
 * into scratch set `set` when it is NULL; NULL elements leave *present
 * false. */
static float *
cagra_collect_queries(Relation index, const CagraMetaData *meta, CagraQueryArray *qa, int nq, int set,
					  float *into, bool **present_out)
{
	float	   *queries = into ? into :
		(float *) cagra_scratch_of(set, CAGRA_SCRATCH_QUERIES, cagra_queries_bytes(meta, nq));
	bool	   *present = (bool *) palloc0(sizeof(bool) * Max(nq, 1));

	for (int q = 0; q < nq; q++)
	{
		Datum		elem;
		bool		isnull;

		elem = array_iter_next(&qa->iter, &isnull, qa->next++, qa->elmlen, qa->elmbyval, qa->elmalign);
		if (isnull)
		{
			/* searched with the batch (the worker takes every row), never emitted */
			memset(queries + (Size) q * meta->dims, 0, meta->dims * sizeof(float));
			continue;
		}
		int			dim;
		const float *x = vector_datum_floats(elem, qa->half, &dim);

		cagra_check_dims(index, meta->dims, dim);
		cagra_prepare((cagra::Metric) meta->metric, x, queries + (Size) q * meta->dims, meta->dims);
		if (qa->half)
			pfree((void *) x);	/* the widened copy: one at a time */
		present[q] = true;
	}
	*present_out = present;
	return queries;
}

static int
cagra_cmp_tids(const void *a, const void *b)
{
	return ItemPointerCompare((ItemPointer) a, (ItemPointer) b);
}

/*
 * The rows of `tids` (a tid[]; NULL elements ignored) as the index holds
 * them: a TID may name any member of a HOT chain, as a row's ctid does after
 * a HOT update, and the index holds the chain's root, so each TID is mapped
 * to its root (heap_get_root_tuples, one share-locked page at a time).
 * Packed, ascending, without repeats; no node is looked up yet.
 */
static CagraAllowed *
cagra_allowed_rows(Relation heap, ArrayType *tids)
{
	Datum	   *elems;
	bool	   *nulls;
	int			nelems;
	BlockNumber nblocks = RelationGetNumberOfBlocks(heap);
	OffsetNumber roots[MaxHeapTuplesPerPage];

	deconstruct_array(tids, TIDOID, sizeof(ItemPointerData), false, TYPALIGN_SHORT, &elems, &nulls, &nelems);

	ItemPointerData *set = (ItemPointerData *) palloc(sizeof(ItemPointerData) * Max(nelems, 1));
	int			nset = 0;

	for (int i = 0; i < nelems; i++)
		if (!nulls[i])
			set[nset++] = *(ItemPointer) DatumGetPointer(elems[i]);
	qsort(set, nset, sizeof(ItemPointerData), cagra_cmp_tids);
	for (int i = 0; i < nset;)
	{
		BlockNumber blk = ItemPointerGetBlockNumber(&set[i]);
		int			end = i;

		while (end < nset && ItemPointerGetBlockNumber(&set[end]) == blk)
			end++;
		if (blk < nblocks)
		{
			Buffer		buf = ReadBuffer(heap, blk);

			LockBuffer(buf, BUFFER_LOCK_SHARE);
			heap_get_root_tuples(BufferGetPage(buf), roots);
			UnlockReleaseBuffer(buf);
			for (int j = i; j < end; j++)
			{
				OffsetNumber off = ItemPointerGetOffsetNumber(&set[j]);

				if (off >= FirstOffsetNumber && off <= MaxHeapTuplesPerPage &&
					roots[off - 1] != InvalidOffsetNumber)
					ItemPointerSetOffsetNumber(&set[j], roots[off - 1]);
			}
		}
		i = end;
	}
	qsort(set, nset, sizeof(ItemPointerData), cagra_cmp_tids);

	uint64	   *packed = (uint64 *) palloc_extended(sizeof(uint64) * Max(nset, 1), MCXT_ALLOC_HUGE);
	uint32		n = 0;

	/* packing keeps ItemPointerCompare's order */
	for (int i = 0; i < nset; i++)
		if (n == 0 || packed[n - 1] != cagra_pack_tid(&set[i]))
			packed[n++] = cagra_pack_tid(&set[i]);
	pfree(set);
	return cagra_allowed_packed(packed, n);
}

CagraAllowed *
cagra_allowed_packed(uint64 *packed, uint32 count)
{
	CagraAllowed *a = (CagraAllowed *) palloc0(sizeof(CagraAllowed));

	a->rows.tids = packed;
	a->rows.count = count;
	return a;
}

/* The live nodes of the allowed rows, for a search in the backend: the node
 * headers read page by page, each page share-locked once.  They live as
 * long as `a` (every part of a call's queries uses them). */
static void
cagra_allowed_nodes(Relation index, const CagraMetaData *meta, CagraAllowed *a)
{
	if (a->bits)
		return;

	MemoryContext cxt = GetMemoryChunkContext(a);

	a->bits = (uint64 *) MemoryContextAllocExtended(cxt, sizeof(uint64) *
													Max(cagra_node_bitset_words(meta->n), (Size) 1),
													MCXT_ALLOC_HUGE | MCXT_ALLOC_ZERO);
	a->ids = (uint32 *) MemoryContextAllocExtended(cxt, sizeof(uint32) * (Size) Max(Min(a->rows.count, meta->n), 1),
												   MCXT_ALLOC_HUGE);
	a->count = 0;
	for (uint32 first = 0, end; first < meta->n && a->count < a->rows.count; first = end)
	{
		Buffer		buf = ReadBuffer(index, cagra_header_block(meta, first));
		Page		page;

		end = cagra_header_run_end(meta, first);
		LockBuffer(buf, BUFFER_LOCK_SHARE);
		page = BufferGetPage(buf);
		for (uint32 id = first; id < end; id++)
		{
			BlockNumber blkno;
			uint32		off;

			cagra_locate(meta, id, 0, &blkno, &off);

			const CagraNodeHeader *hdr = (const CagraNodeHeader *) ((const char *) page + off);

			if (cagra_node_is_live(hdr->flags) && cagra_allowed_tid(&a->rows, cagra_pack_tid(&hdr->heap_tid)))
			{
				a->bits[id >> 6] |= UINT64CONST(1) << (id & 63);
				a->ids[a->count++] = id;
			}
		}
		UnlockReleaseBuffer(buf);
		CHECK_FOR_INTERRUPTS();
	}
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

/* The worker's request for the candidates of c. */
static CagraSearchRequest
cagra_candidates_request(const CagraMetaData *meta, const CagraCandidates *c)
{
	CagraSearchRequest req;

	req.k = c->kk;
	req.params = cagra_search_params(meta);
	req.params.itopk_size = c->kk;	/* the worker's limit, CAGRA_WORKER_MAX_K */
	return req;
}

/* Take the worker's answer into c: the nodes its copy lacks are measured
 * here and merged in, else its heap TIDs are kept. */
static void
cagra_take_worker_candidates(Relation index, const CagraMetaData *meta, const float *queries, const bool *present,
							 const CagraAllowedTids *rows, const CagraCopyExtent *copy, uint64 *copy_tids,
							 CagraCandidates *c)
{
	c->by_worker = true;
	/* the merge moves candidates: their copy TIDs would not follow */
	if (cagra_copy_is_partial(meta, copy))
		cagra_merge_tail(index, meta, copy, c->nq, queries, present, rows, c->kk, c->ids, c->dists);
	else
		c->copy_tids = copy_tids;
}

static uint64 *
cagra_copy_tids_room(const CagraCandidates *c)
{
	return (uint64 *) cagra_scratch_of(c->scratch_set, CAGRA_SCRATCH_COPY_TIDS,
									   sizeof(uint64) * (Size) c->nq * c->kk);
}

static void cagra_search_candidates_in(Relation index, const CagraMetaData *meta, const float *queries,
									   const bool *present, CagraAllowed *allowed, CagraCandidates *c,
									   bool ask_worker);

void
cagra_search_candidates(Relation index, const CagraMetaData *meta, const float *queries,
						const bool *present, CagraAllowed *allowed, CagraCandidates *c)
{
	cagra_search_candidates_in(index, meta, queries, present, allowed, c, true);
}

static void
cagra_search_candidates_in(Relation index, const CagraMetaData *meta, const float *queries,
						   const bool *present, CagraAllowed *allowed, CagraCandidates *c, bool ask_worker)
{
	cagra::SearchParams params = cagra_search_params(meta);

	params.itopk_size = Max(params.itopk_size, c->kk);
	if (ask_worker && c->kk <= CAGRA_WORKER_MAX_K && cagra_worker_wanted("search"))
	{
		CagraSearchRequest req = cagra_candidates_request(meta, c);
		char		why[256];
		CagraCopyExtent copy;
		uint64	   *copy_tids = cagra_copy_tids_room(c);
		const CagraAllowedTids *rows = allowed ? &allowed->rows : NULL;
		CagraOffload r = cagra_search_through_worker(index, meta, &req, (uint32) c->nq, queries, rows, c->ids,
													 c->dists, copy_tids, &copy, why, sizeof(why));

		if (r == CAGRA_OFFLOAD_OK)
		{
			cagra_take_worker_candidates(index, meta, queries, present, rows, &copy, copy_tids, c);
			return;
		}
		cagra_worker_search_fallback(r, why);
	}
	if (allowed)
	{
		cagra_allowed_nodes(index, meta, allowed);

		/* planned at the width the backend's Searcher runs (from the entry
		 * index of the entries, when the index has any) */
		cagra::FilteredSearchPlan plan = cagra::plan_filtered_search(cagra::cpu_search_params(params,
																							  meta->entry_count > 0),
																	 meta->graph_degree, allowed->count,
																	 meta->n, cagra::kMaxItopk);

		/* more candidates than a traversal keeps: every allowed node */
		if (plan.exact || c->kk > cagra::kMaxItopk)
		{
			cagra_exact_allowed(index, meta, queries, present, allowed, c);
			return;
		}
		params = plan.params;
	}
	for (int q = 0; q < c->nq; q++)
	{
		CagraStatus st;

		if (!present[q])
			continue;
		cagra_cpu_search_query(index, meta, queries + (Size) q * meta->dims, c->kk, params, allowed,
							   c->ids + (Size) q * c->kk, c->dists + (Size) q * c->kk, &st);
		if (!st.ok)
			cagra_report_status(&st);
		CHECK_FOR_INTERRUPTS();
	}
}


/*
 * A query's candidates are its kk nearest allowed nodes at most: when the
 * nearest are dead or invisible to the snapshot, settling them leaves it
 * short of k rows while other allowed rows may be visible.  Such a query
 * measures every allowed node and settles them in distance order until k
 * are visible or none is left; a query whose candidates already covered
 * every allowed node has all there is.  Queries go in groups whose
 * candidate lists fit work_mem (one at least).
 */
static void
cagra_complete_short_queries(Relation index, const CagraMetaData *meta, Relation heap, Snapshot snapshot,
							 const float *queries, const bool *present, uint32 k, CagraAllowed *allowed,
							 CagraCandidates *c)
{
	int		   *short_queries = (int *) palloc(sizeof(int) * Max(c->nq, 1));
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
			cagra_allowed_nodes(index, meta, allowed);
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
	if (nshort == 0)
	{
		pfree(short_queries);
		return;
	}

	CagraCandidates all;
	uint32		kk = allowed->count;
	Size		per_query = (Size) kk * (2 * sizeof(uint32) + sizeof(float) + 1 + sizeof(ItemPointerData));
	int			group = (int) Max((Size) 1, Min(Min((Size) nshort, (Size) work_mem * 1024 / per_query),
											  (Size) PG_UINT32_MAX / kk));
	float	   *group_queries = (float *) palloc_extended(sizeof(float) * group * meta->dims, MCXT_ALLOC_HUGE);
	bool	   *group_present = (bool *) palloc(sizeof(bool) * group);
	uint32	   *order = (uint32 *) palloc_extended(sizeof(uint32) * kk, MCXT_ALLOC_HUGE);
	float	   *sorted = (float *) palloc_extended(sizeof(float) * kk, MCXT_ALLOC_HUGE);

	memset(group_present, true, sizeof(bool) * group);
	all.kk = kk;
	all.ids = (uint32 *) palloc_extended(sizeof(uint32) * group * kk, MCXT_ALLOC_HUGE);
	all.dists = (float *) palloc_extended(sizeof(float) * group * kk, MCXT_ALLOC_HUGE);
	all.state = (uint8 *) palloc_extended((Size) group * kk, MCXT_ALLOC_HUGE);
	all.tids = (ItemPointerData *) palloc_extended(sizeof(ItemPointerData) * group * kk, MCXT_ALLOC_HUGE);
	all.copy_tids = NULL;
	all.by_worker = false;
	all.scratch_set = c->scratch_set;
	for (int g = 0; g < nshort; g += group)
	{
		all.nq = Min(group, nshort - g);
		for (int q = 0; q < all.nq; q++)
			memcpy(group_queries + (Size) q * meta->dims, queries + (Size) short_queries[g + q] * meta->dims,
				   sizeof(float) * meta->dims);
		cagra_measure_allowed(index, meta, group_queries, group_present, all.nq, allowed, 1,
							  [&](uint32 first, uint32 nblock, int q, const float *d) {
								  memcpy(all.dists + (Size) q * kk + first, d, sizeof(float) * nblock);
							  });
		for (int q = 0; q < all.nq; q++)
		{
			uint32	   *ids = all.ids + (Size) q * kk;
			float	   *dists = all.dists + (Size) q * kk;

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
		memset(all.state, CAGRA_CAND_UNKNOWN, (Size) all.nq * kk);
		cagra_resolve_widening(index, meta, heap, snapshot, group_present, k, &all);

		/* the query's row becomes its visible rows, nearest first */
		for (int q = 0; q < all.nq; q++)
		{
			Size		from = (Size) q * kk;
			Size		to = (Size) short_queries[g + q] * c->kk;
			uint32		j = 0;

			for (uint32 i = 0; i < kk && j < k; i++)
				if (all.state[from + i] == CAGRA_CAND_VISIBLE)
				{
					c->ids[to + j] = all.ids[from + i];
					c->dists[to + j] = all.dists[from + i];
					c->tids[to + j] = all.tids[from + i];
					c->state[to + j++] = CAGRA_CAND_VISIBLE;
				}
			for (; j < c->kk; j++)
			{
				c->ids[to + j] = cagra::kInvalidNode;
				c->state[to + j] = CAGRA_CAND_DROPPED;
			}
		}
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


/*
 * The memory of the result rows.  A call of 10,000 queries puts 100,000
 * rows (about 6 MB) into its tuplestore; in the query's own memory every
 * call had those pages from the kernel afresh, some 2,400 page faults a
 * call.  So the rows go into a context kept between calls, whose first
 * block holds them, reset when the query that used it ends.  One such
 * context per backend: another call in the same query (a second
 * cagra_search, a rescan) keeps its rows in the query's memory.
 */
#define CAGRA_ROWS_KEPT_BYTES ((Size) 8 * 1024 * 1024)

static MemoryContext cagra_rows_kept = NULL;
static bool cagra_rows_kept_in_use = false;

static void
cagra_rows_release(void *arg)
{
	MemoryContextReset((MemoryContext) arg);
	cagra_rows_kept_in_use = false;
}

/* InitMaterializedSRF, with the tuplestore in the kept context while no
 * other call of this query holds it. */
static void
cagra_init_rows(FunctionCallInfo fcinfo)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;

	InitMaterializedSRF(fcinfo, 0);
	if (cagra_rows_kept_in_use)
		return;
	if (!cagra_rows_kept)
		cagra_rows_kept = AllocSetContextCreate(TopMemoryContext, "cagra_search rows", CAGRA_ROWS_KEPT_BYTES,
												CAGRA_ROWS_KEPT_BYTES, ALLOCSET_DEFAULT_MAXSIZE);

	MemoryContext query_cxt = rsinfo->econtext->ecxt_per_query_memory;
	MemoryContextCallback *release = (MemoryContextCallback *) MemoryContextAlloc(query_cxt,
																				   sizeof(MemoryContextCallback));

	release->func = cagra_rows_release;
	release->arg = cagra_rows_kept;
	MemoryContextRegisterResetCallback(query_cxt, release);
	cagra_rows_kept_in_use = true;

	MemoryContext old = MemoryContextSwitchTo(cagra_rows_kept);

	tuplestore_end(rsinfo->setResult);
	rsinfo->setResult = tuplestore_begin_heap((rsinfo->allowedModes & SFRM_Materialize_Random) != 0, false,
											  work_mem);
	MemoryContextSwitchTo(old);
}

/*
 * The result rows, (query int4, ctid tid, distance float8), formed by
 * patching one tuple: the columns are fixed-length and never NULL, so every
 * row has the layout heap_form_minimal_tuple gives the first, and only the
 * bytes of the three values change.  (Forming each row from scratch was
 * most of the cost of emitting 100,000 rows.)
 */
typedef struct CagraRowFormer
{
	MinimalTuple row;
	char	   *query;			/* where each value's bytes are in `row` */
	char	   *tid;
	char	   *distance;
	TupleTableSlot *slot;
} CagraRowFormer;

static void
cagra_row_former_init(CagraRowFormer *f, TupleDesc desc)
{
	Datum		values[3];
	bool		nulls[3] = {false, false, false};
	ItemPointerData tid;
	char	   *data;
	char	  **where[3] = {&f->query, &f->tid, &f->distance};
	uint32		off = 0;

	ItemPointerSetInvalid(&tid);
	values[0] = Int32GetDatum(0);
	values[1] = PointerGetDatum(&tid);
	values[2] = Float8GetDatum(0.0);
	f->row = heap_form_minimal_tuple(desc, values, nulls);
	data = (char *) f->row + f->row->t_hoff - MINIMAL_TUPLE_OFFSET;
	for (int i = 0; i < 3; i++)
	{
		Form_pg_attribute att = TupleDescAttr(desc, i);

		off = att_align_nominal(off, att->attalign);
		*where[i] = data + off;
		off += att->attlen;
	}
	f->slot = MakeSingleTupleTableSlot(desc, &TTSOpsMinimalTuple);
}

static void
cagra_row_former_put(CagraRowFormer *f, Tuplestorestate *store, int32 query, ItemPointer tid,
					 float8 distance)
{
	memcpy(f->query, &query, sizeof(query));
	memcpy(f->tid, tid, sizeof(ItemPointerData));
	memcpy(f->distance, &distance, sizeof(distance));
	ExecStoreMinimalTuple(f->row, f->slot, false);
	tuplestore_puttupleslot(store, f->slot);	/* copies the row */
}

/* Emit up to k visible rows of each query (numbered from first + 1), in
 * distance order. */
static void
cagra_emit_results(ReturnSetInfo *rsinfo, CagraRowFormer *former, const CagraMetaData *meta,
				   const bool *present, int first, uint32 k, const CagraCandidates *c)
{
	cagra::Metric metric = (cagra::Metric) meta->metric;

	for (int q = 0; q < c->nq; q++)
	{
		uint32		emitted = 0;
		Size		base = (Size) q * c->kk;

		if (!present[q])
			continue;
		for (uint32 i = 0; i < c->kk && emitted < k; i++)
		{
			if (c->state[base + i] != CAGRA_CAND_VISIBLE)
				continue;
			cagra_row_former_put(former, rsinfo->setResult, first + q + 1, &c->tids[base + i],
								 cagra::operator_value(metric, c->dists[base + i]));
			emitted++;
		}
	}
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
	cagra_worker_search_release(&p->request);
}

/*
 * Collect the part's queries; with to_worker, straight into a request to
 * the worker, queued at once and answered while the backend settles the
 * part before (when it cannot be queued so, cagra_part_search searches
 * the usual way).
 */
static void
cagra_part_collect(CagraSearchPart *p, int set, Relation index, const CagraMetaData *meta, CagraQueryArray *qa,
				   int first, int nq, uint32 kk, bool to_worker)
{
	MemoryContext old = MemoryContextSwitchTo(p->cxt);
	CagraCandidates *c = &p->c;
	Size		total = (Size) nq * kk;
	float	   *into = NULL;

	p->first = first;
	c->nq = nq;
	c->kk = kk;
	c->scratch_set = set;
	if (to_worker)
	{
		CagraSearchRequest req = cagra_candidates_request(meta, c);

		into = cagra_search_begin_through_worker(index, meta, &req, (uint32) nq, &p->request);
	}
	p->queries = cagra_collect_queries(index, meta, qa, nq, set, into, &p->present);
	p->queries_in_request = into != NULL;
	if (into && !cagra_worker_search_queue(&p->request))
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
cagra_part_search(CagraSearchPart *p, Relation index, const CagraMetaData *meta, CagraAllowed *allowed)
{
	MemoryContext old = MemoryContextSwitchTo(p->cxt);

	if (p->request.wait.queued)
	{
		char		why[256];
		CagraCopyExtent copy;
		uint64	   *copy_tids = cagra_copy_tids_room(&p->c);
		CagraOffload r = cagra_worker_search_finish(&p->request, p->c.ids, p->c.dists, copy_tids, &copy, why,
													sizeof(why));

		if (r == CAGRA_OFFLOAD_OK)
		{
			cagra_take_worker_candidates(index, meta, p->queries, p->present, NULL, &copy, copy_tids, &p->c);
			cagra_part_release(p, meta, false);
		}
		else
		{
			/* not searched (no copy yet, loading): the usual way, which
			 * uploads the copy; failed: on the CPU, as any failure */
			cagra_part_release(p, meta, true);
			if (r == CAGRA_OFFLOAD_FAILED)
				cagra_worker_search_fallback(r, why);
			cagra_search_candidates_in(index, meta, p->queries, p->present, allowed, &p->c,
									   r == CAGRA_OFFLOAD_SKIPPED);
		}
	}
	else
		cagra_search_candidates(index, meta, p->queries, p->present, allowed, &p->c);
	MemoryContextSwitchTo(old);
}

/* Settle the part's candidates and emit its rows (copied into the
 * tuplestore, which lives outside the part's context). */
static void
cagra_part_settle(CagraSearchPart *p, ReturnSetInfo *rsinfo, CagraRowFormer *former, Relation index,
				  const CagraMetaData *meta, Relation heap, Snapshot snapshot, uint32 k, CagraAllowed *allowed)
{
	MemoryContext old = MemoryContextSwitchTo(p->cxt);

	cagra_resolve(index, meta, heap, snapshot, p->present, k, &p->c);
	if (allowed)
		cagra_complete_short_queries(index, meta, heap, snapshot, p->queries, p->present, k, allowed, &p->c);
	cagra_emit_results(rsinfo, former, meta, p->present, p->first, k, &p->c);
	MemoryContextSwitchTo(old);
	MemoryContextReset(p->cxt);
}

Datum
cagra_search(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	Oid			indexoid = PG_GETARG_OID(0);
	AnyArrayType *arr = PG_GETARG_ANY_ARRAY_P(1);
	int32		k = PG_GETARG_INT32(2);

	if (k < 1 || k > CAGRA_WORKER_MAX_K)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("k must be between 1 and %d, not %d", CAGRA_WORKER_MAX_K, k)));
	cagra_init_rows(fcinfo);

	Relation	heap;
	Relation	index = cagra_open_sql_index(indexoid, true, &heap);
	Snapshot	snapshot = GetActiveSnapshot();

	cagra_check_search_privileges(index, heap);

	/*
	 * As index_beginscan does for access methods without predicate locks
	 * of their own (ampredlocks = false): a serializable transaction's read
	 * covers the whole index, and any insert into it conflicts.  The heap
	 * tuples are read through the table AM's index fetch under serializable
	 * isolation (search_resolve.cpp), which takes their tuple locks.
	 */
	PredicateLockRelation(index, snapshot);

	CagraMetaData meta;
	int			nitems = ArrayGetNItems(AARR_NDIM(arr), AARR_DIMS(arr));

	cagra_read_meta(index, &meta);

	CagraAllowed *allowed = NULL;

	if (PG_NARGS() > 3 && meta.n > 0)
		allowed = cagra_allowed_rows(heap, PG_GETARG_ARRAYTYPE_P(3));
	if (meta.n > 0 && meta.live > 0 && nitems > 0 && (!allowed || allowed->rows.count > 0))
	{
		/* more candidates than k: some may be invisible to this snapshot */
		uint32		kk = Min((uint32) CAGRA_WORKER_MAX_K, Max(cagra_search_params(&meta).itopk_size, (uint32) k));
		bool		pipelined = cagra_search_pipelined(nitems, allowed);
		int			part = cagra_search_part_size(&meta, kk, nitems, pipelined);
		CagraQueryArray qa;
		CagraRowFormer former;
		CagraSearchPart *parts = (CagraSearchPart *) palloc0(sizeof(CagraSearchPart) * CAGRA_SCRATCH_SETS);

		for (int i = 0; i < CAGRA_SCRATCH_SETS; i++)
			parts[i].cxt = AllocSetContextCreate(CurrentMemoryContext, "cagra_search part", ALLOCSET_DEFAULT_SIZES);
		cagra_query_array_init(&qa, arr);
		cagra_row_former_init(&former, rsinfo->setDesc);
		PG_TRY();
		{
			CagraSearchPart *prev = NULL;

			/* part n: collected and queued (from the second on: the first
			 * goes the usual way, which uploads a copy the worker lacks),
			 * the part before it settled meanwhile, then its answer taken */
			for (int first = 0, n = 0; first < nitems; first += part, n++)
			{
				CagraSearchPart *cur = &parts[n % CAGRA_SCRATCH_SETS];

				cagra_part_collect(cur, n % CAGRA_SCRATCH_SETS, index, &meta, &qa, first, Min(part, nitems - first),
								   kk, pipelined && prev);
				if (prev)
					cagra_part_settle(prev, rsinfo, &former, index, &meta, heap, snapshot, (uint32) k, allowed);
				cagra_part_search(cur, index, &meta, allowed);
				prev = cur;
				CHECK_FOR_INTERRUPTS();
			}
			if (prev)
				cagra_part_settle(prev, rsinfo, &former, index, &meta, heap, snapshot, (uint32) k, allowed);
		}
		PG_FINALLY();
		{
			for (int i = 0; i < CAGRA_SCRATCH_SETS; i++)
				cagra_worker_search_release(&parts[i].request);
		}
		PG_END_TRY();
		for (int i = 0; i < CAGRA_SCRATCH_SETS; i++)
			MemoryContextDelete(parts[i].cxt);
		ExecDropSingleTupleTableSlot(former.slot);
	}
	table_close(heap, AccessShareLock);
	index_close(index, AccessShareLock);
	return (Datum) 0;
}
