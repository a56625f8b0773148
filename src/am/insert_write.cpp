/*
 * insert_write.cpp — the page writes of an insert and of the linking of a
 * node inserted unlinked (insert_write.h): the record, the way in counted
 * with the node, the reverse edges, each decided again on the row as it is
 * under its page's lock; and the unlinked span of the meta page.  The
 * order and the locks are described in insert.cpp and docs/storage.md.
 */
#include "am/insert_write.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/build.h"

/* The record of a new node with its vector stored, made before the slot
 * lock; its header and row are set under it (cagra_set_record_head). */
char *
cagra_new_record(const CagraMetaData *meta, const float *vec)
{
	char	   *rec = (char *) palloc0(meta->record_size);

	cagra_format_of(meta).store(vec, rec + cagra_vector_offset(meta->graph_degree));
	return rec;
}

static void
cagra_set_record_head(const CagraMetaData *meta, char *rec, ItemPointer heap_tid, uint16 flags, const uint32 *row)
{
	CagraNodeHeader hdr;

	hdr.heap_tid = *heap_tid;
	hdr.flags = flags;
	memcpy(rec, &hdr, sizeof(hdr));
	memcpy(rec + CAGRA_ROW_OFFSET, row, meta->graph_degree * sizeof(uint32));
}

/* Row entry `slot` of node `id`, in the working copy of the page that holds
 * it (an edge never crosses a page); the page must be in `b`. */
static uint32 *
cagra_batch_edge(CagraWalBatch *b, uint32 id, uint32 slot)
{
	BlockNumber blkno;
	uint32		poff;

	cagra_locate(b->meta, id, CAGRA_ROW_OFFSET + slot * sizeof(uint32), &blkno, &poff);
	return (uint32 *) ((char *) cagra_batch_page(b, blkno) + poff);
}

/* Lock (exclusively) and register every page of node `id`'s row in `b`,
 * first closing the record when they would not all fit in it, so the row
 * can be read and changed as one. */
static void
cagra_batch_lock_row(CagraWalBatch *b, uint32 id)
{
	uint32		row_bytes = b->meta->graph_degree * sizeof(uint32);
	BlockNumber first,
				last;
	uint32		poff;

	cagra_batch_reserve(b, id, CAGRA_ROW_OFFSET, row_bytes);
	cagra_locate(b->meta, id, CAGRA_ROW_OFFSET, &first, &poff);
	cagra_locate(b->meta, id, CAGRA_ROW_OFFSET + row_bytes - 1, &last, &poff);
	for (BlockNumber blk = first; blk <= last; blk++)
		cagra_batch_page(b, blk);
}

/*
 * Where reverse edge `u` goes in its row as the row is now (locked), or
 * kInvalidNode: nowhere.  Its planned slot while that still holds what the
 * plan saw there; else, if the plan wanted padding, the first padding slot
 * left.  Never an edge the row already has, and never in place of an edge
 * another insert wrote since (it may be that node's way in).
 */
static uint32
cagra_edge_slot(CagraWalBatch *b, const cagra::EdgeUpdate *u)
{
	uint32		degree = b->meta->graph_degree;
	uint32		padding = cagra::kInvalidNode;

	for (uint32 s = 0; s < degree; s++)
	{
		uint32		e = *cagra_batch_edge(b, u->node, s);

		if (e == u->target)
			return cagra::kInvalidNode;
		if (e == cagra::kInvalidNode && padding == cagra::kInvalidNode)
			padding = s;
	}
	if (*cagra_batch_edge(b, u->node, u->slot) == u->previous)
		return u->slot;
	return u->previous == cagra::kInvalidNode ? padding : cagra::kInvalidNode;
}

/* An index that grew by inserts (built empty or small) takes linked nodes
 * as entries until it has as many as a build would pick; never an unlinked
 * one, whose row would be another linking's to rewrite. */
static void
cagra_meta_take_entry(CagraMetaData *m, uint32 id)
{
	bool		is_entry = false;

	for (uint32 i = 0; i < m->entry_count && !is_entry; i++)
		is_entry = m->entries[i] == id;
	if (!is_entry && m->entry_count < Min(cagra::fixed_entry_count(m->n), (uint32) CAGRA_MAX_ENTRY_NODES))
		m->entries[m->entry_count++] = id;
}

/* Node `new_id` counted in meta page contents `m`: appended (n + 1, in the
 * unlinked span when it is `unlinked` or the span has nodes) or a reused
 * slot logged, live + 1, generation + 1. */
static void
cagra_meta_count_node(CagraMetaData *m, uint32 new_id, bool unlinked)
{
	if (new_id < m->n)
	{
		m->reused++;
		m->reuse_log[(m->reused - 1) % CAGRA_REUSE_LOG] = new_id;
	}
	else
	{
		m->n = new_id + 1;
		if (unlinked || m->unlinked > 0)
			m->unlinked++;
	}
	m->live++;
	m->generation++;
	if (!unlinked)
		cagra_meta_take_entry(m, new_id);
}

