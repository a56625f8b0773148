/*
 * vacuum.cpp — ambulkdelete and amvacuumcleanup.
 *
 * Bulk delete, under the writers' lock in ExclusiveLock (it waits for the
 * inserts in flight, and keeps new ones out: insert.cpp): (1) mark every
 * live node whose heap TID the callback reports dead as deleted, each
 * page's marks and the meta page's live count in one WAL record; (2) if the
 * index has deleted nodes, rewrite the rows that point at them (core
 * plan_repair, a range of rows at a time within maintenance_work_mem), and
 * link the live nodes that lost their nearby or only ways in (core
 * plan_near_ways_in, plan_reconnect); (3) bump
 * the generation in the meta page, before returning, so that no cached copy
 * can hand out a TID the heap is about to release, and point inserts back
 * at the first deleted slot for inserts to reuse (insert.cpp).
 *
 * A slot becomes reusable only after its repair is durable: phase 1's
 * first marks move the reuse cursor past every slot, in the same WAL
 * record, and only phase 3, logged after every rewrite of phase 2, moves it
 * back.  A crash or an error in between leaves marked, unrepaired slots
 * that no insert takes (inserts append) until a vacuum completes; else the
 * slot's next occupant would inherit edges that meant the deleted row, and
 * nothing on the pages could tell them from good ones (docs/storage.md).
 * The same first record sets the meta page's vacuum_unfinished, which only
 * phase 3 clears: the next vacuum then completes the repair even when it
 * deletes nothing (amvacuumcleanup).
 */
#include "am/accessor.h"

#include <cstring>

#include "core/update.h"

extern "C" {
#include "commands/vacuum.h"
#include "miscadmin.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"
}

/*
 * Phase 1.  Fills removed[id] for every deleted node (old and new) and
 * returns how many nodes this pass deleted (none without a callback); *live
 * gets the live count.
 */
static uint32
cagra_mark_deleted(Relation index, const CagraMetaData *meta, IndexBulkDeleteCallback callback,
				   void *callback_state, bool *removed, uint32 *live)
{
	uint32		newly = 0;

	*live = 0;
	/* the headers of consecutive nodes on one page, page by page */
	for (uint32 first = 0, last; first < meta->n; first = last)
	{
		BlockNumber blkno = cagra_header_block(meta, first);

		last = cagra_header_run_end(meta, first);

		Buffer		buf;
		Page		page;
		uint32		dead[BLCKSZ / sizeof(CagraNodeHeader)];
		int			ndead = 0;

		vacuum_delay_point();
		buf = ReadBuffer(index, blkno);
		LockBuffer(buf, BUFFER_LOCK_EXCLUSIVE);
		page = BufferGetPage(buf);
		for (uint32 id = first; id < last; id++)
		{
			BlockNumber b;
			uint32		off;

			cagra_locate(meta, id, 0, &b, &off);
			CagraNodeHeader *hdr = (CagraNodeHeader *) ((char *) page + off);

			if (hdr->flags & CAGRA_NODE_DELETED)
				removed[id] = true;
			else if (callback && callback(&hdr->heap_tid, callback_state))
			{
				removed[id] = true;
				dead[ndead++] = off;
			}
			else
				(*live)++;
		}
		if (ndead > 0)
		{
			/* the flags and the meta page's live count change in one WAL
			 * record, so a crash mid-pass leaves them consistent (scans
			 * lock the meta page holding no other page: no deadlock) */
			Buffer		metabuf = ReadBuffer(index, CAGRA_METAPAGE_BLKNO);

			LockBuffer(metabuf, BUFFER_LOCK_EXCLUSIVE);

			GenericXLogState *state = GenericXLogStart(index);
			Page		copy = GenericXLogRegisterBuffer(state, buf, 0);
			CagraMetaData *m = cagra_meta_of(GenericXLogRegisterBuffer(state, metabuf, 0));

			for (int i = 0; i < ndead; i++)
			{
				CagraNodeHeader *hdr = (CagraNodeHeader *) ((char *) copy + dead[i]);

				hdr->flags = (hdr->flags & ~CAGRA_NODE_LIVE) | CAGRA_NODE_DELETED;
			}
			m->live -= Min(m->live, (uint32) ndead);
			/* no deleted slot is reusable until phase 3, and until then the
			 * next vacuum repairs again (see the header) */
			m->reuse_next = m->n;
			m->vacuum_unfinished = 1;
			GenericXLogFinish(state);
			UnlockReleaseBuffer(metabuf);
			newly += ndead;
		}
		UnlockReleaseBuffer(buf);
	}
	return newly;
}

/* An error where cagra.vacuum_stop_before says, for tests. */
static void
cagra_vacuum_stop_point(Relation index, CagraVacuumStop here)
{
	if (cagra_vacuum_stop_before == here)
		ereport(ERROR,
				(errcode(ERRCODE_QUERY_CANCELED),
				 errmsg("VACUUM of cagra index \"%s\" stopped before its %s (cagra.vacuum_stop_before)",
						RelationGetRelationName(index), here == CAGRA_VACUUM_STOP_REPAIR ? "repair" : "reconnect")));
}

