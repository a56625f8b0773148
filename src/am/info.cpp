/*
 * info.cpp — SQL functions that inspect a cagra index:
 *   cagra_index_info(regclass)   what the meta page says, plus the size;
 *   cagra_index_check(regclass)  every broken invariant, one text row each.
 */
#include "am/cagra_am.h"

#include <cmath>
#include <cstdlib>
#include <cstring>

extern "C" {
#include "access/genam.h"
#include "access/htup_details.h"
#include "catalog/pg_class.h"
#include "commands/defrem.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/tuplestore.h"

PG_FUNCTION_INFO_V1(cagra_index_info);
PG_FUNCTION_INFO_V1(cagra_index_check);
}

/* Open `relid`, which must be a cagra index. */
static Relation
cagra_open_index(Oid relid)
{
	Relation	index = index_open(relid, AccessShareLock);

	if (index->rd_rel->relam != get_index_am_oid("cagra", false))
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("\"%s\" is not a cagra index", RelationGetRelationName(index))));
	return index;
}

Datum
cagra_index_info(PG_FUNCTION_ARGS)
{
	Oid			relid = PG_GETARG_OID(0);
	TupleDesc	tupdesc;
	Relation	index = cagra_open_index(relid);
	CagraMetaData meta;

	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");
	cagra_read_meta(index, &meta);

	BlockNumber pages = RelationGetNumberOfBlocks(index);
	Datum		values[14];
	bool		nulls[14] = {false};

	values[0] = Int32GetDatum((int32) meta.dims);
	values[1] = CStringGetTextDatum(cagra::metric_name((cagra::Metric) meta.metric));
	values[2] = Int32GetDatum((int32) meta.graph_degree);
	values[3] = Int32GetDatum((int32) meta.intermediate_degree);
	values[4] = CStringGetTextDatum(cagra_device_name(meta.build_device));
	values[5] = Int64GetDatum((int64) meta.n);
	values[6] = Int64GetDatum((int64) meta.live);
	values[7] = Int64GetDatum((int64) meta.n - (int64) meta.live);
	values[8] = Int32GetDatum((int32) meta.entry_count);
	values[9] = Int32GetDatum((int32) meta.nodes_per_page);
	values[10] = Int32GetDatum((int32) meta.pages_per_node);
	values[11] = Int64GetDatum((int64) pages);
	values[12] = Int64GetDatum((int64) pages * BLCKSZ);
	values[13] = Int64GetDatum((int64) meta.generation);
	if (meta.dims == 0)
		nulls[0] = nulls[9] = nulls[10] = true;

	index_close(index, AccessShareLock);
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(tupdesc, values, nulls)));
}

/* ---- the check ---- */

typedef struct CagraCheck
{
	Tuplestorestate *store;
	TupleDesc	desc;
	uint64		problems;
} CagraCheck;

#define CAGRA_CHECK_MAX_PROBLEMS 1000

static void
cagra_problem(CagraCheck *c, const char *fmt,...) pg_attribute_printf(2, 3);

static void
cagra_problem(CagraCheck *c, const char *fmt,...)
{
	char		buf[512];
	va_list		args;

	c->problems++;
	if (c->problems > CAGRA_CHECK_MAX_PROBLEMS)
		return;
	va_start(args, fmt);
	vsnprintf(buf, sizeof(buf), fmt, args);
	va_end(args);

	Datum		value = CStringGetTextDatum(buf);
	bool		isnull = false;

	tuplestore_putvalues(c->store, c->desc, &value, &isnull);
}

