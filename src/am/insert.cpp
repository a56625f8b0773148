/*
 * insert.cpp — aminsert: add one node to the graph, in a slot vacuum freed
 * when there is one, else appended.
 *
 * Inserts run side by side.  Each holds the writers' lock (a heavyweight
 * lock on the meta page) in RowExclusiveLock, which inserts share and
 * vacuum's ExclusiveLock does not: vacuum waits for the inserts in flight,
 * so no insert links to a node vacuum deleted and repaired around, or
 * takes a slot whose old edges are not repaired yet.  The plan (the
 * neighbour search, the pruned row and the reverse edges) is made for a
 * slot past the nodes counted when it started: with cagra.device = gpu by
 * the GPU worker from its copy of the index, as a scan's search request
 * that also asks for the plan (the worker batches the inserts its copy
 * serves; where a node appended after the copy ranks among the new node's
 * nearest, the plan is made here from the merged candidates), else here
 * as a scan searches: from the entry vectors and
 * entry index the backend keeps for its scans, one share-locked page at a
 * time, the pages kept pinned until the plan is made (a small index, whose
 * rows still have padding, plans again if another insert came between).  Then, under the slot lock, the meta page's buffer lock held
 * exclusively (one insert at a time, two WAL records, no search; a
 * lightweight lock, which a waiter takes only once it runs), each WAL
 * record crash-safe on its own:
 *   1. the slot is taken (a deleted one from reuse_next on, else n) and
 *      the new node's header, row and vector written there: slot n,
 *      invisible as n is not counted yet; or a deleted slot, its header
 *      still saying deleted (searches walk through it, never return it);
 *   2. the meta page (n + 1 or the reuse counted, live + 1, generation + 1)
 *      with the reverse edge of the node's closest neighbour (and a reused
 *      slot's header made live), so a counted node always has a way in.
 * And after it:
 *   3. the other reverse edges into existing rows (an edge a reverse edge
 *      replaces was handed to the new node's row in step 1).
 * Another insert may have changed a neighbour's row since the search read
 * it: each reverse edge is decided again under the row's exclusive page
 * lock (cagra_edge_slot), and goes only where the slot still holds what
 * the plan saw or into padding, never in place of an edge written since
 * (that node's way in).  The closest neighbour's edge must go somewhere: in
 * place of an edge the new row also holds, else the node the slot holds
 * now is handed to the new row and step 2 tried again.
 * Scans read the meta page once, so they never follow an edge to a node
 * appended after they started (it reads as padding).  A reused slot can
 * change under a scan that started before: its row is only inserted by a
 * transaction its snapshot cannot see.
 */
#include "am/accessor.h"
#include "am/worker_copy.h"

#include <memory>

#include <algorithm>
#include <cstring>

#include "core/build.h"
#include "core/inner_product_graph.h"
#include "core/update.h"
#include "type/vector.h"

extern "C" {
#include "miscadmin.h"
#include "storage/lmgr.h"
#include "utils/memutils.h"
}

/* Updates in node order: step 3 locks their rows' pages in that order. */
static void
cagra_sort_updates(cagra::InsertPlan *plan)
{
	std::sort(plan->updates.begin(), plan->updates.end(),
			  [](const cagra::EdgeUpdate &a, const cagra::EdgeUpdate &b) { return a.node < b.node; });
}

/*
 * The core's plan for node `new_id` over the pages, in a C++ object the
 * caller owns: from the `ncands` candidates given (closest first), or else
 * from a search of the pages.
 */
