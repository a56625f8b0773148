/*
 * scan.cpp — index scans (ambeginscan, amrescan, amgettuple, amendscan).
 *
 * A scan reads the meta page on its first amgettuple, prepares the ORDER BY
 * argument, and asks the Searcher for itopk_size results at a time; when the
 * executor keeps asking (filters, large LIMIT) the same Searcher continues,
 * up to cagra.max_scan_tuples rows in all.  Deleted nodes are traversed,
 * never returned.  When the GPU worker serves the search, its results come
 * first, in rounds of growing itopk_size up to the kernel's 512, and the
 * CPU Searcher takes over if the executor wants more still.  When the
 * search stops (cagra_search_stops, or it finds no more) and the executor
 * still asks, every node not yet returned follows in distance order
 * (exhaustive.h), so a filter the index cannot see does not end the scan
 * early; only rows the search missed closer than the last row it returned
 * are left out, as they would break the order.
 */
#include "am/accessor.h"
#include "am/exhaustive.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>

#include "am/worker_copy.h"
#include "core/search.h"
#include "type/vector.h"

extern "C" {
#include "access/relscan.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "port/pg_bitutils.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
}

/* ---- the scan's C++ state ---- */

struct CagraScanState
{
	CagraMetaData meta;
	std::vector<float> query;
	std::vector<uint32_t> entries;
	std::unique_ptr<CagraPageAccessor> accessor;
	std::unique_ptr<cagra::Searcher<CagraPageAccessor>> searcher;
	std::vector<cagra::Neighbor> batch;
	size_t		pos = 0;
	uint32		batch_size = 0; /* itopk_size the searcher was started with */
	bool		exhausted = false;

	/* Normal paths only (rescan, a new search, endscan): unpins the pages.
	 * On error the object is just deleted and the resource owner unpins. */
	void reset()
	{
		if (accessor)
			accessor->release_pins();
		searcher.reset();
		accessor.reset();
		batch.clear();
		pos = 0;
		exhausted = false;
	}
};

static void
cagra_reset_scan_state(CagraScanState *s) noexcept
{
	s->reset();
}

/*
 * The GPU worker's rounds for the scan's query: node ids in distance order
 * with the copy's heap TIDs (under an MVCC snapshot; else NULL and the node
 * headers are read).  A round asks for k = itopk_size results; when the
 * executor wants more than it gave, the next asks for twice as many, up to
 * the kernel's 512, and then the CPU Searcher continues.  Each skips rows
 * the worker already gave and rows closer than the last one returned, so
 * the order the executor trusts holds.
 */
typedef struct CagraWorkerRound
{
	Oid			index;
	float	   *query;			/* prepared */
	bool		mvcc_snapshot;
	uint32		k;				/* this round's k (and itopk_size) */
	uint32		count;
	uint32		pos;
	uint32	   *ids;
	float	   *dists;
	uint64	   *tids;
	uint32		nreturned;		/* rows the rounds returned */
} CagraWorkerRound;

/*
 * The ORDER BY values a scan returns: the operator's value of each distance
 * or, when the index rounds vectors to float16, a lower bound of the value
 * on the heap's vector, which the executor rechecks and re-sorts by
 * (xs_recheckorderby; docs/storage.md).  Monotone in the distance, so the
 * order of the results stays that of the distances.
 */
typedef struct CagraOrderValues
{
	cagra::VectorFormat format;
	double		query_norm;
	double		max_norm;
	bool		lossy;
} CagraOrderValues;

static double
cagra_order_value(const CagraOrderValues *o, float distance)
{
	return o->format.operator_lower_bound(distance, o->query_norm, o->max_norm);
}

