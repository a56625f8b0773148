/*
 * scan.cpp — index scans (ambeginscan, amrescan, amgettuple, amendscan).
 *
 * A scan reads the meta page on its first amgettuple, prepares the ORDER BY
 * argument and takes the rows of a search stream (search_stream.h) one at a
 * time, as the executor asks: the GPU worker's rounds, the CPU searcher's
 * continuation, then every node not yet returned in distance order, so a
 * filter the index cannot see does not end the scan early.  Deleted nodes
 * are traversed, never returned.  Here the rows become the executor's: heap
 * TIDs and ORDER BY values.
 */
#include "am/search_stream.h"

#include "type/vector.h"

extern "C" {
#include "access/relscan.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
}

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
	MemoryContext cxt;			/* the scan's: what follows lives until a rescan */
	bool		started;		/* the search has been set up since the last rescan */
	bool		empty;			/* nothing to return (empty index) */
	bool		null_query;		/* ORDER BY v <-> NULL: any order, NULL values */
	CagraOrderValues order;
	CagraSearchStream *stream;
} CagraScanOpaqueData;

typedef CagraScanOpaqueData *CagraScanOpaque;

IndexScanDesc
cagra_beginscan(Relation index, int nkeys, int norderbys)
{
	IndexScanDesc scan = RelationGetIndexScan(index, nkeys, norderbys);
	CagraScanOpaque so = (CagraScanOpaque) palloc0(sizeof(CagraScanOpaqueData));

	so->cxt = AllocSetContextCreate(CurrentMemoryContext, "cagra scan", ALLOCSET_DEFAULT_SIZES);
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

/* End the search of the last rescan and free what it used. */
static void
cagra_scan_reset(CagraScanOpaque so)
{
	cagra_stream_end(so->stream);
	so->stream = NULL;
	so->started = false;
	so->empty = false;
	MemoryContextReset(so->cxt);
}

void
cagra_rescan(IndexScanDesc scan, ScanKey keys, int nkeys, ScanKey orderbys, int norderbys)
{
	CagraScanOpaque so = (CagraScanOpaque) scan->opaque;

	if (keys && scan->numberOfKeys > 0)
		memmove(scan->keyData, keys, scan->numberOfKeys * sizeof(ScanKeyData));
	if (orderbys && scan->numberOfOrderBys > 0)
		memmove(scan->orderByData, orderbys, scan->numberOfOrderBys * sizeof(ScanKeyData));
	cagra_scan_reset(so);
}

/* Read the meta page and the query and begin the search; false when the
 * scan returns nothing. */
static bool
cagra_setup_scan(IndexScanDesc scan, CagraScanOpaque so)
{
	Relation	index = scan->indexRelation;
	CagraMetaData meta;
	CagraSearchSession session;

	if (scan->numberOfOrderBys == 0 || scan->orderByData[0].sk_attno != 1)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("cagra index scans need an ORDER BY distance operator")));
	cagra_read_meta(index, &meta);
	if (meta.n == 0 || meta.live == 0)
		return false;

	const float *raw;

	so->null_query = (scan->orderByData[0].sk_flags & SK_ISNULL) != 0;
	if (so->null_query)
	{
		/* every distance is NULL: walk from the zero vector, any order will do */
		raw = (const float *) palloc0(meta.dims * sizeof(float));
	}
	else
	{
		int			dim;

		raw = vector_datum_floats(scan->orderByData[0].sk_argument, cagra_index_is_halfvec(index), &dim);
		cagra_check_dims(index, meta.dims, dim);
	}
	so->order.format = cagra_format_of(&meta);
	so->order.query_norm = so->order.format.bound_norm(raw);	/* prepared == raw but under cosine */
	so->order.max_norm = meta.max_norm;
	so->order.lossy = cagra_index_rounds_vectors(index, &meta);

	cagra_session_init(&session, index, &meta, NULL, scan->xs_snapshot);
	cagra_session_check_params(&session);

	float	   *query = (float *) palloc(sizeof(float) * meta.dims);

	cagra_prepare((cagra::Metric) meta.metric, raw, query, meta.dims);
	so->stream = cagra_stream_begin(&session, query, !so->null_query, 0);
	return true;
}

static bool
cagra_return_tuple(IndexScanDesc scan, ItemPointer tid, float distance)
{
	CagraScanOpaque so = (CagraScanOpaque) scan->opaque;
	bool		null_value = so->null_query;

	scan->xs_heaptid = *tid;
	scan->xs_recheck = false;
	scan->xs_recheckorderby = so->order.lossy && !null_value;
	scan->xs_orderbyvals[0] = null_value ? (Datum) 0 : Float8GetDatum(cagra_order_value(&so->order, distance));
	scan->xs_orderbynulls[0] = null_value;
	return true;
}

bool
cagra_gettuple(IndexScanDesc scan, ScanDirection dir)
{
	CagraScanOpaque so = (CagraScanOpaque) scan->opaque;
	ItemPointerData tid;
	float		distance;

	if (!IsMVCCSnapshot(scan->xs_snapshot))
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("cagra index scans need an MVCC snapshot")));

	if (!so->started)
	{
		MemoryContext old = MemoryContextSwitchTo(so->cxt);

		so->started = true;
		so->empty = !cagra_setup_scan(scan, so);
		MemoryContextSwitchTo(old);
		pgstat_count_index_scan(scan->indexRelation);
	}
	if (so->empty || !cagra_stream_next(so->stream, &tid, &distance))
		return false;
	return cagra_return_tuple(scan, &tid, distance);
}

void
cagra_endscan(IndexScanDesc scan)
{
	CagraScanOpaque so = (CagraScanOpaque) scan->opaque;

	cagra_stream_end(so->stream);
	MemoryContextDelete(so->cxt);
	pfree(so);
	scan->opaque = NULL;
}
