/*
 * insert.cpp — aminsert: add one node to the graph, in a slot vacuum freed
 * when there is one, else appended, and link the nodes appended unlinked.
 *
 * Inserts run side by side.  Each holds the writers' lock (a heavyweight
 * lock on the meta page) in RowExclusiveLock, which inserts share and
 * vacuum's ExclusiveLock does not: vacuum waits for the inserts in flight,
 * so no insert links to a node vacuum deleted and repaired around, or
 * takes a slot whose old edges are not repaired yet.
 *
 * An appended node of an index past its first rows is counted unlinked,
 * with no search (cagra_insert_unlinked): under the slot lock, the meta
 * page's buffer lock held exclusively, its record is written into slot n
 * and n counted with it in the unlinked span (meta->unlinked), whose nodes
 * every search takes as entries.  The insert that counts the last node of
 * a run of CAGRA_LINK_RUN ids hands the index to a linker (linker.cpp),
 * which links every complete run no one else links, a few runs at a time
 * (cagra_link_complete_runs), or links the run itself (cagra_link_run)
 * when none takes it or the span is long: the nodes' plans made by the GPU
 * worker in one request when it runs (cagra.device auto or gpu), else
 * here; then the span is shortened past the nodes linked.  Vacuum links
 * every unlinked node before it starts.
 *
 * A node linked, or inserted into a freed slot (or while the index is
 * small), is linked by a plan (the neighbour search, the pruned row and
 * the reverse edges) made for a slot past the nodes counted when it
 * started: with cagra.device = gpu by the GPU worker from its copy of the
 * index, as a scan's search request that also asks for the plan (where a
 * node the copy lacks ranks among the new node's nearest, the plan is made
 * here from the merged candidates), else here as a scan searches: from the
 * entry vectors and entry index the backend keeps for its scans, one
 * share-locked page at a time, the pages kept pinned until the plan is
 * made (a small index, whose rows still have padding, plans again if
 * another insert came between).  Only linked nodes are a plan's
 * neighbours: an unlinked node's row is rewritten when it is linked.
 * Then the page writes of insert_write.cpp, each WAL record crash-safe on
 * its own: for an insert, under the slot lock,
 *   1. the slot is taken (a deleted one from reuse_next on, else n) and
 *      the new node's header, row and vector written there: slot n,
 *      invisible as n is not counted yet; or a deleted slot, its header
 *      still saying deleted (searches walk through it, never return it);
 *   2. the meta page (n + 1 or the reuse counted, live + 1, generation + 1)
 *      with the reverse edge of the node's closest neighbour (and a reused
 *      slot's header made live), so a node counted linked always has a
 *      way in;
 * for a node linked, its row, then its way in with its header made live;
 * and after either:
 *   3. the other reverse edges into existing rows (an edge a reverse edge
 *      replaces was handed to the new node's row in step 1).
 * Another insert may have changed a neighbour's row since the search read
 * it: each reverse edge is decided again under the row's exclusive page
 * lock, and goes only where the slot still holds what the plan saw or
 * into padding, never in place of an edge written since (that node's way
 * in).  The closest neighbour's edge must go somewhere: in place of an
 * edge the new row also holds, else the node the slot holds now is handed
 * to the new row and step 2 tried again.
 * Scans read the meta page once, so they never follow an edge to a node
 * appended after they started (it reads as padding).  A reused slot can
 * change under a scan that started before: its row is only inserted by a
 * transaction its snapshot cannot see.
 */
#include "am/accessor.h"
#include "am/insert_write.h"
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