/*
 * Step 2: count node `new_id` in the meta page (`metabuf`, locked
 * exclusively: the slot lock; `meta` is what it holds) together with its
 * way in, the reverse edge of its closest neighbour (`closest`; NULL when
 * the index has no other node), in one WAL record; `unlinked`: counted
 * with no way in, its linking deferred.  With no `metabuf`, node `new_id`
 * is counted already, unlinked: its way in is written and its header made
 * live (linked).  The edge is decided
 * again on the row as it is now: where another insert took the planned
 * slot since, the edge replaces one the new node's row also holds
 * (b -> new -> x keeps x's way in).  When there is none, nothing is written
 * and false returned, the meta page still locked, with *taken set to what
 * the slot holds now: the caller hands that node to the new row and tries
 * again.  On success the meta page is unlocked and released.
 */
static bool
cagra_publish_node(Relation index, Buffer metabuf, const CagraMetaData *meta, uint32 new_id,
				   const uint32 *new_row, const cagra::EdgeUpdate *closest, bool unlinked, uint32 *taken)
{
	bool		counts = BufferIsValid(metabuf);
	CagraWalBatch batch;
	CagraMetaData m;

	/* the meta page first (block 0), then the node pages in block order */
	cagra_batch_begin(&batch, index, meta);
	batch.state = GenericXLogStart(index);
	if (counts)
	{
		batch.bufs[0] = metabuf;
		batch.pages[0] = GenericXLogRegisterBuffer(batch.state, metabuf, 0);
		batch.nbufs = 1;
	}

	/* a reused slot's header, and a linked node's, turn live */
	BlockNumber hdr_blk = new_id < meta->n ? cagra_header_block(meta, new_id) : InvalidBlockNumber;

	if (closest)
	{
		BlockNumber row_blk = cagra_header_block(meta, closest->node);

		if (hdr_blk != InvalidBlockNumber && hdr_blk < row_blk)
			cagra_batch_page(&batch, hdr_blk);
		cagra_batch_lock_row(&batch, closest->node);

		uint32		slot = cagra_edge_slot(&batch, closest);
		bool		has_edge = false;

		for (uint32 s = 0; s < meta->graph_degree && !has_edge; s++)
			has_edge = *cagra_batch_edge(&batch, closest->node, s) == new_id;
		/* else an edge the new row holds too */
		for (uint32 s = 0; s < meta->graph_degree && slot == cagra::kInvalidNode && !has_edge; s++)
		{
			uint32		e = *cagra_batch_edge(&batch, closest->node, s);

			for (uint32 t = 0; t < meta->graph_degree; t++)
				if (new_row[t] == e)
					slot = s;
		}
		if (slot == cagra::kInvalidNode && !has_edge)
		{
			*taken = *cagra_batch_edge(&batch, closest->node, closest->slot);
			GenericXLogAbort(batch.state);
			for (int i = counts ? 1 : 0; i < batch.nbufs; i++)
				UnlockReleaseBuffer(batch.bufs[i]);
			return false;
		}
		if (slot != cagra::kInvalidNode)
			*cagra_batch_edge(&batch, closest->node, slot) = new_id;
	}
	if (hdr_blk != InvalidBlockNumber)
	{
		BlockNumber blkno;
		uint32		poff;

		cagra_locate(meta, new_id, 0, &blkno, &poff);
		((CagraNodeHeader *) ((char *) cagra_batch_page(&batch, blkno) + poff))->flags = CAGRA_NODE_LIVE;
	}

	if (counts)
	{
		m = *meta;
		cagra_meta_count_node(&m, new_id, unlinked);
		cagra_meta_into_page(batch.pages[0], &m);
	}
	cagra_batch_finish(&batch);
	return true;
}

/*
 * Step 3: the other reverse edges, each decided again on its row as it is
 * now (cagra_edge_slot), rows in node order, up to MAX_GENERIC_XLOG_PAGES
 * pages a record.
 */
void
cagra_link_reverse_edges(Relation index, const CagraMetaData *meta, const cagra::EdgeUpdate *updates,
						 size_t nupdates)
{
	CagraWalBatch batch;

	cagra_batch_begin(&batch, index, meta);
	for (size_t i = 0; i < nupdates; i++)
	{
		const cagra::EdgeUpdate *u = &updates[i];

		cagra_batch_lock_row(&batch, u->node);

		uint32		slot = cagra_edge_slot(&batch, u);

		if (slot != cagra::kInvalidNode)
			*cagra_batch_edge(&batch, u->node, slot) = u->target;
	}
	cagra_batch_finish(&batch);
}

/* Step 2's fallback: node `w` handed to the new row (uncounted, so nobody
 * else reads it yet), in place of `replaced` when the row holds it, else of
 * padding, else of its last edge.  Returns the edge it replaced. */
