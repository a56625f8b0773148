/*
 * search_sql.cpp — cagra_search(index, queries vector[] or halfvec[], k): many queries
 * in one call, sent to the worker as one batch (or searched on the CPU),
 * returning (query, ctid, distance) for rows visible to the statement's
 * snapshot only, k per query at most, in distance order.  The queries run
 * through one search session (search_session.h), in parts whose memory
 * fits work_mem, each part's candidates found as one batch and settled
 * together (cagra_session_search_all); this file reads the arguments and
 * forms the result rows.  The caller needs SELECT on the columns the index
 * reads, and row-level security must not apply to it: the function returns
 * rows without the policies' filter (docs/reference.md).
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

/* What cagra_session_search_all asks of the array and of the result. */
typedef struct CagraSearchCall
{
	ReturnSetInfo *rsinfo;
	const CagraSearchSession *session;
	CagraQueryArray qa;
	CagraRowFormer former;
} CagraSearchCall;

/* The next nq queries of the array, prepared (nq x dims) into `queries`;
 * NULL elements leave present[q] false. */
static void
cagra_next_queries(void *arg, int nq, float *queries, bool *present)
{
	CagraSearchCall *call = (CagraSearchCall *) arg;
	const CagraMetaData *meta = &call->session->meta;
	CagraQueryArray *qa = &call->qa;

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

		cagra_check_dims(call->session->index, meta->dims, dim);
		cagra_prepare((cagra::Metric) meta->metric, x, queries + (Size) q * meta->dims, meta->dims);
		if (qa->half)
			pfree((void *) x);	/* the widened copy: one at a time */
		present[q] = true;
	}
}

/* Emit up to k visible rows of each query of a settled part (numbered from
 * first + 1), in distance order. */
static void
cagra_emit_rows(void *arg, int first, const bool *present, uint32 k, const CagraCandidates *c)
{
	CagraSearchCall *call = (CagraSearchCall *) arg;
	cagra::Metric metric = (cagra::Metric) call->session->meta.metric;

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
			cagra_row_former_put(&call->former, call->rsinfo->setResult, first + q + 1, &c->tids[base + i],
								 cagra::operator_value(metric, c->dists[base + i]));
			emitted++;
		}
	}
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
		CagraSearchCall call;

		cagra_session_init(&session, index, &meta, allowed, snapshot);
		call.rsinfo = rsinfo;
		call.session = &session;
		cagra_query_array_init(&call.qa, arr);
		cagra_row_former_init(&call.former, rsinfo->setDesc);
		cagra_session_search_all(&session, heap, nitems, (uint32) k, cagra_next_queries, cagra_emit_rows, &call);
		ExecDropSingleTupleTableSlot(call.former.slot);
	}
	table_close(heap, AccessShareLock);
	index_close(index, AccessShareLock);
	return (Datum) 0;
}