static cagra::InsertPlan *
cagra_plan_insert(Relation index, const CagraMetaData *meta, const float *vec, uint32 new_id,
				  const uint32 *cand_ids, const float *cand_dists, uint32 ncands, CagraStatus *st) noexcept
{
	cagra::InsertPlan *plan = nullptr;

	cagra_guard(st, [&] {
		/* pages stay pinned while the plan is made (the search, the pruning
		 * and the reverse edges read the same rows again), and the entry
		 * nodes come from the scans' cache of their vectors and entry index */
		CagraPageAccessor acc(index, *meta, true, true);
		std::unique_ptr<cagra::InsertPlan> p;

		if (ncands > 0)
		{
			std::vector<cagra::Neighbor> cands(ncands);

			for (uint32 i = 0; i < ncands; i++)
				cands[i] = {cand_ids[i], cand_dists[i]};
			p.reset(new cagra::InsertPlan(cagra::plan_insert_from(acc, vec, new_id, cands)));
			acc.release_pins();
			cagra_sort_updates(p.get());
			plan = p.release();
			return;
		}

		std::vector<uint32_t> entries(meta->entries, meta->entries + meta->entry_count);
		/* live neighbours only: a deleted one's slot may be taken by
		 * another vector later, turning the edge into a random one; and
		 * linked ones: an unlinked node's row is rewritten when it is */
		auto		live = [&acc](uint32_t id) {
			CagraPageAccessor::NodeInfo info;

			return acc.node_info(id, &info) && cagra_node_is_live(info.flags) &&
				!(info.flags & CAGRA_NODE_UNLINKED);
		};
		auto		plan_in = [&](const auto &graph, const float *query, const auto &starts) {
			std::unique_ptr<cagra::InsertPlan> q(new cagra::InsertPlan(
				cagra::plan_insert(graph, query, new_id, cagra_search_params(meta), starts, live, meta->live)));

			/* no live node to link to (all deleted): deleted ones, which
			 * searches walk through, so the node has a way in */
			if (q->row.empty() || q->row[0] == cagra::kInvalidNode)
				q.reset(new cagra::InsertPlan(
					cagra::plan_insert(graph, query, new_id, cagra_search_params(meta), entries)));
			return q;
		};

		/* an inner-product graph takes edges by L2 over augmented
		 * vectors, where the entry index (grouped by the index's own
		 * metric) does not apply: it starts from every entry */
		p = cagra_with_graph_accessor(acc, meta, vec, [&](const auto &graph, const float *query) {
			/* the reverse edges measure again from the new node many of
			 * the nodes the search measured (this is the pointer the
			 * graph passes the page accessor) */
			acc.remember_distances(query);
			if (!cagra::graph_is_augmented((cagra::Metric) meta->metric) && acc.entry_index())
				return plan_in(graph, query, *acc.entry_index());
			return plan_in(graph, query, entries);
		});
		acc.release_pins();
		cagra_sort_updates(p.get());
		plan = p.release();
	});
	return plan;
}

/* Candidates an insert's search asks for. */
static uint32
cagra_insert_candidates(const CagraMetaData *meta)
{
	return cagra::insert_candidate_count(meta->graph_degree, cagra_search_params(meta), meta->live);
}

/* The plan in a worker's answer (protocol.h, cagra_insert_plan_words) for
 * node `new_id` of an index of `meta`, or NULL when it is not one for it:
 * a node out of range, or a row shorter than the live nodes allow. */
static cagra::InsertPlan *
cagra_plan_of_words(const CagraMetaData *meta, const uint32 *words, uint32 new_id)
{
	const uint32 degree = meta->graph_degree;
	CagraInsertPlanParts p = cagra_insert_plan_parts(words, degree);
	std::unique_ptr<cagra::InsertPlan> plan(new cagra::InsertPlan());
	uint32		filled = 0;

	if (*p.count > degree)
		return NULL;
	for (uint32 j = 0; j < degree; j++)
	{
		if (p.row[j] != cagra::kInvalidNode && p.row[j] >= meta->n)
			return NULL;
		filled += p.row[j] != cagra::kInvalidNode;
	}
	if (filled < Min(meta->live, degree))
		return NULL;
	plan->row.assign(p.row, p.row + degree);
	for (uint32 u = 0; u < *p.count; u++)
	{
		if (p.nodes[u] >= meta->n || p.slots[u] >= degree)
			return NULL;
		plan->updates.push_back({p.nodes[u], p.slots[u], new_id, p.previous[u]});
	}
	cagra_sort_updates(plan.get());
	return plan.release();
}

