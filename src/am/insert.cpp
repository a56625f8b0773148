/*
 * insert.cpp — aminsert: append one node to the graph.
 *
 * Inserts (and vacuum) serialise on the writers' lock, a heavyweight lock on
 * the meta page, so a plan made from the pages stays valid while it is
 * applied.  Order of the WAL records, each crash-safe on its own:
 *   1. the new node's header, row and vector at slot n (invisible: n is
 *      not counted yet);
 *   2. the meta page (n + 1, live + 1, generation + 1) with the reverse
 *      edge of the node's closest neighbour, so a counted node always has
 *      a way in;
 *   3. the other reverse edges into existing rows (an edge a reverse edge
 *      replaces was handed to the new node's row in step 1).
 * Scans read the meta page once, so they never follow an edge to a node
 * appended after they started (it reads as padding).
 */
#include "am/accessor.h"

#include <memory>

#include <algorithm>
#include <cstring>

#include "core/build.h"
#include "core/update.h"
#include "type/vector.h"

extern "C" {
#include "miscadmin.h"
#include "utils/memutils.h"
}

/* The core's plan for node `new_id`, in a C++ object the caller owns. */
static cagra::InsertPlan *
cagra_plan_insert(Relation index, const CagraMetaData *meta, const float *vec, uint32 new_id,
				  CagraStatus *st) noexcept
{
	cagra::InsertPlan *plan = nullptr;

	cagra_guard(st, [&] {
		CagraPageAccessor acc(index, *meta, false);
		std::vector<uint32_t> entries(meta->entries, meta->entries + meta->entry_count);
		std::unique_ptr<cagra::InsertPlan> p(new cagra::InsertPlan(
			cagra::plan_insert(acc, vec, new_id, cagra_search_params(), entries)));

		std::sort(p->updates.begin(), p->updates.end(),
				  [](const cagra::EdgeUpdate &a, const cagra::EdgeUpdate &b) { return a.node < b.node; });
		plan = p.release();
	});
	return plan;
}

/* The record of a new live node: header, row, vector. */
static char *
cagra_make_record(const CagraMetaData *meta, ItemPointer heap_tid, const uint32 *row, const float *vec)
{
	char	   *rec = (char *) palloc0(meta->record_size);
	CagraNodeHeader hdr;

	hdr.heap_tid = *heap_tid;
	hdr.flags = CAGRA_NODE_LIVE;
	memcpy(rec, &hdr, sizeof(hdr));
	memcpy(rec + CAGRA_ROW_OFFSET, row, meta->graph_degree * sizeof(uint32));
	cagra_format_of(meta).store(vec, rec + cagra_vector_offset(meta->graph_degree));
	return rec;
}

/*
 * Steps 2 and 3: count the node in the meta page together with the reverse
 * edge of its closest neighbour (one WAL record: a counted node always has
 * a way in), then add the other reverse edges.
 */
static void
cagra_publish_node(Relation index, const CagraMetaData *meta, uint32 new_id, uint32 closest,
				   const cagra::EdgeUpdate *updates, size_t nupdates)
{
	const cagra::EdgeUpdate *first = NULL;

	for (size_t i = 0; i < nupdates; i++)
	{
		const cagra::EdgeUpdate *u = &updates[i];

		if (u->node >= new_id || u->slot >= meta->graph_degree)
			elog(ERROR, "cagra insert plan has an edge update out of range (node %u, slot %u)",
				 u->node, u->slot);
		if (u->node == closest && !first)
			first = u;
	}

	Buffer		metabuf = ReadBuffer(index, CAGRA_METAPAGE_BLKNO);
	Buffer		rowbuf = InvalidBuffer;
	CagraMetaData m;

	LockBuffer(metabuf, BUFFER_LOCK_EXCLUSIVE);

	GenericXLogState *state = GenericXLogStart(index);
	Page		metapage = GenericXLogRegisterBuffer(state, metabuf, 0);

	if (first)
	{
		/* one edge lies in one page; that page comes after the meta page,
		 * so the locks are taken in block order */
		BlockNumber blkno;
		uint32		off;

		cagra_locate(meta, first->node, CAGRA_ROW_OFFSET + first->slot * sizeof(uint32), &blkno, &off);
		rowbuf = ReadBuffer(index, blkno);
		LockBuffer(rowbuf, BUFFER_LOCK_EXCLUSIVE);
		memcpy((char *) GenericXLogRegisterBuffer(state, rowbuf, 0) + off, &first->target, sizeof(uint32));
	}
	m = *meta;
	m.n = new_id + 1;
	m.live++;
	m.generation++;
	/* an index that grew by inserts (built empty or small) takes new nodes
	 * as entries until it has as many as a build would pick */
	if (m.entry_count < Min(cagra::fixed_entry_count(m.n), (uint32) CAGRA_MAX_ENTRY_NODES))
		m.entries[m.entry_count++] = new_id;
	memcpy(cagra_meta_of(metapage), &m, sizeof(m));
	GenericXLogFinish(state);
	if (rowbuf != InvalidBuffer)
		UnlockReleaseBuffer(rowbuf);
	UnlockReleaseBuffer(metabuf);

	CagraWalBatch batch;

	cagra_batch_begin(&batch, index, meta);
	for (size_t i = 0; i < nupdates; i++)
		if (&updates[i] != first)
			cagra_batch_write(&batch, updates[i].node, CAGRA_ROW_OFFSET + updates[i].slot * sizeof(uint32),
							  &updates[i].target, sizeof(uint32));
	cagra_batch_finish(&batch);
}

