/*
 * search_sql.cpp — cagra_search(index, queries vector[], k): many queries
 * in one call, sent to the worker as one batch (or searched on the CPU),
 * returning (query, ctid, distance) for rows visible to the statement's
 * snapshot only, k per query at most, in distance order.
 */
#include "am/accessor.h"
#include "worker/search.h"

#include <vector>

#include "core/search.h"
#include "vector.h"

extern "C" {
#include "access/relation.h"
#include "access/table.h"
#include "access/tableam.h"
#include "catalog/pg_type.h"
#include "executor/tuptable.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/lsyscache.h"
#include "utils/snapmgr.h"

PG_FUNCTION_INFO_V1(cagra_search);
}

/* The CPU path for one query: up to k live node ids and distances. */
static void
cagra_cpu_search_query(Relation index, const CagraMetaData *meta, const float *query, uint32 k,
					   uint32 *ids, float *dists, CagraStatus *st) noexcept
{
	try
	{
		CagraPageAccessor acc(index, *meta, true);
		cagra::SearchParams params = cagra_search_params();

		params.itopk_size = std::max(params.itopk_size, k);
		std::vector<uint32_t> entries(meta->entries, meta->entries + meta->entry_count);
		cagra::Searcher<CagraPageAccessor> s(acc, query, params, entries);
		std::vector<cagra::Neighbor> out(k);
		auto		live = [&acc](uint32_t id) {
			CagraPageAccessor::NodeInfo info;

			return acc.node_info(id, &info) && (info.flags & CAGRA_NODE_LIVE) &&
				!(info.flags & CAGRA_NODE_DELETED);
		};
		uint32		got = s.next(k, live, out.data());

		for (uint32 i = 0; i < k; i++)
		{
			ids[i] = i < got ? out[i].id : CAGRA_INVALID_ID;
			dists[i] = i < got ? out[i].distance : INFINITY;
		}
		cagra_status_ok(st);
	}
	catch (...)
	{
		cagra_status_from_current_exception(st);
	}
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

	float	   *queries = (float *) palloc0((Size) Max(nq, 1) * meta->dims * sizeof(float));
	bool	   *present = (bool *) palloc0(sizeof(bool) * Max(nq, 1));

	for (int q = 0; q < nq; q++)
	{
		if (nulls[q])
			continue;
		Vector	   *v = DatumGetVector(elems[q]);

		cagra_check_dims(index, meta->dims, v->dim);
		float	   *prepared = cagra_worker_prepare_query(meta, v->x);

		memcpy(queries + (Size) q * meta->dims, prepared, meta->dims * sizeof(float));
		pfree(prepared);
		present[q] = true;
	}
	*nq_out = nq;
	*present_out = present;
	return queries;
}

/* Candidates of every query into ids/dists (nq x kk): on the worker when
 * it can, else on the CPU. */
static void
cagra_search_candidates(Relation index, const CagraMetaData *meta, int nq, const float *queries,
						const bool *present, uint32 kk, uint32 *ids, float *dists)
{
	if (cagra_worker_wanted("search"))
	{
		CagraSearchConfig cfg;
		char		why[256];
		uint32		copy_n;

		cfg.k = kk;
		cfg.itopk_size = kk;
		cfg.search_width = (uint32) cagra_search_width;
		cfg.max_iterations = (uint32) cagra_max_iterations;

		CagraOffload r = cagra_worker_search(index, meta, &cfg, (uint32) nq, queries, ids, dists,
											 &copy_n, why, sizeof(why));

		if (r == CAGRA_OFFLOAD_OK)
		{
			if (copy_n < meta->n)
				for (int q = 0; q < nq; q++)
					cagra_worker_merge_tail(index, meta, copy_n, meta->n, queries + (Size) q * meta->dims,
											kk, ids + (Size) q * kk, dists + (Size) q * kk);
			return;
		}
		cagra_worker_search_fallback(r, why);
	}
	for (int q = 0; q < nq; q++)
	{
		CagraStatus st;

		if (!present[q])
			continue;
		cagra_cpu_search_query(index, meta, queries + (Size) q * meta->dims, kk,
							   ids + (Size) q * kk, dists + (Size) q * kk, &st);
		if (!st.ok)
			cagra_report_status(&st);
		CHECK_FOR_INTERRUPTS();
	}
}

/* Emit up to k visible rows of one query's candidates. */
static void
cagra_emit_visible(ReturnSetInfo *rsinfo, Relation index, const CagraMetaData *meta,
				   IndexFetchTableData *fetch, TupleTableSlot *slot, Snapshot snapshot, int q,
				   uint32 k, uint32 kk, const uint32 *ids, const float *dists)
{
	uint32		emitted = 0;

	for (uint32 i = 0; i < kk && emitted < k; i++)
	{
		CagraNodeHeader hdr;
		bool		call_again = false;
		bool		all_dead = false;

		if (ids[i] == CAGRA_INVALID_ID)
			break;
		cagra_read_record_bytes(index, meta, ids[i], 0, sizeof(hdr), &hdr);
		if (!(hdr.flags & CAGRA_NODE_LIVE) || (hdr.flags & CAGRA_NODE_DELETED))
			continue;

		ItemPointerData tid = hdr.heap_tid;

		if (!table_index_fetch_tuple(fetch, &tid, snapshot, slot, &call_again, &all_dead))
			continue;

		Datum		values[3];
		bool		nulls[3] = {false, false, false};
		ItemPointer out = (ItemPointer) palloc(sizeof(ItemPointerData));

		*out = slot->tts_tid;
		values[0] = Int32GetDatum(q + 1);
		values[1] = PointerGetDatum(out);
		values[2] = Float8GetDatum(cagra_operator_value((cagra::Metric) meta->metric, dists[i]));
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
		emitted++;
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
		int			nq;
		bool	   *present;
		float	   *queries = cagra_collect_queries(index, &meta, arr, &nq, &present);
		/* more candidates than k: some may be invisible to this snapshot */
		uint32		kk = Min((uint32) CAGRA_WORKER_MAX_K, Max((uint32) cagra_itopk_size, (uint32) k));
		uint32	   *ids = (uint32 *) palloc_extended((Size) nq * kk * sizeof(uint32), MCXT_ALLOC_HUGE);
		float	   *dists = (float *) palloc_extended((Size) nq * kk * sizeof(float), MCXT_ALLOC_HUGE);

		cagra_search_candidates(index, &meta, nq, queries, present, kk, ids, dists);

		IndexFetchTableData *fetch = table_index_fetch_begin(heap);
		TupleTableSlot *slot = table_slot_create(heap, NULL);
		Snapshot	snapshot = GetActiveSnapshot();

		for (int q = 0; q < nq; q++)
			if (present[q])
				cagra_emit_visible(rsinfo, index, &meta, fetch, slot, snapshot, q, (uint32) k, kk,
								   ids + (Size) q * kk, dists + (Size) q * kk);
		ExecDropSingleTupleTableSlot(slot);
		table_index_fetch_end(fetch);
	}
	table_close(heap, AccessShareLock);
	index_close(index, AccessShareLock);
	return (Datum) 0;
}