/* What the scan keeps in scan->opaque (plain C data). */
typedef struct CagraScanOpaqueData
{
	CagraOwner *owner;
	CagraScanState *state;
	CagraMetaData meta;			/* read by the first amgettuple since the last rescan */
	const float *raw_query;		/* the ORDER BY argument's elements, as floats */
	bool		started;		/* the search has been set up since the last rescan */
	bool		empty;			/* nothing to return (empty index) */
	bool		null_query;		/* ORDER BY v <-> NULL: any order, NULL values */
	CagraWorkerRound *worker;	/* the GPU worker's results, returned first */
	CagraOrderValues order;
	MemoryContext cxt;			/* the scan's: what follows lives until a rescan */
	CagraReturnedRows returned;	/* every row returned since the last rescan */
	uint64		cpu_results;	/* results the CPU search gave since then */
	CagraExhaustivePass *pass;	/* after the search stopped */
} CagraScanOpaqueData;

typedef CagraScanOpaqueData *CagraScanOpaque;

/*
 * How many of the worker's results the last scans of an index in this
 * backend returned.  Under a filter the index cannot see (WHERE ... ORDER
 * BY v <-> q LIMIT k, the index scan plan) a scan returns about k / the
 * filter's pass rate of them, so a first round of itopk_size runs out and
 * further rounds (each of twice the k before) must follow: at 10% on
 * 1,000,000 rows, two rounds a query, half the worker's requests.  The next
 * scan of the index asks at once for the k that the last scans' counts say
 * costs least: for each power of two from itopk_size to the kernel's 512,
 * the results those scans would have cost, every round counted as its k
 * plus CAGRA_ROUND_FIXED_COST.  Powers of two only, so that the first
 * rounds of concurrent scans ask alike and the worker batches them.
 */
#define CAGRA_ROUND_MEMORY 8	/* indexes remembered */
#define CAGRA_ROUND_HISTORY 16	/* scans remembered per index */

/*
 * A round's cost besides its k, in results: its round trip and the
 * kernel's fixed part.  Not measured apart; it only tips the choice between
 * a larger first round and a second one, and at a 10% filter (about 100
 * results a scan, a quarter of scans past 128) any value below about 270
 * picks 128 over 256.
 */
#define CAGRA_ROUND_FIXED_COST 64

static struct
{
	Oid			index;
	uint32		returned[CAGRA_ROUND_HISTORY];	/* 0: no scan yet */
	int			next;
}			cagra_round_memory[CAGRA_ROUND_MEMORY];
static int	cagra_round_memory_next = 0;

/* What asking for `first` and doubling from there costs a scan that
 * returns `returned` results. */
static uint64
cagra_rounds_cost(uint32 first, uint32 returned)
{
	uint64		cost = 0;

	for (uint32 k = first;; k = Min(2 * k, (uint32) CAGRA_WORKER_MAX_K))
	{
		cost += k + CAGRA_ROUND_FIXED_COST;
		if (returned <= k || k == CAGRA_WORKER_MAX_K)
			return cost;
	}
}

static uint32
cagra_first_round_k(Oid index, uint32 itopk)
{
	for (int i = 0; i < CAGRA_ROUND_MEMORY; i++)
	{
		const uint32 *returned = cagra_round_memory[i].returned;
		uint32		best = itopk;
		uint64		best_cost = PG_UINT64_MAX;

		if (cagra_round_memory[i].index != index)
			continue;
		for (uint32 k = itopk;; k = Min(pg_nextpower2_32(k + 1), (uint32) CAGRA_WORKER_MAX_K))
		{
			uint64		cost = 0;

			for (int h = 0; h < CAGRA_ROUND_HISTORY; h++)
				if (returned[h] > 0)
					cost += cagra_rounds_cost(k, returned[h]);
			if (cost < best_cost)
			{
				best = k;
				best_cost = cost;
			}
			if (k == CAGRA_WORKER_MAX_K)
				return best;
		}
	}
	return itopk;
}

static void
cagra_remember_returned(Oid index, uint32 returned)
{
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
	cagra_round_memory[i].returned[cagra_round_memory[i].next] = Max(returned, 1);
	cagra_round_memory[i].next = (cagra_round_memory[i].next + 1) % CAGRA_ROUND_HISTORY;
}

/* The answers of the round before. */
static void
cagra_worker_round_clear(CagraWorkerRound *w)
{
	if (w->ids)
		pfree(w->ids);
	if (w->dists)
		pfree(w->dists);
	if (w->tids)
		pfree(w->tids);
	w->ids = NULL;
	w->dists = NULL;
	w->tids = NULL;
	w->count = w->pos = 0;
}