static bool
cagra_check_meta_fields(CagraCheck *c, const CagraMetaData *meta, BlockNumber nblocks)
{
	if (meta->magic != CAGRA_MAGIC)
	{
		cagra_problem(c, "meta page: bad magic number %08x", meta->magic);
		return false;
	}
	if (meta->version != CAGRA_FORMAT_VERSION)
	{
		cagra_problem(c, "meta page: format version %u, expected %d", meta->version, CAGRA_FORMAT_VERSION);
		return false;
	}
	if (!cagra::metric_is_valid(meta->metric))
		cagra_problem(c, "meta page: unknown metric %u", meta->metric);
	if (meta->graph_degree < CAGRA_MIN_DEGREE || meta->graph_degree > CAGRA_MAX_DEGREE)
	{
		cagra_problem(c, "meta page: graph_degree %u out of range", meta->graph_degree);
		return false;
	}
	if (meta->dims > cagra::kMaxDim)
	{
		cagra_problem(c, "meta page: %u dimensions, more than %u", meta->dims, cagra::kMaxDim);
		return false;
	}
	if (meta->dims == 0)
	{
		if (meta->n != 0)
			cagra_problem(c, "meta page: %u nodes but no dimensions", meta->n);
		return false;
	}

	CagraMetaData expect = *meta;

	cagra_compute_layout(&expect);
	if (expect.record_size != meta->record_size || expect.nodes_per_page != meta->nodes_per_page ||
		expect.pages_per_node != meta->pages_per_node)
	{
		cagra_problem(c, "meta page: layout %u bytes, %u nodes per page, %u pages per node does not match %u dimensions and degree %u",
					  meta->record_size, meta->nodes_per_page, meta->pages_per_node, meta->dims,
					  meta->graph_degree);
		return false;
	}
	if (meta->live > meta->n)
		cagra_problem(c, "meta page: live count %u is greater than node count %u", meta->live, meta->n);
	if (meta->entry_count > CAGRA_MAX_ENTRY_NODES)
		cagra_problem(c, "meta page: %u entry nodes, at most %d", meta->entry_count, CAGRA_MAX_ENTRY_NODES);
	for (uint32 i = 0; i < Min(meta->entry_count, (uint32) CAGRA_MAX_ENTRY_NODES); i++)
		if (meta->entries[i] >= meta->n)
			cagra_problem(c, "meta page: entry node %u out of range (%u nodes)", meta->entries[i], meta->n);
	if (cagra_blocks_for(meta, meta->n) > nblocks)
	{
		cagra_problem(c, "index has %u blocks, %u nodes need %u", nblocks, meta->n,
					  cagra_blocks_for(meta, meta->n));
		return false;
	}
	return true;
}

static int
cagra_cmp_u32(const void *a, const void *b)
{
	uint32		x = *(const uint32 *) a,
				y = *(const uint32 *) b;

	return x < y ? -1 : x > y;
}

static void
cagra_check_row(CagraCheck *c, const CagraMetaData *meta, uint32 id, bool is_live, const uint32 *row,
				uint32 *sorted)
{
	bool		seen_padding = false;
	uint32		real = 0;

	for (uint32 j = 0; j < meta->graph_degree; j++)
	{
		uint32		t = row[j];

		if (t == cagra::kInvalidNode)
		{
			seen_padding = true;
			continue;
		}
		if (seen_padding)
		{
			cagra_problem(c, "node %u: padding before edge %u (slot %u)", id, t, j);
			seen_padding = false;
		}
		if (t >= meta->n)
			cagra_problem(c, "node %u: edge %u out of range (%u nodes)", id, t, meta->n);
		else if (t == id)
			cagra_problem(c, "node %u: self edge", id);
		sorted[real++] = t;
	}
	qsort(sorted, real, sizeof(uint32), cagra_cmp_u32);
	for (uint32 j = 1; j < real; j++)
		if (sorted[j] == sorted[j - 1])
			cagra_problem(c, "node %u: duplicate edge %u", id, sorted[j]);
	if (real == 0 && is_live && meta->live > meta->graph_degree + 1)
		cagra_problem(c, "node %u: row has no edge in a graph of %u live nodes", id, meta->live);
}