static void
cagra_apply_repair(Relation index, const CagraMetaData *meta, const cagra::RowRewrite *rewrites, size_t count)
{
	CagraWalBatch batch;

	cagra_batch_begin(&batch, index, meta);
	for (size_t i = 0; i < count; i++)
	{
		const cagra::RowRewrite *rw = &rewrites[i];

		if (rw->node >= meta->n || rw->row.size() != meta->graph_degree)
			elog(ERROR, "cagra repair plan for node %u is malformed", rw->node);
		cagra_batch_write(&batch, rw->node, CAGRA_ROW_OFFSET, rw->row.data(),
						  meta->graph_degree * sizeof(uint32));
		if ((i & 255) == 255)
		{
			cagra_batch_finish(&batch);
			vacuum_delay_point();
		}
	}
	cagra_batch_finish(&batch);
}

/*
 * Phase 2, the C++ part: the row rewrites that plan(graph, is_removed,
 * params, entries) makes over the index's pages (core plan_repair,
 * plan_near_ways_in or plan_reconnect), in a C++ object the caller owns.
 */
template <class Plan>
static std::vector<cagra::RowRewrite> *
cagra_plan_rows(Relation index, const CagraMetaData *meta, const bool *removed, Plan &plan,
				CagraStatus *st) noexcept
{
	std::vector<cagra::RowRewrite> *out = nullptr;

	cagra_guard(st, [&] {
		CagraPageAccessor acc(index, *meta, false);
		std::vector<uint32_t> entries(meta->entries, meta->entries + meta->entry_count);
		auto		is_removed = [removed](uint32_t id) { return removed[id]; };

		out = cagra_with_graph_accessor(acc, meta, [&](const auto &graph) {
			return new std::vector<cagra::RowRewrite>(plan(graph, is_removed, cagra_search_params(meta), entries));
		});
	});
	return out;
}

/* The rewrites plan makes (cagra_plan_rows), written to the pages; how
 * many rows they rewrote. */
template <class Plan>
static size_t
cagra_rewrite_rows(Relation index, const CagraMetaData *meta, const bool *removed, Plan &&plan)
{
	CagraStatus st;
	std::vector<cagra::RowRewrite> *rewrites = cagra_plan_rows(index, meta, removed, plan, &st);

	if (!rewrites)
		cagra_report_status(&st);

	CagraOwner *owner = cagra_owner_new(CurrentMemoryContext, rewrites,
										cagra_delete_object<std::vector<cagra::RowRewrite>>);
	size_t		count = rewrites->size();

	cagra_apply_repair(index, meta, rewrites->data(), count);
	cagra_owner_free(owner);
	return count;
}


/*
 * Phase 2: the rows are planned and rewritten a range of nodes at a time,
 * so the plan's memory (each row's kept edges and candidates, and its
 * rewrite) stays within maintenance_work_mem.
 */
static void
cagra_repair(Relation index, const CagraMetaData *meta, const bool *removed)
{
	/* a row's kept edges and rewrite, and about four removed neighbours'
	 * candidates with their distances */
	Size		row_bytes = (Size) meta->graph_degree * (2 * sizeof(uint32) + 4 * (sizeof(uint32) + sizeof(float))) + 64;
	Size		range = Max((Size) 1024, (Size) maintenance_work_mem * 1024 / row_bytes);

	for (uint32 first = 0, last; first < meta->n; first = last)
	{
		last = (uint32) Min((Size) meta->n, first + range);
		cagra_rewrite_rows(index, meta, removed,
						   [first, last](const auto &graph, const auto &is_removed, const cagra::SearchParams &params,
										 const std::vector<uint32_t> &entries) {
							   return cagra::plan_repair(graph, is_removed, params, entries, first, last);
						   });
		vacuum_delay_point();
	}
	cagra_vacuum_stop_point(index, CAGRA_VACUUM_STOP_RECONNECT);

	/*
	 * A live node whose only nearby way in was a removed node's row is left
	 * entered from far away (or not at all): the rows that led to the
	 * removed node took their own closest live nodes.  First a nearby way in
	 * back to each live target of a removed node that lacks one, then links
	 * to the nodes still unreachable.
	 */
	TimestampTz start = GetCurrentTimestamp();
	size_t		near = cagra_rewrite_rows(index, meta, removed,
										  [](const auto &graph, const auto &is_removed, const cagra::SearchParams &,
											 const std::vector<uint32_t> &) {
											  return cagra::plan_near_ways_in(graph, is_removed);
										  });
	size_t		links = cagra_rewrite_rows(index, meta, removed,
										   [](const auto &graph, const auto &is_removed,
											  const cagra::SearchParams &params, const std::vector<uint32_t> &entries) {
											   return cagra::plan_reconnect(graph, is_removed, params, entries);
										   });

	elog(DEBUG1, "cagra vacuum of \"%s\": %zu nearby ways in, reconnect %zu links, %.2f s",
		 RelationGetRelationName(index), near, links,
		 TimestampDifferenceMilliseconds(start, GetCurrentTimestamp()) / 1000.0);
}