bool
cagra_node_unlinked(Relation index, const CagraMetaData *meta, uint32 id)
{
	CagraNodeHeader hdr;

	if (id < cagra_first_unlinked(meta) || id >= meta->n)
		return false;
	cagra_read_record_bytes(index, meta, id, 0, sizeof(hdr), &hdr);
	return (hdr.flags & CAGRA_NODE_UNLINKED) && cagra_node_is_live(hdr.flags);
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
 * worker, cagra.device = cpu, or auto for one row (not a `run`), a
 * fallback (counted, or a NOTICE, as a scan's), a search wider than the
 * worker's, or a copy newer than `meta`.
 */
template <class Skip>
static bool
cagra_plans_from_worker(Relation index, const CagraMetaData *meta, const float *vecs, uint32 nq, bool run,
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
	/* with auto the worker plans runs (a round trip for several rows is
	 * faster than the backend's plans), the backend single rows (a round
	 * trip for one row is not): docs/benchmarks.md, "Write path" */
	if ((cagra_device == CAGRA_SEARCH_AUTO && !run) || want == 0 || req.params.itopk_size > CAGRA_WORKER_MAX_K ||
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
	if (!cagra_plans_from_worker(index, meta, vec, 1, false, &plan, ids, dists, ncands,
								 [&](uint32, uint32 id) { return cagra_node_unlinked(index, meta, id); }))
		return NULL;
	*ids_out = ids;
	*dists_out = dists;
	return plan;
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

/* The row's vector `x` prepared into `vec` for the index `view` describes
 * (ERROR on wrong dimensions, or a value float16 storage cannot hold);
 * false when it is not indexed, as in a build: its cosine distance is
 * undefined. */
static bool
cagra_prepare_row_vector(Relation index, const CagraMetaData *view, const float *x, int dim, float *vec)
{
	cagra::Metric metric = (cagra::Metric) view->metric;

	cagra_check_dims(index, view->dims, dim);
	if (cagra_vector_unindexable(metric, x, dim))
		return false;
	cagra_prepare(metric, x, vec, view->dims);
	if (view->element_type == (uint32) cagra::ElementType::Float16)
		cagra_check_storable(index, cagra_format_of(view), vec, x);
	return true;
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
		if (!cagra_prepare_row_vector(index, view, x, dim, vec))
			return NULL;

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
	*new_id = cagra::kInvalidNode;
	if (!cagra_prepare_row_vector(index, &view, x, dim, vec))
		return true;

	char	   *rec = cagra_new_record(&view, vec);
	std::vector<uint32_t> row(view.graph_degree, cagra::kInvalidNode);
	Buffer		metabuf = ReadBuffer(index, CAGRA_METAPAGE_BLKNO);

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
	cagra_count_unlinked_node(index, metabuf, &meta, *new_id);
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
 * Link `nodes`, unlinked nodes in id order whose runs' locks the caller
 * holds.  Their plans are made by the worker in one request where inserts'
 * plans go to it (cagra_plans_from_worker), else by the backend one at a
 * time, each node then the candidate of those after it.
 */
void
cagra_link_nodes(Relation index, const CagraMetaData *view, const uint32 *nodes, uint32 m)
{
	uint32		want = cagra_insert_candidates(view);
	std::vector<float> vecs((size_t) m * view->dims);
	std::vector<cagra::InsertPlan *> plans(m, nullptr);
	std::vector<uint32> ids((size_t) m * want + 1), ncands(m + 1, 0);
	std::vector<float> dists((size_t) m * want + 1);

	for (uint32 q = 0; q < m; q++)
		cagra_read_node_vector(index, view, nodes[q], vecs.data() + (size_t) q * view->dims);
	/*
	 * The worker plans the nodes at once, so a node's candidates are the
	 * linked nodes only, not the ones linked with it: one of them ranking
	 * among a node's neighbours would leave its plan to the backend, and in
	 * a stream of similar rows nearly all do.  The nodes reach each other
	 * through the linked neighbours they share, and later rows link to them.
	 */
	if (m > 0 && cagra_plans_from_worker(index, view, vecs.data(), m, true, plans.data(), ids.data(),
										 dists.data(), ncands.data(), [&](uint32, uint32 id) {
											 return id >= nodes[0] || cagra_node_unlinked(index, view, id);
										 }))
	{
		uint32		in_backend = (uint32) std::count(plans.begin(), plans.end(), nullptr);

		if (in_backend > 0)
			elog(DEBUG1, "cagra index \"%s\": %u of the %u rows linked from node %u planned in the backend (nodes the worker's copy lacks rank among their neighbours)",
				 RelationGetRelationName(index), in_backend, m, nodes[0]);
	}
	for (uint32 q = 0; q < m; q++)
	{
		cagra_link_node(index, view, nodes[q], vecs.data() + (size_t) q * view->dims, plans[q],
						ids.data() + (size_t) q * want, dists.data() + (size_t) q * want, ncands[q]);
		plans[q] = nullptr;
		CHECK_FOR_INTERRUPTS();
	}
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