static void
cagra_worker_round_end(CagraWorkerRound *w)
{
	if (!w)
		return;
	cagra_remember_returned(w->index, w->nreturned);
	cagra_worker_round_clear(w);
	pfree(w->query);
	pfree(w);
}

/* One round of k results from the worker (its itopk_size k too); false,
 * with the fallback counted or reported, when the worker did not serve it. */
static bool
cagra_worker_round_ask(CagraWorkerRound *w, Relation index, const CagraMetaData *meta, uint32 k)
{
	CagraSearchRequest req = cagra_search_plan(meta);
	char		why[256];
	CagraCopyExtent copy;

	cagra_worker_round_clear(w);
	req.k = k;
	req.params.itopk_size = k;
	w->k = k;
	w->ids = (uint32 *) palloc(sizeof(uint32) * k);
	w->dists = (float *) palloc(sizeof(float) * k);
	w->tids = (uint64 *) palloc(sizeof(uint64) * k);

	CagraOffload r = cagra_search_through_worker(index, meta, &req, 1, w->query, NULL, w->ids, w->dists, w->tids,
												 &copy, why, sizeof(why));

	if (r != CAGRA_OFFLOAD_OK)
	{
		cagra_worker_search_fallback(r, why);
		cagra_worker_round_clear(w);
		return false;
	}
	/* the nodes it lacks have no copy TID; other snapshots want the headers */
	if (cagra_copy_is_partial(meta, &copy) || !w->mvcc_snapshot)
	{
		pfree(w->tids);
		w->tids = NULL;
	}
	if (cagra_copy_is_partial(meta, &copy))
		cagra_merge_tail(index, meta, &copy, 1, w->query, NULL, NULL, k, w->ids, w->dists);
	w->count = k;
	return true;
}

/* Ask the worker for the nearest nodes of `raw` (not yet prepared); NULL:
 * search on the CPU. */
static CagraWorkerRound *
cagra_worker_round_begin(Relation index, const CagraMetaData *meta, const float *raw, bool mvcc_snapshot)
{
	if (!cagra_worker_wanted("search"))
		return NULL;

	cagra::SearchParams params = cagra_search_params(meta);
	uint32		k = Max(params.itopk_size, (uint32) 1);

	if (k > CAGRA_WORKER_MAX_K)
	{
		if (cagra_device == CAGRA_SEARCH_GPU)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("cagra.itopk_size %u is larger than the GPU allows (%d)",
							params.itopk_size, CAGRA_WORKER_MAX_K)));
		return NULL;
	}

	CagraWorkerRound *w = (CagraWorkerRound *) palloc0(sizeof(CagraWorkerRound));

	k = cagra_first_round_k(RelationGetRelid(index), k);
	w->index = RelationGetRelid(index);
	w->query = (float *) palloc(sizeof(float) * meta->dims);
	cagra_prepare((cagra::Metric) meta->metric, raw, w->query, meta->dims);
	w->mvcc_snapshot = mvcc_snapshot;
	if (!cagra_worker_round_ask(w, index, meta, k))
	{
		cagra_worker_round_end(w);
		return NULL;
	}
	return w;
}

/* The rounds' next result to return (TID and distance) that the scan's
 * `returned` rows admit; false when this round has none left. */
static bool
cagra_worker_round_next(CagraWorkerRound *w, Relation index, const CagraMetaData *meta,
						const CagraReturnedRows *returned, ItemPointer tid, float *distance)
{
	while (w->pos < w->count)
	{
		uint32		id = w->ids[w->pos];
		float		d = w->dists[w->pos];
		uint64		packed = w->tids ? w->tids[w->pos] : 0;
		CagraNodeHeader hdr;

		w->pos++;
		if (id == cagra::kInvalidNode)
			break;
		if (packed != 0)
			cagra_unpack_tid(packed, &hdr.heap_tid);	/* see cagra_worker_search */
		else
		{
			/* the page says whether vacuum removed it since the copy was made */
			cagra_read_record_bytes(index, meta, id, 0, sizeof(hdr), &hdr);
			if (!cagra_node_is_live(hdr.flags))
				continue;
		}
		if (!cagra_returned_admits(returned, &hdr.heap_tid, d))
			continue;
		*tid = hdr.heap_tid;
		*distance = d;
		w->nreturned++;
		return true;
	}
	w->pos = w->count;
	return false;
}