/* Fix dims and the layout of an index built empty on a vector column
 * without typmod: its first vector decides. */
static void
cagra_fix_dims(CagraMetaData *meta, int dims)
{
	if (meta->dims != 0)
		return;
	if (meta->n != 0)
		elog(ERROR, "cagra index has nodes but no dimensions");
	meta->dims = (uint32) dims;
	cagra_compute_layout(meta);
}

bool
cagra_insert(Relation index, Datum *values, bool *isnull, ItemPointer heap_tid,
			 Relation heap, IndexUniqueCheck checkUnique, bool indexUnchanged,
			 IndexInfo *indexInfo)
{
	if (isnull[0])
		return false;

	MemoryContext cxt = AllocSetContextCreate(CurrentMemoryContext, "cagra insert",
											  ALLOCSET_DEFAULT_SIZES);
	MemoryContext old = MemoryContextSwitchTo(cxt);
	int			dim;
	const float *x = vector_datum_floats(values[0], cagra_index_is_halfvec(index), &dim);
	CagraMetaData meta;
	CagraStatus st;

	cagra_lock_writers(index, ExclusiveLock);
	cagra_read_meta(index, &meta);
	cagra_fix_dims(&meta, dim);
	cagra_check_dims(index, meta.dims, dim);

	cagra::Metric metric = (cagra::Metric) meta.metric;

	if (cagra_vector_unindexable(metric, x, dim))
	{
		/* not indexed, as in a build: its cosine distance is undefined */
		cagra_unlock_writers(index, ExclusiveLock);
		MemoryContextSwitchTo(old);
		MemoryContextDelete(cxt);
		return false;
	}
	if (meta.n >= cagra::kInvalidNode - 1)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("cagra index \"%s\" is full", RelationGetRelationName(index)),
				 errhint("REINDEX the index to drop deleted nodes.")));

	float	   *vec = (float *) palloc(meta.dims * sizeof(float));

	cagra_prepare(metric, x, vec, meta.dims);
	if (meta.element_type == (uint32) cagra::ElementType::Float16)
	{
		cagra_check_storable(index, cagra_format_of(&meta), vec, x);
		/* counted in the meta page with the node (cagra_publish_node) */
		meta.max_norm = Max(meta.max_norm, (float4) cagra::vector_norm(vec, meta.dims));
	}

	uint32		new_id = meta.n;
	cagra::InsertPlan *plan = cagra_plan_insert(index, &meta, vec, new_id, &st);

	if (!plan)
		cagra_report_status(&st);
	CagraOwner *owner = cagra_owner_new(cxt, plan, cagra_delete_object<cagra::InsertPlan>);

	if (plan->row.size() != meta.graph_degree)
		elog(ERROR, "cagra insert plan has a row of %zu entries, expected %u",
			 plan->row.size(), meta.graph_degree);

	char	   *rec = cagra_make_record(&meta, heap_tid, plan->row.data(), vec);
	CagraWalBatch batch;

	/* the header and row, and the vector, lie apart in the node's group
	 * (the vector may even come first, in the tail of an earlier row page):
	 * written in block order */
	uint32		voff = cagra_vector_offset(meta.graph_degree);
	BlockNumber row_blk,
				vec_blk;
	uint32		poff;

	cagra_locate(&meta, new_id, 0, &row_blk, &poff);
	cagra_locate(&meta, new_id, voff, &vec_blk, &poff);
	cagra_batch_begin(&batch, index, &meta);
	if (vec_blk < row_blk)
		cagra_batch_write(&batch, new_id, voff, rec + voff, meta.record_size - voff);
	cagra_batch_write(&batch, new_id, 0, rec, vec_blk < row_blk ? voff : meta.record_size);
	cagra_batch_finish(&batch);

	cagra_publish_node(index, &meta, new_id, plan->row[0], plan->updates.data(), plan->updates.size());

	cagra_unlock_writers(index, ExclusiveLock);
	cagra_owner_free(owner);
	MemoryContextSwitchTo(old);
	MemoryContextDelete(cxt);
	return false;
}