/*
 * Plans for the `nq` vectors `vecs` (prepared) of nodes to be linked into
 * the graph `meta` counts, made by the GPU worker: it searches its copy of
 * the index, batching these searches with other inserts' and queries, and
 * plans each there from the copy's rows and the device's distances, so
 * that the backend only links.  A plan is made for a node past meta->n
 * (plans[i], a C++ object the caller owns).  The nodes the copy lacks
 * (inserted after it was made, or unlinked in it) are merged into the
 * worker's candidates exactly, except those skip() names (the node itself,
 * nodes not linked yet); where one of them ranks among a row's first
 * degree candidates (a stream of rows each near the last), plans[i] is
 * NULL and the merged candidates are left in ids/dists (want a query;
 * ncands[i] of them, 0: none usable), for the backend to plan from.
 * False when the backend plans every one from a search of the pages: no
 * worker (or cagra.device = cpu), a fallback (counted, or a NOTICE, as a
 * scan's), a search wider than the worker's, or a copy newer than `meta`.
 */
template <class Skip>
static bool
cagra_plans_from_worker(Relation index, const CagraMetaData *meta, const float *vecs, uint32 nq,
						cagra::InsertPlan **plans, uint32 *ids, float *dists, uint32 *ncands, Skip skip)
{
	cagra::SearchParams params = cagra_search_params(meta);
	uint32		want = cagra_insert_candidates(meta);
	uint32		degree = Min(meta->graph_degree, want);
	CagraSearchRequest req;
	CagraCopyExtent copy;
	char		why[256];

	req.params = cagra::candidate_search_params(params, want);
	req.k = want;
	req.filtered = false;
	req.plans_inserts = true;
	/* with auto the backend plans: as fast at 16 sessions, and with no
	 * round trip to wait on (docs/benchmarks.md, "Inserts planned by the
	 * worker, H100") */
	if (cagra_device != CAGRA_SEARCH_GPU || want == 0 || req.params.itopk_size > CAGRA_WORKER_MAX_K ||
		cagra::graph_is_augmented((cagra::Metric) meta->metric) || !cagra_client_wants_worker("insert"))
		return false;

	uint32		plan_words = cagra_insert_plan_words(meta->graph_degree);
	uint32	   *words = (uint32 *) palloc(sizeof(uint32) * plan_words * nq);
	uint32	   *copy_ids = (uint32 *) palloc(sizeof(uint32) * want);
	CagraOffload r = cagra_search_through_worker(index, meta, &req, nq, vecs, NULL, ids, dists, NULL, words,
												 &copy, why, sizeof(why));

	if (r != CAGRA_OFFLOAD_OK)
	{
		cagra_client_search_fallback(r, why);
		return false;
	}
	if (copy.n > meta->n)
		return false;
	for (uint32 q = 0; q < nq; q++)
	{
		uint32	   *qids = ids + (Size) q * want;
		float	   *qdists = dists + (Size) q * want;
		bool		tail_ranks = false;

		plans[q] = NULL;
		ncands[q] = 0;
		if (cagra_copy_is_partial(meta, &copy))
		{
			uint32		count = 0;

			memcpy(copy_ids, qids, sizeof(uint32) * want);
			cagra_merge_tail(index, meta, &copy, 1, vecs + (Size) q * meta->dims, NULL, NULL, want, qids, qdists);
			for (uint32 i = 0; i < want; i++)
				if (qids[i] < meta->n && !skip(q, qids[i]))
				{
					qids[count] = qids[i];
					qdists[count++] = qdists[i];
				}
			for (uint32 j = 0; j < Min(degree, count) && !tail_ranks; j++)
				tail_ranks = std::find(copy_ids, copy_ids + want, qids[j]) == copy_ids + want;
			if (tail_ranks)
			{
				ncands[q] = count < Min(meta->live, meta->graph_degree) ? 0 : count;
				continue;
			}
		}
		plans[q] = cagra_plan_of_words(meta, words + (Size) q * plan_words, meta->n);
	}
	pfree(words);
	pfree(copy_ids);
	return true;
}

/*
 * The plan of node `new_id` (`vec`, prepared), a node past the ones `meta`
 * counts, made by the GPU worker (cagra_plans_from_worker); NULL when the
 * backend plans, from the candidates left in *ids and *dists (palloc'd;
 * *ncands of them) or else from a search of the pages.
 */