static void
cagra_check_vector(CagraCheck *c, const CagraMetaData *meta, uint32 id, const float *x)
{
	double		norm = 0;

	for (uint32 i = 0; i < meta->dims; i++)
	{
		if (std::isnan(x[i]) || std::isinf(x[i]))
		{
			cagra_problem(c, "node %u: vector element %u is %s", id, i, std::isnan(x[i]) ? "NaN" : "infinite");
			return;
		}
		norm += (double) x[i] * x[i];
	}
	if (meta->metric == (uint32) cagra::Metric::Cosine && fabs(sqrt(norm) - 1.0) > 1e-3)
		cagra_problem(c, "node %u: vector norm %g, expected 1 under cosine", id, sqrt(norm));
}

static void
cagra_check_nodes(CagraCheck *c, Relation index, const CagraMetaData *meta)
{
	char	   *rec = (char *) palloc(meta->record_size);
	uint32	   *sorted = (uint32 *) palloc(meta->graph_degree * sizeof(uint32));
	float	   *vec = (float *) palloc(meta->dims * sizeof(float));
	uint32		live = 0;

	for (uint32 id = 0; id < meta->n; id++)
	{
		CagraNodeHeader hdr;

		CHECK_FOR_INTERRUPTS();
		cagra_read_record_bytes(index, meta, id, 0, meta->record_size, rec);
		memcpy(&hdr, rec, sizeof(hdr));
		bool		is_live = (hdr.flags & CAGRA_NODE_LIVE) != 0;
		bool		is_deleted = (hdr.flags & CAGRA_NODE_DELETED) != 0;

		if (is_live == is_deleted || (hdr.flags & ~(CAGRA_NODE_LIVE | CAGRA_NODE_DELETED)))
			cagra_problem(c, "node %u: bad flags %04x", id, hdr.flags);
		if (is_live)
		{
			live++;
			if (!ItemPointerIsValid(&hdr.heap_tid))
				cagra_problem(c, "node %u: invalid heap TID", id);
		}
		cagra_check_row(c, meta, id, is_live, (const uint32 *) (rec + CAGRA_ROW_OFFSET), sorted);
		cagra_format_of(meta).load(rec + cagra_vector_offset(meta->graph_degree), vec);
		if (is_live)
			cagra_check_vector(c, meta, id, vec);
	}
	if (live != meta->live)
		cagra_problem(c, "meta page: live count %u, but %u nodes are live", meta->live, live);
	pfree(rec);
	pfree(sorted);
	pfree(vec);
}

Datum
cagra_index_check(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	Oid			relid = PG_GETARG_OID(0);
	Relation	index = cagra_open_index(relid);
	CagraCheck	c;
	CagraMetaData meta;

	InitMaterializedSRF(fcinfo, MAT_SRF_USE_EXPECTED_DESC);
	c.store = rsinfo->setResult;
	c.desc = rsinfo->setDesc;
	c.problems = 0;

	/* writers wait while the check runs, so it sees one consistent graph */
	cagra_lock_writers(index, ShareLock);

	Buffer		buf = ReadBuffer(index, CAGRA_METAPAGE_BLKNO);

	LockBuffer(buf, BUFFER_LOCK_SHARE);
	memcpy(&meta, cagra_meta_of(BufferGetPage(buf)), sizeof(meta));
	UnlockReleaseBuffer(buf);

	if (cagra_check_meta_fields(&c, &meta, RelationGetNumberOfBlocks(index)))
		cagra_check_nodes(&c, index, &meta);
	if (c.problems > CAGRA_CHECK_MAX_PROBLEMS)
	{
		char		more[64];

		snprintf(more, sizeof(more), "... and %llu more problems",
				 (unsigned long long) (c.problems - CAGRA_CHECK_MAX_PROBLEMS));
		Datum		value = CStringGetTextDatum(more);
		bool		isnull = false;

		tuplestore_putvalues(c.store, c.desc, &value, &isnull);
	}

	cagra_unlock_writers(index, ShareLock);
	index_close(index, AccessShareLock);
	return (Datum) 0;
}