/* After a round ran out: the next, of twice its k (at most the kernel's
 * 512); false when there is none (the last was of 512, or not full: the
 * worker found no more), or the worker did not serve it. */
static bool
cagra_worker_round_widen(CagraWorkerRound *w, Relation index, const CagraMetaData *meta)
{
	if (w->k >= CAGRA_WORKER_MAX_K || w->count == 0 || w->ids[w->count - 1] == cagra::kInvalidNode)
		return false;
	return cagra_worker_round_ask(w, index, meta, Min(2 * w->k, (uint32) CAGRA_WORKER_MAX_K));
}

IndexScanDesc
cagra_beginscan(Relation index, int nkeys, int norderbys)
{
	IndexScanDesc scan = RelationGetIndexScan(index, nkeys, norderbys);
	CagraScanOpaque so = (CagraScanOpaque) palloc0(sizeof(CagraScanOpaqueData));

	cagra_guard_or_error([so] { so->state = new CagraScanState(); });
	so->owner = cagra_owner_new(CurrentMemoryContext, so->state, cagra_delete_object<CagraScanState>);
	so->cxt = AllocSetContextCreate(CurrentMemoryContext, "cagra scan", ALLOCSET_DEFAULT_SIZES);
	cagra_returned_init(&so->returned, so->cxt);
	scan->opaque = so;
	/* the AM provides the ORDER BY value arrays */
	if (norderbys > 0)
	{
		scan->xs_orderbyvals = (Datum *) palloc0(sizeof(Datum) * norderbys);
		scan->xs_orderbynulls = (bool *) palloc(sizeof(bool) * norderbys);
		memset(scan->xs_orderbynulls, true, sizeof(bool) * norderbys);
	}
	return scan;
}

void
cagra_rescan(IndexScanDesc scan, ScanKey keys, int nkeys, ScanKey orderbys, int norderbys)
{
	CagraScanOpaque so = (CagraScanOpaque) scan->opaque;

	if (keys && scan->numberOfKeys > 0)
		memmove(scan->keyData, keys, scan->numberOfKeys * sizeof(ScanKeyData));
	if (orderbys && scan->numberOfOrderBys > 0)
		memmove(scan->orderByData, orderbys, scan->numberOfOrderBys * sizeof(ScanKeyData));
	cagra_reset_scan_state(so->state);
	so->started = false;
	cagra_worker_round_end(so->worker);
	so->worker = NULL;
	so->empty = false;
	so->cpu_results = 0;
	so->pass = NULL;
	MemoryContextReset(so->cxt);
	cagra_returned_init(&so->returned, so->cxt);
}

/* Set up the searcher for a prepared copy of `raw`; ERROR on failure. */
static void
cagra_start_search(CagraScanState *s, Relation index, const CagraMetaData *meta, const float *raw)
{
	CagraStatus st;

	if (cagra_guard(&st, [&] {
			s->reset();
			s->meta = *meta;
			s->query.resize(meta->dims);
			cagra::prepare_vector((cagra::Metric) meta->metric, raw, s->query.data(), meta->dims);
			s->entries.assign(meta->entries, meta->entries + meta->entry_count);
			cagra::SearchParams params = cagra_search_params(meta);

			s->batch_size = params.itopk_size;
			s->accessor.reset(new CagraPageAccessor(index, *meta, true, true));
			s->searcher = cagra_new_searcher(*s->accessor, s->query.data(), params, s->entries);
		}))
		return;
	s->reset();
	cagra_report_status(&st);
}