static cagra::InsertPlan *
cagra_insert_plan_from_worker(Relation index, const CagraMetaData *meta, const float *vec, uint32 **ids_out,
							  float **dists_out, uint32 *ncands)
{
	uint32		want = cagra_insert_candidates(meta);
	uint32	   *ids = (uint32 *) palloc(sizeof(uint32) * Max(want, 1));
	float	   *dists = (float *) palloc(sizeof(float) * Max(want, 1));
	cagra::InsertPlan *plan = NULL;

	*ncands = 0;
	if (!cagra_plans_from_worker(index, meta, vec, 1, &plan, ids, dists, ncands,
								 [](uint32, uint32) { return false; }))
		return NULL;
	*ids_out = ids;
	*dists_out = dists;
	return plan;
}

/* The record of a new node with its vector stored, made before the slot
 * lock; its header and row are set under it (cagra_set_record_head). */
static char *
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
static void
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

/*
 * Turn a plan made for `planned_id` into one for `new_id`, the slot taken
 * after the search: the reverse edges point to it, and it is neither in its
 * own row nor given an edge to itself (a reused slot the search walked
 * through while all nodes were deleted).
 */
static void
cagra_retarget_plan(cagra::InsertPlan *plan, uint32 planned_id, uint32 new_id)
{
	size_t		kept = 0;

	for (cagra::EdgeUpdate &u : plan->updates)
		if (u.node != new_id)
		{
			if (u.target == planned_id)
				u.target = new_id;
			plan->updates[kept++] = u;
		}
	plan->updates.resize(kept);
	kept = 0;
	for (uint32 e : plan->row)
		if (e != new_id && e != cagra::kInvalidNode)
			plan->row[kept++] = e;
	std::fill(plan->row.begin() + kept, plan->row.end(), cagra::kInvalidNode);
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

/*
 * The plan for the new node's vector `x` (prepared into `vec`), made under
 * the writers' lock for a slot past the nodes the search saw (view->n),
 * then the slot lock taken: the meta page's buffer locked exclusively, in
 * *metabuf, and what it holds in *meta.  The record, its vector stored, is
 * made before the slot lock (*rec); the plan is freed by *owner (in `cxt`).
 * Returns NULL, taking no lock, when the vector is not indexed.
 */
static cagra::InsertPlan *
cagra_plan_and_lock_slot(Relation index, MemoryContext cxt, const float *x, int dim, float *vec,
						 CagraMetaData *view, CagraMetaData *meta, Buffer *metabuf, CagraOwner **owner,
						 char **rec)
{
	cagra::InsertPlan *plan;
	CagraStatus st;
	uint32	   *cand_ids = NULL;
	float	   *cand_dists = NULL;
	uint32		ncands = 0;

	for (;;)
	{
		cagra_read_meta(index, view);
		cagra_fix_dims(view, dim);
		cagra_check_dims(index, view->dims, dim);

		cagra::Metric metric = (cagra::Metric) view->metric;

		/* not indexed, as in a build: its cosine distance is undefined */
		if (cagra_vector_unindexable(metric, x, dim))
			return NULL;
		cagra_prepare(metric, x, vec, view->dims);
		if (view->element_type == (uint32) cagra::ElementType::Float16)
			cagra_check_storable(index, cagra_format_of(view), vec, x);

		/* the search sees nodes 0 .. n-1: the plan is for a slot past them,
		 * the slot is taken after */
		ncands = 0;
		plan = cagra_insert_plan_from_worker(index, view, vec, &cand_ids, &cand_dists, &ncands);
		if (!plan && !(plan = cagra_plan_insert(index, view, vec, view->n, cand_ids, cand_dists, ncands, &st)))
			cagra_report_status(&st);
		*owner = cagra_owner_new(cxt, plan, cagra_delete_object<cagra::InsertPlan>);
		if (plan->row.size() != view->graph_degree)
			elog(ERROR, "cagra insert plan has a row of %zu entries, expected %u",
				 plan->row.size(), view->graph_degree);
		if (!*rec)
			*rec = cagra_new_record(view, vec);

		/*
		 * The slot lock: the meta page locked exclusively from taking the
		 * slot to counting the node.  Only its holder and vacuum (kept out
		 * by the writers' lock) change the meta page, so `meta` is exact
		 * until then.
		 */
		*metabuf = ReadBuffer(index, CAGRA_METAPAGE_BLKNO);
		LockBuffer(*metabuf, BUFFER_LOCK_EXCLUSIVE);
		memcpy(meta, cagra_meta_of(BufferGetPage(*metabuf)), sizeof(*meta));
		cagra_check_meta(index, meta);

		/* a small index's rows still have padding, which each insert must
		 * see the others fill: its plan is made again if one came between */
		if (meta->generation == view->generation || view->live > 2 * view->graph_degree)
			return plan;
		UnlockReleaseBuffer(*metabuf);
		cagra_owner_free(*owner);
	}
}

/* ERROR unless the index has room for node `new_id`. */
static void
cagra_check_room(Relation index, uint32 new_id)
{
	if (new_id >= cagra::kInvalidNode - 1)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("cagra index \"%s\" is full", RelationGetRelationName(index)),
				 errhint("REINDEX the index to drop deleted nodes.")));
}

