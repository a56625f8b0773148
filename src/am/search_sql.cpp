/*
 * search_sql.cpp — cagra_search(index, queries vector[], k): many queries
 * in one call, sent to the worker as one batch (or searched on the CPU),
 * returning (query, ctid, distance) for rows visible to the statement's
 * snapshot only, k per query at most, in distance order.  The queries run
 * through one search session (search_session.h), which finds the
 * candidates of a whole batch and settles them together.
 *
 * The queries are taken in parts whose scratch memory fits work_mem (one
 * query at least), so a call's memory does not grow with the array; each
 * part is one batch.  Through the worker, each part after the first is
 * queued before the part before it is settled, so that the worker searches
 * while the backend settles (CagraSearchPart).  The caller needs SELECT on
 * the columns the index reads, and row-level security must not apply to
 * it: the function returns rows without the policies' filter
 * (docs/reference.md).
 *
 * With a fourth argument, `allowed` (tid[]), only rows it names are
 * returned: their TIDs (HOT chains' roots) go with the queries to the
 * worker when it runs, which maps them to its copy's nodes; in the backend
 * the node headers are read to find them.  Either way the search is exact
 * over the allowed nodes when they are few, else a traversal that returns
 * only them, widened for their pass rate (cagra::plan_filtered_search).  A
 * query whose candidates settle short of k while allowed nodes remain
 * unseen measures them all (cagra_session_settle), so it returns
 * min(k, visible allowed rows) however many of them are dead.
 */
#include "am/search_session.h"
#include "am/worker_copy.h"

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
} CagraQueryArray;

static void
cagra_query_array_init(CagraQueryArray *qa, AnyArrayType *arr)
{
	get_typlenbyvalalign(AARR_ELEMTYPE(arr), &qa->elmlen, &qa->elmbyval, &qa->elmalign);
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
		Vector	   *v = DatumGetVector(elem);

		cagra_check_dims(index, meta->dims, v->dim);
		cagra_prepare((cagra::Metric) meta->metric, v->x, queries + (Size) q * meta->dims, meta->dims);
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
cagra_part_collect(CagraSearchPart *p, int set, const CagraSearchSession *session, CagraQueryArray *qa,
				   int first, int nq, uint32 kk, bool to_worker)
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
	p->queries = cagra_collect_queries(session->index, meta, qa, nq, set, into, &p->present);
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
cagra_part_search(CagraSearchPart *p, const CagraSearchSession *session)
{
	MemoryContext old = MemoryContextSwitchTo(p->cxt);

	if (p->request.wait.queued)
	{
		char		why[256];
		CagraCopyExtent copy;
		uint64	   *copy_tids = cagra_session_copy_tids_room(&p->c);
		CagraOffload r = cagra_worker_search_finish(&p->request, p->c.ids, p->c.dists, copy_tids, &copy, why,
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
				cagra_worker_search_fallback(r, why);
			cagra_session_candidates(session, p->queries, p->present, &p->c, r == CAGRA_OFFLOAD_SKIPPED);
		}
	}
	else
		cagra_session_candidates(session, p->queries, p->present, &p->c, true);
	MemoryContextSwitchTo(old);
}

/* Settle the part's candidates and emit its rows (copied into the
 * tuplestore, which lives outside the part's context). */
static void
cagra_part_settle(CagraSearchPart *p, ReturnSetInfo *rsinfo, CagraRowFormer *former,
				  const CagraSearchSession *session, Relation heap, uint32 k)
{
	MemoryContext old = MemoryContextSwitchTo(p->cxt);

	cagra_session_settle(session, heap, p->queries, p->present, k, &p->c);
	cagra_emit_results(rsinfo, former, &session->meta, p->present, p->first, k, &p->c);
	MemoryContextSwitchTo(old);
	MemoryContextReset(p->cxt);
}

/* The rows of every query of `arr` (nitems of them, at least one) into the
 * function's result, part by part. */
static void
cagra_search_all(ReturnSetInfo *rsinfo, const CagraSearchSession *session, Relation heap, AnyArrayType *arr,
				 int nitems, uint32 k)
{
	uint32		kk = cagra_session_candidates_per_query(session, k);
	bool		pipelined = cagra_search_pipelined(nitems, session->allowed);
	int			part = cagra_search_part_size(&session->meta, kk, nitems, pipelined);
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

		/* part n: collected and queued (from the second on: the first goes
		 * the usual way, which uploads a copy the worker lacks), the part
		 * before it settled meanwhile, then its answer taken */
		for (int first = 0, n = 0; first < nitems; first += part, n++)
		{
			CagraSearchPart *cur = &parts[n % CAGRA_SCRATCH_SETS];

			cagra_part_collect(cur, n % CAGRA_SCRATCH_SETS, session, &qa, first, Min(part, nitems - first), kk,
							   pipelined && prev);
			if (prev)
				cagra_part_settle(prev, rsinfo, &former, session, heap, k);
			cagra_part_search(cur, session);
			prev = cur;
			CHECK_FOR_INTERRUPTS();
		}
		if (prev)
			cagra_part_settle(prev, rsinfo, &former, session, heap, k);
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
		CagraSearchSession session;

		cagra_session_init(&session, index, &meta, allowed, snapshot);
		cagra_search_all(rsinfo, &session, heap, arr, nitems, (uint32) k);
	}
	table_close(heap, AccessShareLock);
	index_close(index, AccessShareLock);
	return (Datum) 0;
}