/* Phase 3: the live count, a new generation, the reuse cursor at the
 * first deleted slot (they are repaired: inserts may take them), so that
 * inserts do not read the headers of the live nodes before it, and the
 * vacuum finished. */
static void
cagra_finish_vacuum(Relation index, uint32 live, uint32 first_deleted)
{
	Buffer		metabuf = ReadBuffer(index, CAGRA_METAPAGE_BLKNO);
	CagraMetaData m;

	LockBuffer(metabuf, BUFFER_LOCK_EXCLUSIVE);
	memcpy(&m, cagra_meta_of(BufferGetPage(metabuf)), sizeof(m));
	m.live = live;
	m.generation++;
	m.reuse_next = first_deleted;
	m.vacuum_unfinished = 0;
	cagra_write_meta(index, metabuf, &m);
	UnlockReleaseBuffer(metabuf);
}

/*
 * The three phases, with the callback of a bulk delete or, to finish what an
 * interrupted vacuum began, none: then only the nodes already deleted are
 * repaired around.
 */
static void
cagra_vacuum_index(Relation index, IndexBulkDeleteCallback callback, void *callback_state,
				   IndexBulkDeleteResult *stats)
{
	CagraMetaData meta;

	cagra_lock_writers(index, ExclusiveLock);
	cagra_link_unlinked(index);
	cagra_read_meta(index, &meta);

	uint32		live = 0;
	uint32		first_deleted = meta.n;

	if (meta.n > 0)
	{
		MemoryContext cxt = AllocSetContextCreate(CurrentMemoryContext, "cagra vacuum",
												  ALLOCSET_DEFAULT_SIZES);
		MemoryContext old = MemoryContextSwitchTo(cxt);
		bool	   *removed = (bool *) MemoryContextAllocExtended(cxt, meta.n, MCXT_ALLOC_HUGE | MCXT_ALLOC_ZERO);
		TimestampTz start = GetCurrentTimestamp();
		uint32		newly = cagra_mark_deleted(index, &meta, callback, callback_state, removed, &live);
		TimestampTz marked = GetCurrentTimestamp();

		stats->tuples_removed += newly;
		cagra_vacuum_stop_point(index, CAGRA_VACUUM_STOP_REPAIR);
		if (live < meta.n)
			cagra_repair(index, &meta, removed);
		elog(DEBUG1, "cagra vacuum of \"%s\": %u nodes deleted; seconds: marks %.2f, repair and links %.2f",
			 RelationGetRelationName(index), newly, TimestampDifferenceMilliseconds(start, marked) / 1000.0,
			 TimestampDifferenceMilliseconds(marked, GetCurrentTimestamp()) / 1000.0);
		/* the lowest deleted id (removed[] marks old and new ones) */
		first_deleted = 0;
		while (first_deleted < meta.n && !removed[first_deleted])
			first_deleted++;
		MemoryContextSwitchTo(old);
		MemoryContextDelete(cxt);
	}
	cagra_finish_vacuum(index, live, first_deleted);
	cagra_unlock_writers(index, ExclusiveLock);

	stats->num_index_tuples = live;
	stats->num_pages = RelationGetNumberOfBlocks(index);
}

IndexBulkDeleteResult *
cagra_bulkdelete(IndexVacuumInfo *info, IndexBulkDeleteResult *stats,
				 IndexBulkDeleteCallback callback, void *callback_state)
{
	if (stats == NULL)
		stats = (IndexBulkDeleteResult *) palloc0(sizeof(IndexBulkDeleteResult));
	cagra_vacuum_index(info->index, callback, callback_state, stats);
	return stats;
}

/*
 * A vacuum that deletes nothing calls only this.  If the last one that did
 * stopped (a crash, an error, a cancel) before its repair and links were
 * done, some live node may hang only on a deleted node's row, which an
 * insert overwrites once a vacuum frees the slot: finish them here.
 */
IndexBulkDeleteResult *
cagra_vacuumcleanup(IndexVacuumInfo *info, IndexBulkDeleteResult *stats)
{
	CagraMetaData meta;

	if (info->analyze_only)
		return stats;
	if (stats == NULL)
		stats = (IndexBulkDeleteResult *) palloc0(sizeof(IndexBulkDeleteResult));
	cagra_read_meta(info->index, &meta);
	if (meta.vacuum_unfinished)
	{
		ereport(LOG,
				(errmsg("cagra index \"%s\": finishing the repair an interrupted VACUUM left",
						RelationGetRelationName(info->index))));
		cagra_vacuum_index(info->index, NULL, NULL, stats);
		cagra_read_meta(info->index, &meta);
	}
	stats->num_index_tuples = meta.live;
	stats->num_pages = RelationGetNumberOfBlocks(info->index);
	stats->estimated_count = false;
	return stats;
}