/*
 * Under the slot lock, the new node's slot: a deleted one from reuse_next
 * on, else n.  The plan, made for `planned_id`, is turned to it and checked
 * against the meta page, and *meta takes the vector's norm (counted with
 * the node, cagra_publish_node).
 */
static uint32
cagra_take_slot(Relation index, CagraMetaData *meta, cagra::InsertPlan *plan, uint32 planned_id,
				const float *vec, int dim)
{
	cagra_fix_dims(meta, dim);
	cagra_check_dims(index, meta->dims, dim);

	uint32		new_id = cagra_find_free_slot(index, meta);

	if (new_id == cagra::kInvalidNode)
		new_id = meta->n;
	cagra_check_room(index, new_id);
	cagra_retarget_plan(plan, planned_id, new_id);
	for (const cagra::EdgeUpdate &u : plan->updates)
		if (u.node >= meta->n || u.slot >= meta->graph_degree)
			elog(ERROR, "cagra insert plan has an edge update out of range (node %u, slot %u)",
				 u.node, u.slot);
	if (cagra_format_of(meta).keeps_max_norm())
		meta->max_norm = Max(meta->max_norm, (float4) cagra::vector_norm(vec, meta->dims));
	return new_id;
}

/* Step 1: the new node's record `rec` written into slot `new_id`, its
 * header, row and vector, in one WAL record; `flags`: its header's when
 * appended. */
static void
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
static void
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
 * An insert whose linking is deferred: the new node appended and counted
 * unlinked (no edge leads to it; every search takes it as an entry until
 * it is linked), without a search.  Only where it appends (no slot vacuum
 * freed) to an index whose rows have no padding left (more live nodes than
 * twice the degree).  Returns false, writing nothing, where it does not
 * apply; else true with *new_id the node (kInvalidNode: the vector is not
 * indexed).
 */
static bool
cagra_insert_unlinked(Relation index, const float *x, int dim, float *vec, ItemPointer heap_tid, uint32 *new_id)
{
	CagraMetaData view,
				meta;

	cagra_read_meta(index, &view);
	if (view.dims == 0 || view.live < view.n || view.live <= 2 * view.graph_degree)
		return false;
	/* cagra.device = gpu without the worker fails every insert, as before */
	if (cagra_device == CAGRA_SEARCH_GPU)
		(void) cagra_client_wants_worker("insert");
	cagra_check_dims(index, view.dims, dim);
	*new_id = cagra::kInvalidNode;
	if (cagra_vector_unindexable((cagra::Metric) view.metric, x, dim))
		return true;
	cagra_prepare((cagra::Metric) view.metric, x, vec, view.dims);
	if (view.element_type == (uint32) cagra::ElementType::Float16)
		cagra_check_storable(index, cagra_format_of(&view), vec, x);

	char	   *rec = cagra_new_record(&view, vec);
	std::vector<uint32_t> row(view.graph_degree, cagra::kInvalidNode);
	Buffer		metabuf = ReadBuffer(index, CAGRA_METAPAGE_BLKNO);
	uint32		taken;

	/* the slot lock; only vacuum frees slots, and it waits for the writers */
	LockBuffer(metabuf, BUFFER_LOCK_EXCLUSIVE);
	memcpy(&meta, cagra_meta_of(BufferGetPage(metabuf)), sizeof(meta));
	cagra_check_meta(index, &meta);
	if (meta.live < meta.n || meta.dims != view.dims)
	{
		UnlockReleaseBuffer(metabuf);
		return false;
	}
	cagra_check_room(index, meta.n);
	if (cagra_format_of(&meta).keeps_max_norm())
		meta.max_norm = Max(meta.max_norm, (float4) cagra::vector_norm(vec, meta.dims));
	*new_id = meta.n;
	cagra_write_record(index, &meta, *new_id, rec, heap_tid, row.data(), CAGRA_NODE_LIVE | CAGRA_NODE_UNLINKED);
	(void) cagra_publish_node(index, metabuf, &meta, *new_id, row.data(), NULL, true, &taken);
	pfree(rec);
	return true;
}