static uint32
cagra_hand_off(Relation index, const CagraMetaData *meta, uint32 new_id, std::vector<uint32_t> &row,
			   uint32 replaced, uint32 w)
{
	auto		at = std::find(row.begin(), row.end(), replaced);

	if (replaced == cagra::kInvalidNode || at == row.end())
		at = std::find(row.begin(), row.end(), cagra::kInvalidNode);
	if (at == row.end())
		at = row.end() - 1;

	uint32		dropped = *at;

	*at = w;

	CagraWalBatch batch;

	cagra_batch_begin(&batch, index, meta);
	cagra_batch_write(&batch, new_id, CAGRA_ROW_OFFSET, row.data(), meta->graph_degree * sizeof(uint32));
	cagra_batch_finish(&batch);
	return dropped;
}

/* Step 1: the new node's record `rec` written into slot `new_id`, its
 * header, row and vector, in one WAL record; `flags`: its header's when
 * appended. */
void
cagra_write_record(Relation index, const CagraMetaData *meta, uint32 new_id, char *rec, ItemPointer heap_tid,
				   const uint32 *row, uint16 flags)
{
	/* a reused slot's header turns live with the meta page (step 2) */
	cagra_set_record_head(meta, rec, heap_tid, new_id < meta->n ? CAGRA_NODE_DELETED : flags, row);
	CagraWalBatch batch;

	/* the header and row, and the vector, lie apart in the node's group
	 * (the vector may even come first, in the tail of an earlier row page):
	 * written in block order */
	uint32		voff = cagra_vector_offset(meta->graph_degree);
	BlockNumber row_blk,
				vec_blk;
	uint32		poff;

	cagra_locate(meta, new_id, 0, &row_blk, &poff);
	cagra_locate(meta, new_id, voff, &vec_blk, &poff);
	cagra_batch_begin(&batch, index, meta);
	if (vec_blk < row_blk)
		cagra_batch_write(&batch, new_id, voff, rec + voff, meta->record_size - voff);
	cagra_batch_write(&batch, new_id, 0, rec, vec_blk < row_blk ? voff : meta->record_size);
	cagra_batch_finish(&batch);
}

/*
 * Step 2 until it succeeds: node `new_id` counted with the closest
 * neighbour's reverse edge (the plan's first), each node that edge could
 * not go in place of handed to the new row.  Releases the slot lock
 * (`metabuf`; InvalidBuffer: the node is counted, unlinked, and is linked
 * here), and leaves in the plan the reverse edges step 3 links.
 */
void
cagra_publish_with_way_in(Relation index, Buffer metabuf, const CagraMetaData *meta, uint32 new_id,
						  cagra::InsertPlan *plan)
{
	cagra::EdgeUpdate *closest = NULL;

	for (cagra::EdgeUpdate &u : plan->updates)
		if (u.node == plan->row[0] && !closest)
			closest = &u;

	uint32		taken;
	std::vector<uint32_t> dropped;

	while (!cagra_publish_node(index, metabuf, meta, new_id, plan->row.data(), closest, false, &taken))
	{
		dropped.push_back(cagra_hand_off(index, meta, new_id, plan->row, closest->previous, taken));
		closest->previous = taken;
	}

	if (closest)
		plan->updates.erase(plan->updates.begin() + (closest - plan->updates.data()));
	/* a reverse edge replaces an edge only while the new row holds it */
	plan->updates.erase(std::remove_if(plan->updates.begin(), plan->updates.end(),
									   [&](const cagra::EdgeUpdate &u) {
										   return std::find(dropped.begin(), dropped.end(), u.previous) !=
											   dropped.end();
									   }),
						plan->updates.end());
}

/*
 * The unlinked span of the meta page shortened past its nodes linked (or
 * deleted) since, so searches stop taking them as entries and copies for
 * the worker take them as linked.  Under the slot lock, reading headers.
 */
void
cagra_shorten_unlinked(Relation index)
{
	Buffer		metabuf = ReadBuffer(index, CAGRA_METAPAGE_BLKNO);
	CagraMetaData meta;
	uint32		unlinked;

	LockBuffer(metabuf, BUFFER_LOCK_EXCLUSIVE);
	memcpy(&meta, cagra_meta_of(BufferGetPage(metabuf)), sizeof(meta));
	cagra_check_meta(index, &meta);
	unlinked = meta.unlinked;
	while (unlinked > 0)
	{
		CagraNodeHeader hdr;

		cagra_read_record_bytes(index, &meta, meta.n - unlinked, 0, sizeof(hdr), &hdr);
		if ((hdr.flags & CAGRA_NODE_UNLINKED) && !(hdr.flags & CAGRA_NODE_DELETED))
			break;
		if (cagra_node_is_live(hdr.flags))
			cagra_meta_take_entry(&meta, meta.n - unlinked);
		unlinked--;
	}
	if (unlinked != meta.unlinked)
	{
		meta.unlinked = unlinked;
		cagra_write_meta(index, metabuf, &meta);
	}
	UnlockReleaseBuffer(metabuf);
}

void
cagra_count_unlinked_node(Relation index, Buffer metabuf, const CagraMetaData *meta, uint32 new_id)
{
	uint32		taken;
	std::vector<uint32_t> no_row(meta->graph_degree, cagra::kInvalidNode);

	(void) cagra_publish_node(index, metabuf, meta, new_id, no_row.data(), NULL, true, &taken);
}
