/*
 * insert.cpp — aminsert: add one node to the graph, in a slot vacuum freed
 * when there is one, else appended.
 *
 * Inserts (and vacuum) serialise on the writers' lock, a heavyweight lock on
 * the meta page, so a plan made from the pages stays valid while it is
 * applied.  Order of the WAL records, each crash-safe on its own:
 *   1. the new node's header, row and vector at its slot: slot n, invisible
 *      as n is not counted yet; or a deleted slot, its header still saying
 *      deleted (searches walk through it, never return it);
 *   2. the meta page (n + 1 or the reuse counted, live + 1, generation + 1)
 *      with the reverse edge of the node's closest neighbour (and a reused
 *      slot's header made live), so a counted node always has a way in;
 *   3. the other reverse edges into existing rows (an edge a reverse edge
 *      replaces was handed to the new node's row in step 1).
 * Scans read the meta page once, so they never follow an edge to a node
 * appended after they started (it reads as padding).  A reused slot can
 * change under a scan that started before: its row is only inserted by a
 * transaction its snapshot cannot see.
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
		CagraPageAccessor acc(index, *meta, true);
		std::vector<uint32_t> entries(meta->entries, meta->entries + meta->entry_count);
		/* live neighbours only: a deleted one's slot may be taken by another
		 * vector later, turning the edge into a random one */
		auto		live = [&acc](uint32_t id) {
			CagraPageAccessor::NodeInfo info;

			return acc.node_info(id, &info) && cagra_node_is_live(info.flags);
		};
		std::unique_ptr<cagra::InsertPlan> p(new cagra::InsertPlan(
			cagra::plan_insert(acc, vec, new_id, cagra_search_params(meta), entries, live, meta->live)));

		/* no live node to link to (all deleted): deleted ones, which searches
		 * walk through, so the node has a way in */
		if (p->row.empty() || p->row[0] == cagra::kInvalidNode)
			p.reset(new cagra::InsertPlan(cagra::plan_insert(acc, vec, new_id, cagra_search_params(meta), entries)));

		std::sort(p->updates.begin(), p->updates.end(),
				  [](const cagra::EdgeUpdate &a, const cagra::EdgeUpdate &b) { return a.node < b.node; });
		plan = p.release();
	});
	return plan;
}