/* The vector of node `id` as the index stores it, decoded, into `out`
 * (meta->dims floats). */
static void
cagra_read_node_vector(Relation index, const CagraMetaData *meta, uint32 id, float *out)
{
	cagra::VectorFormat format = cagra_format_of(meta);
	std::vector<char> stored(format.vector_bytes());

	cagra_read_record_bytes(index, meta, id, cagra_vector_offset(meta->graph_degree), format.vector_bytes(),
							stored.data());
	format.load(stored.data(), out);
}

/*
 * Link node `id` (counted, unlinked; `vec` its vector) by `plan`, made as
 * an insert's for a slot past the nodes `view` counts (NULL: the core's
 * plan over the pages, from the `ncands` candidates given, else from a
 * search): its row written, then its way in with its header made live
 * (no search takes it as an entry any more), then the other reverse edges.
 */
static void
cagra_link_node(Relation index, const CagraMetaData *view, uint32 id, const float *vec, cagra::InsertPlan *plan,
				const uint32 *cand_ids, const float *cand_dists, uint32 ncands)
{
	CagraStatus st;

	if (!plan && !(plan = cagra_plan_insert(index, view, vec, view->n, cand_ids, cand_dists, ncands, &st)))
		cagra_report_status(&st);

	std::unique_ptr<cagra::InsertPlan> owned(plan);
	CagraWalBatch batch;

	cagra_retarget_plan(plan, view->n, id);
	cagra_batch_begin(&batch, index, view);
	cagra_batch_write(&batch, id, CAGRA_ROW_OFFSET, plan->row.data(), view->graph_degree * sizeof(uint32));
	cagra_batch_finish(&batch);
	cagra_publish_with_way_in(index, InvalidBuffer, view, id, plan);
	cagra_link_reverse_edges(index, view, plan->updates.data(), plan->updates.size());
}

/*
 * The unlinked span of the meta page shortened past its nodes linked (or
 * deleted) since, so searches stop taking them as entries and copies for
 * the worker take them as linked.  Under the slot lock, reading headers.
 */
static void
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

/* Whether node `id` of the index `meta` counts is unlinked (and live). */
static bool
cagra_node_unlinked(Relation index, const CagraMetaData *meta, uint32 id)
{
	CagraNodeHeader hdr;

	if (id < cagra_first_unlinked(meta) || id >= meta->n)
		return false;
	cagra_read_record_bytes(index, meta, id, 0, sizeof(hdr), &hdr);
	return (hdr.flags & CAGRA_NODE_UNLINKED) && cagra_node_is_live(hdr.flags);
}

/*
 * Link the unlinked nodes of the run of CAGRA_LINK_RUN ids from `start`,
 * in id order, each the candidate of those after it, under the run's lock
 * (a tuple lock on the index at (run, 1), released at the end): waiting
 * for it when `wait`, else returning false when another holds it.  Their
 * plans are made by the worker in one request where inserts' plans go to
 * it (cagra_plans_from_worker), else by the backend one at a time.
 */