/* The next batch of live results; ERROR on failure. */
static void
cagra_next_batch(CagraScanState *s, uint32 want)
{
	CagraStatus st;

	if (cagra_guard(&st, [&] {
			const CagraPageAccessor &acc = *s->accessor;
			auto		live = [&acc](uint32_t id) {
				CagraPageAccessor::NodeInfo info;

				return acc.node_info(id, &info) && cagra_node_is_live(info.flags);
			};

			s->batch.resize(want);
			uint32		got = s->searcher->next(want, live, s->batch.data());

			/*
			 * Fewer than asked: the reachable graph is exhausted, and what it
			 * still gave may lie beyond nodes it cannot reach; the exhaustive
			 * pass returns those together with the rest, in order.
			 */
			s->batch.resize(got < want ? 0 : got);
			s->pos = 0;
			if (got < want)
				s->exhausted = true;
		}))
		return;
	s->batch.clear();
	s->exhausted = true;
	cagra_report_status(&st);
}

/* Heap TID and distance of the batch's next result. */
static bool
cagra_take_result(CagraScanState *s, ItemPointer tid, float *distance) noexcept
{
	CagraPageAccessor::NodeInfo info;
	const cagra::Neighbor &nb = s->batch[s->pos++];

	if (!s->accessor->node_info(nb.id, &info))
		return false;
	*tid = info.heap_tid;
	*distance = nb.distance;
	return true;
}

/* Read the meta page and the query; false when the scan returns nothing. */
static bool
cagra_setup_scan(IndexScanDesc scan, CagraScanOpaque so)
{
	CagraMetaData *meta = &so->meta;

	if (scan->numberOfOrderBys == 0 || scan->orderByData[0].sk_attno != 1)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("cagra index scans need an ORDER BY distance operator")));
	cagra_read_meta(scan->indexRelation, meta);
	if (meta->n == 0 || meta->live == 0)
		return false;

	const float *raw;

	so->null_query = (scan->orderByData[0].sk_flags & SK_ISNULL) != 0;
	if (so->null_query)
	{
		/* every distance is NULL: walk from the zero vector, any order will do */
		raw = (const float *) palloc0(meta->dims * sizeof(float));
	}
	else
	{
		int			dim;

		raw = vector_datum_floats(scan->orderByData[0].sk_argument, cagra_index_is_halfvec(scan->indexRelation),
								  &dim);
		cagra_check_dims(scan->indexRelation, meta->dims, dim);
	}
	so->raw_query = raw;
	so->order.format = cagra_format_of(meta);
	so->order.query_norm = so->order.format.bound_norm(raw);	/* prepared == raw but under cosine */
	so->order.max_norm = meta->max_norm;
	so->order.lossy = cagra_index_rounds_vectors(scan->indexRelation, meta);
	/* checked as the core checks them, so a search served by the GPU worker
	 * fails on bad settings as the CPU one does */
	cagra_guard_or_error([meta] { cagra::validate_search_params(cagra_search_params(meta), 0); });
	if (!so->null_query)
		so->worker = cagra_worker_round_begin(scan->indexRelation, meta, raw, IsMVCCSnapshot(scan->xs_snapshot));
	if (so->worker)
		return true;			/* the CPU search starts if the executor wants more */
	cagra_start_search(so->state, scan->indexRelation, meta, raw);
	return true;
}

static bool
cagra_return_tuple(IndexScanDesc scan, ItemPointer tid, float distance)
{
	CagraScanOpaque so = (CagraScanOpaque) scan->opaque;
	bool		null_value = so->null_query;

	cagra_returned_add(&so->returned, tid, distance);
	scan->xs_heaptid = *tid;
	scan->xs_recheck = false;
	scan->xs_recheckorderby = so->order.lossy && !null_value;
	scan->xs_orderbyvals[0] = null_value ? (Datum) 0 : Float8GetDatum(cagra_order_value(&so->order, distance));
	scan->xs_orderbynulls[0] = null_value;
	return true;
}

