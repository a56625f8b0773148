/*
 * update.h — changes to a built graph, as plans the caller applies to its
 * own storage (memory, or PostgreSQL pages under generic WAL):
 *   insert: search for candidates, prune them to a row, and give the closest
 *           chosen neighbours a reverse edge by replacing their weakest edge;
 *   repair: rewrite the rows that point at removed nodes.
 * The Accessor is the one of search.h (including vector()).  Planning only
 * reads through the accessor; apply_insert / apply_repair apply a plan to an
 * in-memory Graph.
 */
#pragma once

#include "search.h"

namespace cagra {

struct EdgeUpdate {
    uint32_t node; /* row to change */
    uint32_t slot; /* position in the row */
    uint32_t target;
    uint32_t previous; /* what the slot held when planned (kInvalidNode: padding), for a caller that applies
                          the plan while others change the rows: it writes only where the slot still holds it */
};

struct InsertPlan {
    std::vector<uint32_t> row;       /* the new node's row, g.degree() entries */
    std::vector<EdgeUpdate> updates; /* reverse edges into existing rows */
};

struct RowRewrite {
    uint32_t node;
    std::vector<uint32_t> row;
};

/* Every node may be a neighbour. */
struct AnyNode {
    bool operator()(uint32_t) const { return true; }
};

/* Plan the insert of `vec` (prepared) as node `new_id` (normally g.size();
 * if new_id < g.size(), a slot taken again, that node is never chosen as its
 * own neighbour and rows that still hold an edge to it get no second one).
 * Only nodes with accept(id) become its neighbours; `accepted` says how
 * many nodes besides new_id it accepts (kInvalidNode: all).  Rows are padded
 * with kInvalidNode only while the graph has no more than degree such nodes. */
template <class Accessor, class Accept = AnyNode>
InsertPlan plan_insert(const Accessor &g, const float *vec, uint32_t new_id, const SearchParams &params,
                       const std::vector<uint32_t> &entry_nodes = {}, Accept accept = Accept(),
                       uint32_t accepted = kInvalidNode);

/* The same, the search starting from an entry index (derive_entry_index of
 * the entry list, as scans keep it cached) instead of every entry node. */
template <class Accessor, class Index, class Accept = AnyNode,
          class = std::enable_if_t<std::is_same<Index, EntryIndex>::value>>
InsertPlan plan_insert(const Accessor &g, const float *vec, uint32_t new_id, const SearchParams &params,
                       const Index &entries, Accept accept = Accept(), uint32_t accepted = kInvalidNode);

/* plan_insert in two steps, for a caller that finds the candidates
 * elsewhere (another process's copy of the graph):
 *   insert_candidate_count: how many candidates the search asks for, of
 *     `others` nodes that may be neighbours;
 *   insert_candidates: the search (candidate_search_params), closest
 *     first, every node of it accepted and not new_id (all of them
 *     measured when the search finds too few);
 *   plan_insert_from: the row pruned from such candidates (each a node of
 *     g, closest first) and the reverse edges. */
inline uint32_t insert_candidate_count(uint32_t degree, const SearchParams &params, uint32_t others);

/* The search parameters that find `want` candidates (itopk_size at least
 * want), for inserts and repairs. */
inline SearchParams candidate_search_params(const SearchParams &params, uint32_t want);

template <class Accessor, class Accept = AnyNode>
std::vector<Neighbor> insert_candidates(const Accessor &g, const float *vec, uint32_t new_id,
                                        const SearchParams &params, const std::vector<uint32_t> &entry_nodes = {},
                                        Accept accept = Accept(), uint32_t accepted = kInvalidNode);

template <class Accessor>
InsertPlan plan_insert_from(const Accessor &g, const float *vec, uint32_t new_id, const std::vector<Neighbor> &cands);

/* plan_insert_from with its distances measured elsewhere (the worker's
 * device), in three steps that read only rows through `g`:
 *   insert_row: the new node's row pruned from the candidates, padded;
 *   neighbours_to_measure: the neighbours in that row whose reverse edge
 *     needs distances (the first half of the row, each row full and
 *     without an edge to new_id);
 *   plan_insert_measured: the plan, measured[i] holding the distances of
 *     neighbours_to_measure's i-th node b: d(b, new), and for each edge
 *     b -> w of b's row in row order d(b, w) and d(new, w).
 * The same rows read give the same plan as plan_insert_from. */
struct NeighbourDistances {
    float to_new = 0.0f;
    std::vector<float> from_b, from_new;
};

template <class Accessor>
std::vector<uint32_t> insert_row(const Accessor &g, const std::vector<Neighbor> &cands);

template <class Accessor>
std::vector<uint32_t> neighbours_to_measure(const Accessor &g, uint32_t new_id, const std::vector<uint32_t> &row);

template <class Accessor>
InsertPlan plan_insert_measured(const Accessor &g, uint32_t new_id, std::vector<uint32_t> row,
                                const std::vector<NeighbourDistances> &measured);

/* Plan the repair of every live row among nodes first .. last - 1 that holds
 * an edge to a node with removed(id): its live edges stay, the removed ones
 * are replaced by the closest live nodes among the removed nodes' neighbours
 * (a search fills in when those are too few).  Rows of removed nodes are
 * left alone.  The distances are computed removed node by removed node, so
 * each vector is read about once for every removed node it neighbours, not
 * once for every row that needs it; memory grows with the rows planned,
 * which a caller bounds by planning a range at a time. */
template <class Accessor, class Removed>
std::vector<RowRewrite> plan_repair(const Accessor &g, Removed &&removed, const SearchParams &params,
                                    const std::vector<uint32_t> &entry_nodes = {}, uint32_t first = 0,
                                    uint32_t last = kInvalidNode);

/* Plan the links that give the live targets of removed nodes a nearby way
 * in again, once plan_repair's rewrites are on the graph: a removed node
 * may have been the only node near a target that led to it, and the repair
 * gives the rows that pointed at the removed node their own closest
 * candidates, not its targets, so such a target keeps only ways in from
 * far away, which no search for its own vector takes.  Each live target of
 * a removed node that none of the live nodes of its own row leads back to
 * gets an edge from the first of them with room (padding, or an edge whose
 * target keeps another way in), the whole rows changed returned.  It reads
 * the rows of the removed nodes, of their targets and of the targets'
 * neighbours, and every live row once when it links (the count of ways
 * in, two bits a node). */
template <class Accessor, class Removed>
std::vector<RowRewrite> plan_near_ways_in(const Accessor &g, Removed &&removed);

/* Plan the links that make every live node reachable again from the live
 * entry nodes along live rows, once plan_repair's rewrites are on the
 * graph: a repaired row takes only the closest of a removed node's live
 * neighbours, so a live node whose only ways in came from removed nodes
 * may be left with none (and a removed node's row is overwritten when its
 * slot is taken again).  Each such node is linked from its nearest reached
 * live node, into padding or in place of an edge whose target keeps another
 * way in, as connect_graph does at build; the whole rows changed are
 * returned.  Nothing when no entry node is live.  The walk reads the rows
 * it reaches in id order (for pages: page order), each once a pass; besides
 * the rows changed, its memory is four bits a node. */
template <class Accessor, class Removed>
std::vector<RowRewrite> plan_reconnect(const Accessor &g, Removed &&removed, const SearchParams &params,
                                       const std::vector<uint32_t> &entry_nodes);

/* Apply plans to an in-memory graph (apply_insert appends the new row, so
 * plan.row must be for node g.size()). */
void apply_insert(Graph &g, const InsertPlan &plan);
void apply_repair(Graph &g, const std::vector<RowRewrite> &rewrites);

} // namespace cagra

#include "update_impl.h"
