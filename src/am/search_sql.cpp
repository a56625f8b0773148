/*
 * search_sql.cpp — cagra_search(index, queries vector[], k): many queries
 * in one call, sent to the worker as one batch (or searched on the CPU),
 * returning (query, ctid, distance) for rows visible to the statement's
 * snapshot only, k per query at most, in distance order.
 * The candidates of the whole batch are settled together
 * (search_resolve.cpp).
 */
#include "am/accessor.h"
#include "am/search_batch.h"
#include "am/worker_copy.h"

#include <vector>

#include "core/search.h"
#include "type/vector.h"

extern "C" {
#include "access/heapam.h"
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
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"

PG_FUNCTION_INFO_V1(cagra_search);
}


/* The CPU path for one query: up to k live node ids and distances. */
static void
cagra_cpu_search_query(Relation index, const CagraMetaData *meta, const float *query, uint32 k,
					   uint32 *ids, float *dists, CagraStatus *st) noexcept
{
	cagra_guard(st, [&] {
		/* pinned pages and the entry-vector cache, as an index scan has */
		CagraPageAccessor acc(index, *meta, true, true);
		cagra::SearchParams params = cagra_search_params();

		params.itopk_size = std::max(params.itopk_size, k);
		std::vector<uint32_t> entries(meta->entries, meta->entries + meta->entry_count);
		auto		s = cagra_new_searcher(acc, query, params, entries);
		std::vector<cagra::Neighbor> out(k);
		auto		live = [&acc](uint32_t id) {
			CagraPageAccessor::NodeInfo info;

			return acc.node_info(id, &info) && cagra_node_is_live(info.flags);
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

static Relation
cagra_open_search_index(Oid indexoid)
{
	Relation	index = index_open(indexoid, AccessShareLock);

	if (index->rd_indam->ambuild != cagra_build)
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("\"%s\" is not a cagra index", RelationGetRelationName(index))));
	return index;
}

/* Prepared queries (nq x dims); NULL elements leave *present false. */
static float *
cagra_collect_queries(Relation index, const CagraMetaData *meta, ArrayType *arr, int *nq_out,
					  bool **present_out)
{
	int16		typlen;
	bool		typbyval;
	char		typalign;
	Datum	   *elems;
	bool	   *nulls;
	int			nq;

	get_typlenbyvalalign(ARR_ELEMTYPE(arr), &typlen, &typbyval, &typalign);
	deconstruct_array(arr, ARR_ELEMTYPE(arr), typlen, typbyval, typalign, &elems, &nulls, &nq);

	float	   *queries = (float *) cagra_scratch(CAGRA_SCRATCH_QUERIES,
												   (Size) nq * meta->dims * sizeof(float));
	bool	   *present = (bool *) palloc0(sizeof(bool) * Max(nq, 1));

	for (int q = 0; q < nq; q++)
	{
		if (nulls[q])
		{
			/* searched with the batch (the worker takes every row), never emitted */
			memset(queries + (Size) q * meta->dims, 0, meta->dims * sizeof(float));
			continue;
		}
		Vector	   *v = DatumGetVector(elems[q]);

		cagra_check_dims(index, meta->dims, v->dim);
		cagra_prepare((cagra::Metric) meta->metric, v->x, queries + (Size) q * meta->dims, meta->dims);
		present[q] = true;
	}
	pfree(elems);
	pfree(nulls);
	*nq_out = nq;
	*present_out = present;
	return queries;
}

/* Candidates of every query into c->ids/dists: on the worker when it can,
 * else on the CPU. */
static void
cagra_search_candidates(Relation index, const CagraMetaData *meta, const float *queries,
						const bool *present, CagraCandidates *c)
{
	if (cagra_worker_wanted("search"))
	{
		CagraSearchRequest req;
		char		why[256];
		uint32		copy_n;

		req.k = c->kk;
		req.params = cagra_search_params();
		req.params.itopk_size = c->kk;

		uint64	   *copy_tids = (uint64 *) cagra_scratch(CAGRA_SCRATCH_COPY_TIDS,
															sizeof(uint64) * (Size) c->nq * c->kk);
		CagraOffload r = cagra_search_through_worker(index, meta, &req, (uint32) c->nq, queries, c->ids,
													 c->dists, copy_tids, &copy_n, why, sizeof(why));

		if (r == CAGRA_OFFLOAD_OK)
		{
			/* the merge moves candidates: their copy TIDs would not follow */
			if (copy_n < meta->n)
				cagra_merge_tail(index, meta, copy_n, c->nq, queries, present, c->kk, c->ids, c->dists);
			else
				c->copy_tids = copy_tids;
			return;
		}
		cagra_worker_search_fallback(r, why);
	}
	for (int q = 0; q < c->nq; q++)
	{
		CagraStatus st;

		if (!present[q])
			continue;
		cagra_cpu_search_query(index, meta, queries + (Size) q * meta->dims, c->kk,
							   c->ids + (Size) q * c->kk, c->dists + (Size) q * c->kk, &st);
		if (!st.ok)
			cagra_report_status(&st);
		CHECK_FOR_INTERRUPTS();
	}
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

Datum
cagra_search(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	Oid			indexoid = PG_GETARG_OID(0);
	ArrayType  *arr = PG_GETARG_ARRAYTYPE_P(1);
	int32		k = PG_GETARG_INT32(2);

	if (k < 1 || k > CAGRA_WORKER_MAX_K)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("k must be between 1 and %d, not %d", CAGRA_WORKER_MAX_K, k)));
	InitMaterializedSRF(fcinfo, 0);

	Relation	index = cagra_open_search_index(indexoid);
	Relation	heap = table_open(index->rd_index->indrelid, AccessShareLock);
	AclResult	acl = pg_class_aclcheck(RelationGetRelid(heap), GetUserId(), ACL_SELECT);

	if (acl != ACLCHECK_OK)
		aclcheck_error(acl, OBJECT_TABLE, RelationGetRelationName(heap));

	CagraMetaData meta;

	cagra_read_meta(index, &meta);
	if (meta.n > 0 && meta.live > 0 && ArrayGetNItems(ARR_NDIM(arr), ARR_DIMS(arr)) > 0)
	{
		CagraCandidates c;
		bool	   *present;
		float	   *queries = cagra_collect_queries(index, &meta, arr, &c.nq, &present);
		Size		total;

		/* more candidates than k: some may be invisible to this snapshot */
		c.kk = Min((uint32) CAGRA_WORKER_MAX_K, Max((uint32) cagra_itopk_size, (uint32) k));
		total = (Size) c.nq * c.kk;
		c.ids = (uint32 *) cagra_scratch(CAGRA_SCRATCH_IDS, total * sizeof(uint32));
		c.dists = (float *) cagra_scratch(CAGRA_SCRATCH_DISTS, total * sizeof(float));
		c.state = (uint8 *) cagra_scratch(CAGRA_SCRATCH_STATE, total);
		c.tids = (ItemPointerData *) cagra_scratch(CAGRA_SCRATCH_TIDS, total * sizeof(ItemPointerData));
		c.copy_tids = NULL;
		memset(c.state, CAGRA_CAND_UNKNOWN, total);
		for (Size i = 0; i < total; i++)
			c.ids[i] = cagra::kInvalidNode;	/* rows of NULL queries stay empty */

		cagra_search_candidates(index, &meta, queries, present, &c);

		/* slots are numbered in 32 bits: huge batches settle in parts */
		int			part = (int) Min((Size) c.nq, (Size) PG_UINT32_MAX / c.kk);
		CagraRowFormer former;

		cagra_row_former_init(&former, rsinfo->setDesc);

		for (int first = 0; first < c.nq; first += part)
		{
			CagraCandidates p = c;
			Size		base = (Size) first * c.kk;

			p.nq = Min(part, c.nq - first);
			p.ids += base;
			p.dists += base;
			p.state += base;
			p.tids += base;
			if (p.copy_tids)
				p.copy_tids += base;
			cagra_resolve(index, &meta, heap, GetActiveSnapshot(), present + first, (uint32) k, &p);
			cagra_emit_results(rsinfo, &former, &meta, present + first, first, (uint32) k, &p);
		}
		ExecDropSingleTupleTableSlot(former.slot);
	}
	table_close(heap, AccessShareLock);
	index_close(index, AccessShareLock);
	return (Datum) 0;
}