/*
 * Whether the graph search stops here for the exhaustive pass: at
 * cagra.max_scan_tuples rows, or once the CPU search has given live /
 * graph_degree results.  By then it has measured about graph_degree vectors
 * a result, as many as the pass measures in all (reading them in order, not
 * at random), and the farther a search goes the more rows it misses, which
 * the pass must skip when they lie before the last row returned.
 */
static bool
cagra_search_stops(CagraScanOpaque so)
{
	uint64		cpu_budget = Max((uint64) so->meta.live / Max(so->meta.graph_degree, 1),
								 (uint64) so->state->batch_size);

	return so->returned.count >= (uint64) cagra_max_scan_tuples ||
		(so->state->searcher && so->cpu_results >= cpu_budget);
}

/* After the search stopped: the next node it did not return; false when
 * the scan returned every live node. */
static bool
cagra_next_exhaustive(IndexScanDesc scan, ItemPointer tid, float *distance)
{
	CagraScanOpaque so = (CagraScanOpaque) scan->opaque;

	if (!so->pass)
	{
		if (so->returned.count >= so->meta.live)
			return false;

		MemoryContext old = MemoryContextSwitchTo(so->cxt);
		float	   *query = (float *) palloc(sizeof(float) * so->meta.dims);

		cagra_prepare((cagra::Metric) so->meta.metric, so->raw_query, query, so->meta.dims);
		so->pass = cagra_exhaustive_begin(scan->indexRelation, &so->meta, query, NULL);
		MemoryContextSwitchTo(old);
	}
	return cagra_exhaustive_next(so->pass, &so->returned, tid, distance);
}

bool
cagra_gettuple(IndexScanDesc scan, ScanDirection dir)
{
	CagraScanOpaque so = (CagraScanOpaque) scan->opaque;
	CagraScanState *s = so->state;

	if (!IsMVCCSnapshot(scan->xs_snapshot))
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("cagra index scans need an MVCC snapshot")));

	if (!so->started)
	{
		so->started = true;
		so->empty = !cagra_setup_scan(scan, so);
		pgstat_count_index_scan(scan->indexRelation);
	}
	if (so->empty)
		return false;

	for (;;)
	{
		ItemPointerData tid;
		float		distance;

		/* cagra.max_scan_tuples bounds the search, not the answer */
		if (so->pass || cagra_search_stops(so))
		{
			if (cagra_next_exhaustive(scan, &tid, &distance))
				return cagra_return_tuple(scan, &tid, distance);
			return false;
		}
		if (so->worker && !s->searcher)
		{
			if (cagra_worker_round_next(so->worker, scan->indexRelation, &so->meta, &so->returned, &tid,
										&distance))
				return cagra_return_tuple(scan, &tid, distance);
			/* the round ran out: a wider one, then the CPU search */
			if (cagra_worker_round_widen(so->worker, scan->indexRelation, &so->meta))
				continue;
			cagra_start_search(s, scan->indexRelation, &so->meta, so->raw_query);
		}
		if (s->pos < s->batch.size())
		{
			if (!cagra_take_result(s, &tid, &distance))
				elog(ERROR, "cagra scan lost the heap TID of a result");
			so->cpu_results++;
			/* after the worker's rounds: what they returned, or the order, skips it */
			if (so->worker && !cagra_returned_admits(&so->returned, &tid, distance))
				continue;
			return cagra_return_tuple(scan, &tid, distance);
		}
		if (s->exhausted)
		{
			if (cagra_next_exhaustive(scan, &tid, &distance))
				return cagra_return_tuple(scan, &tid, distance);
			return false;
		}

		uint64		left = (uint64) cagra_max_scan_tuples - so->returned.count;

		cagra_next_batch(s, (uint32) Min(left, (uint64) s->batch_size));
		CHECK_FOR_INTERRUPTS();
	}
}

void
cagra_endscan(IndexScanDesc scan)
{
	CagraScanOpaque so = (CagraScanOpaque) scan->opaque;

	cagra_reset_scan_state(so->state);
	cagra_worker_round_end(so->worker);
	MemoryContextDelete(so->cxt);
	cagra_owner_free(so->owner);
	pfree(so);
	scan->opaque = NULL;
}