/* The record of a new node: header (with `flags`), row, vector. */
static char *
cagra_make_record(const CagraMetaData *meta, ItemPointer heap_tid, uint16 flags, const uint32 *row,
				  const float *vec)
{
	char	   *rec = (char *) palloc0(meta->record_size);
	CagraNodeHeader hdr;

	hdr.heap_tid = *heap_tid;
	hdr.flags = flags;
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
	bool		reused = new_id < meta->n;

	for (size_t i = 0; i < nupdates; i++)
	{
		const cagra::EdgeUpdate *u = &updates[i];

		if (u->node >= meta->n || u->node == new_id || u->slot >= meta->graph_degree)
			elog(ERROR, "cagra insert plan has an edge update out of range (node %u, slot %u)",
				 u->node, u->slot);
		if (u->node == closest && !first)
			first = u;
	}

	/* the pages of this record: the meta page, the closest neighbour's edge
	 * (one edge lies in one page) and a reused slot's header, locked in
	 * block order (the meta page is block 0) */
	BlockNumber edge_blk = InvalidBlockNumber,
				hdr_blk = InvalidBlockNumber;
	uint32		edge_off = 0,
				hdr_off = 0;

	if (first)
		cagra_locate(meta, first->node, CAGRA_ROW_OFFSET + first->slot * sizeof(uint32), &edge_blk, &edge_off);
	if (reused)
		cagra_locate(meta, new_id, 0, &hdr_blk, &hdr_off);

	Buffer		metabuf = ReadBuffer(index, CAGRA_METAPAGE_BLKNO);
	Buffer		bufs[2] = {InvalidBuffer, InvalidBuffer};
	Page		pages[2] = {NULL, NULL};
	BlockNumber blks[2];
	int			nblks = 0;
	CagraMetaData m;

	if (edge_blk != InvalidBlockNumber)
		blks[nblks++] = edge_blk;
	if (hdr_blk != InvalidBlockNumber && hdr_blk != edge_blk)
		blks[nblks++] = hdr_blk;
	if (nblks == 2 && blks[1] < blks[0])
	{
		BlockNumber t = blks[0];

		blks[0] = blks[1];
		blks[1] = t;
	}
	LockBuffer(metabuf, BUFFER_LOCK_EXCLUSIVE);

	GenericXLogState *state = GenericXLogStart(index);
	Page		metapage = GenericXLogRegisterBuffer(state, metabuf, 0);

	for (int i = 0; i < nblks; i++)
	{
		bufs[i] = ReadBuffer(index, blks[i]);
		LockBuffer(bufs[i], BUFFER_LOCK_EXCLUSIVE);
		pages[i] = GenericXLogRegisterBuffer(state, bufs[i], 0);
	}
	for (int i = 0; i < nblks; i++)
	{
		if (blks[i] == edge_blk)
			memcpy((char *) pages[i] + edge_off, &first->target, sizeof(uint32));
		if (blks[i] == hdr_blk)
		{
			CagraNodeHeader *hdr = (CagraNodeHeader *) ((char *) pages[i] + hdr_off);

			hdr->flags = CAGRA_NODE_LIVE;
		}
	}
	m = *meta;
	if (reused)
	{
		m.reused++;
		m.reuse_log[(m.reused - 1) % CAGRA_REUSE_LOG] = new_id;
	}
	else
		m.n = new_id + 1;
	m.live++;
	m.generation++;

	/* an index that grew by inserts (built empty or small) takes new nodes
	 * as entries until it has as many as a build would pick */
	bool		is_entry = false;

	for (uint32 i = 0; i < m.entry_count && !is_entry; i++)
		is_entry = m.entries[i] == new_id;
	if (!is_entry && m.entry_count < Min(cagra::fixed_entry_count(m.n), (uint32) CAGRA_MAX_ENTRY_NODES))
		m.entries[m.entry_count++] = new_id;
	memcpy(cagra_meta_of(metapage), &m, sizeof(m));
	GenericXLogFinish(state);
	for (int i = 0; i < nblks; i++)
		UnlockReleaseBuffer(bufs[i]);
	UnlockReleaseBuffer(metabuf);

	CagraWalBatch batch;

	cagra_batch_begin(&batch, index, meta);
	for (size_t i = 0; i < nupdates; i++)
		if (&updates[i] != first)
			cagra_batch_write(&batch, updates[i].node, CAGRA_ROW_OFFSET + updates[i].slot * sizeof(uint32),
							  &updates[i].target, sizeof(uint32));
	cagra_batch_finish(&batch);
}

/*
 * A slot vacuum freed, for an insert (kInvalidNode: none, append): the first
 * deleted node from meta->reuse_next on, which moves past it.  Vacuum
 * repaired every live row that pointed at a deleted node, so only entry
 * lists and other deleted rows lead there.  The cursor only moves forward
 * until the next vacuum resets it, so the headers are read once per vacuum.
 */
static uint32
cagra_find_free_slot(Relation index, CagraMetaData *meta)
{
	if (meta->live >= meta->n)
		return cagra::kInvalidNode;
	for (uint32 id = meta->reuse_next; id < meta->n; id++)
	{
		CagraNodeHeader hdr;

		cagra_read_record_bytes(index, meta, id, 0, sizeof(hdr), &hdr);
		if (hdr.flags & CAGRA_NODE_DELETED)
		{
			meta->reuse_next = id + 1;
			return id;
		}
		if ((id & 4095) == 4095)
			CHECK_FOR_INTERRUPTS();
	}
	meta->reuse_next = meta->n;
	return cagra::kInvalidNode;
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
	uint32		new_id = cagra_find_free_slot(index, &meta);

	if (new_id == cagra::kInvalidNode)
		new_id = meta.n;
	if (new_id >= cagra::kInvalidNode - 1)
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

	cagra::InsertPlan *plan = cagra_plan_insert(index, &meta, vec, new_id, &st);

	if (!plan)
		cagra_report_status(&st);
	CagraOwner *owner = cagra_owner_new(cxt, plan, cagra_delete_object<cagra::InsertPlan>);

	if (plan->row.size() != meta.graph_degree)
		elog(ERROR, "cagra insert plan has a row of %zu entries, expected %u",
			 plan->row.size(), meta.graph_degree);

	/* a reused slot's header turns live with the meta page (step 2) */
	char	   *rec = cagra_make_record(&meta, heap_tid, new_id < meta.n ? CAGRA_NODE_DELETED : CAGRA_NODE_LIVE,
									plan->row.data(), vec);
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