static bool
cagra_link_run(Relation index, uint32 start, bool wait)
{
	ItemPointerData run;
	CagraMetaData view;
	std::vector<uint32> nodes;

	ItemPointerSet(&run, start / CAGRA_LINK_RUN, 1);
	if (wait)
		LockTuple(index, &run, ExclusiveLock);
	else if (!ConditionalLockTuple(index, &run, ExclusiveLock))
		return false;
	cagra_read_meta(index, &view);
	for (uint32 id = Max(start, cagra_first_unlinked(&view)); id < Min(start + CAGRA_LINK_RUN, view.n); id++)
		if (cagra_node_unlinked(index, &view, id))
			nodes.push_back(id);

	uint32		m = (uint32) nodes.size();
	uint32		want = cagra_insert_candidates(&view);
	std::vector<float> vecs((size_t) m * view.dims);
	std::vector<cagra::InsertPlan *> plans(m, nullptr);
	std::vector<uint32> ids((size_t) m * want + 1), ncands(m + 1, 0);
	std::vector<float> dists((size_t) m * want + 1);

	for (uint32 q = 0; q < m; q++)
		cagra_read_node_vector(index, &view, nodes[q], vecs.data() + (size_t) q * view.dims);
	/* a node's candidates: linked nodes, and the run's nodes linked before it */
	if (m > 0)
		(void) cagra_plans_from_worker(index, &view, vecs.data(), m, plans.data(), ids.data(), dists.data(),
									   ncands.data(), [&](uint32 q, uint32 id) {
										   return id >= nodes[q] ? id < view.n :
											   (id < nodes[0] && cagra_node_unlinked(index, &view, id));
									   });
	for (uint32 q = 0; q < m; q++)
	{
		cagra_link_node(index, &view, nodes[q], vecs.data() + (size_t) q * view.dims, plans[q],
						ids.data() + (size_t) q * want, dists.data() + (size_t) q * want, ncands[q]);
		plans[q] = nullptr;
		CHECK_FOR_INTERRUPTS();
	}
	UnlockTuple(index, &run, ExclusiveLock);
	return true;
}

/*
 * After node `new_id` was appended: when it ends its run, the run is
 * linked, and then the oldest run still unlinked if no one links it (its
 * linker failed), and the unlinked span shortened.
 */
static void
cagra_link_after_append(Relation index, uint32 new_id)
{
	CagraMetaData meta;
	uint32		start = new_id + 1 - CAGRA_LINK_RUN;

	if ((new_id + 1) % CAGRA_LINK_RUN != 0)
		return;
	cagra_link_run(index, start, true);
	cagra_read_meta(index, &meta);

	uint32		first = cagra_first_unlinked(&meta);

	if (first < start)
		cagra_link_run(index, first - first % CAGRA_LINK_RUN, false);
	cagra_shorten_unlinked(index);
}

void
cagra_link_unlinked(Relation index)
{
	CagraMetaData meta;

	cagra_read_meta(index, &meta);
	for (uint32 start = cagra_first_unlinked(&meta) - cagra_first_unlinked(&meta) % CAGRA_LINK_RUN;
		 start < meta.n; start += CAGRA_LINK_RUN)
		cagra_link_run(index, start, true);
	cagra_shorten_unlinked(index);
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
	float	   *vec = (float *) palloc(dim * sizeof(float));
	CagraMetaData view,
				meta;
	Buffer		metabuf;
	cagra::InsertPlan *plan;
	CagraOwner *owner = NULL;
	char	   *rec = NULL;

	uint32		new_id = cagra::kInvalidNode;
	bool		appended = false;

	/* vacuum waits for the inserts in flight and keeps new ones out */
	cagra_lock_writers(index, RowExclusiveLock);
	if (cagra_insert_unlinked(index, x, dim, vec, heap_tid, &new_id))
		appended = new_id != cagra::kInvalidNode;
	else if ((plan = cagra_plan_and_lock_slot(index, cxt, x, dim, vec, &view, &meta, &metabuf, &owner, &rec)))
	{
		new_id = cagra_take_slot(index, &meta, plan, view.n, vec, dim);
		appended = new_id >= meta.n;
		cagra_write_record(index, &meta, new_id, rec, heap_tid, plan->row.data(), CAGRA_NODE_LIVE);
		cagra_publish_with_way_in(index, metabuf, &meta, new_id, plan);
		cagra_link_reverse_edges(index, &meta, plan->updates.data(), plan->updates.size());
		cagra_owner_free(owner);
	}
	if (appended)
		cagra_link_after_append(index, new_id);
	cagra_unlock_writers(index, RowExclusiveLock);
	MemoryContextSwitchTo(old);
	MemoryContextDelete(cxt);
	return false;
}
