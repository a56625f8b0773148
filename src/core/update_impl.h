/*
 * update_impl.h — the template code of plan_insert, plan_repair,
 * plan_near_ways_in and plan_reconnect (included by update.h).
 */
#pragma once

#include <algorithm>
#include <stdexcept>
#include <type_traits>
#include <unordered_map>
#include <unordered_set>

namespace cagra {
namespace detail {

/* One bit a node. */
struct NodeBits {
    std::vector<uint64_t> words;
    explicit NodeBits(uint32_t n) : words(((size_t)n + 63) / 64, 0) {}
    bool test(uint32_t v) const { return (words[v / 64] >> (v % 64)) & 1; }
    void set(uint32_t v) { words[v / 64] |= uint64_t(1) << (v % 64); }
    void reset(uint32_t v) { words[v / 64] &= ~(uint64_t(1) << (v % 64)); }
    void clear() { std::fill(words.begin(), words.end(), 0); }
};

/*
 * The first position of each id of a short list, in a hash table at most
 * half full (open addressing, kInvalidNode: empty), for looking up every
 * edge of many rows against the list.
 */
class FirstPositions {
public:
    explicit FirstPositions(uint32_t count)
    {
        while ((1u << bits_) < 2 * count)
            bits_++;
        table_.assign(size_t(1) << bits_, {kInvalidNode, 0});
    }
    void add(uint32_t id, uint32_t position)
    {
        std::pair<uint32_t, uint32_t> &e = table_[slot_of(id)];
        if (e.first == kInvalidNode)
            e = {id, position};
    }
    /* kInvalidNode: not in the list */
    uint32_t find(uint32_t id) const
    {
        const std::pair<uint32_t, uint32_t> &e = table_[slot_of(id)];
        return e.first == id && id != kInvalidNode ? e.second : kInvalidNode;
    }

private:
    uint32_t slot_of(uint32_t id) const
    {
        const uint32_t mask = (1u << bits_) - 1;
        uint32_t h = (id * 0x9E3779B1u) >> (32 - bits_);
        while (table_[h].first != kInvalidNode && table_[h].first != id)
            h = (h + 1) & mask;
        return h;
    }
    uint32_t bits_ = 4;
    std::vector<std::pair<uint32_t, uint32_t>> table_; /* (id, position) */
};

/*
 * Rank-based pruning of a candidate list sorted by distance: candidate j is
 * detourable through an earlier candidate i when j is in i's row.  Only the
 * first rank condition applies here: rows of the final graph are not in
 * distance order, so a rank of j inside i's row means nothing.
 */
template <class Accessor>
std::vector<uint32_t> prune_candidates(const Accessor &g, const std::vector<Neighbor> &cands, uint32_t degree)
{
    const uint32_t m = (uint32_t)cands.size();
    std::vector<uint32_t> detours(m, 0);
    FirstPositions rank_of(m);
    for (uint32_t r = 0; r < m; r++)
        rank_of.add(cands[r].id, r);
    std::vector<uint32_t> scratch(g.degree());
    for (uint32_t i = 0; i + 1 < m; i++) {
        const uint32_t *row = g.neighbors(cands[i].id, scratch.data());
        for (uint32_t j = 0; j < g.degree(); j++) {
            const uint32_t rank = rank_of.find(row[j]);
            if (rank != kInvalidNode && rank > i)
                detours[rank]++;
        }
    }
    std::vector<uint32_t> order(m);
    for (uint32_t r = 0; r < m; r++)
        order[r] = r;
    std::stable_sort(order.begin(), order.end(), [&](uint32_t x, uint32_t y) { return detours[x] < detours[y]; });
    std::vector<uint32_t> row;
    for (uint32_t j = 0; j < m && row.size() < degree; j++)
        row.push_back(cands[order[j]].id);
    return row;
}

/* All nodes accepted by `accept`, closest first (for graphs too small or too
 * broken for a search to find enough candidates). */
template <class Accessor, class Accept>
std::vector<Neighbor> exhaustive_candidates(const Accessor &g, const float *vec, Accept &&accept, uint32_t limit)
{
    std::vector<uint32_t> ids;
    for (uint32_t v = 0; v < g.size(); v++)
        if (accept(v))
            ids.push_back(v);
    std::vector<float> d(ids.size());
    g.distances(vec, ids.data(), (uint32_t)ids.size(), d.data());
    std::vector<Neighbor> out(ids.size());
    for (size_t i = 0; i < ids.size(); i++)
        out[i] = {ids[i], d[i]};
    std::sort(out.begin(), out.end(), [](const Neighbor &a, const Neighbor &b) {
        return a.distance < b.distance || (a.distance == b.distance && a.id < b.id);
    });
    if (out.size() > limit)
        out.resize(limit);
    return out;
}

/*
 * The edges a plan links into live rows: the rows it changed, read in place
 * of the graph's, and per node whether live rows lead to it at least once
 * and at least twice (bits, counted over every live row when the first link
 * needs them; only "at least twice" is asked).
 */
template <class Accessor, class Removed>
class RowLinks {
public:
    RowLinks(const Accessor &g, const Removed &removed)
        : g_(g), removed_(removed), n_(g.size()), degree_(g.degree()), scratch_(degree_), once_(n_), twice_(n_)
    {}

    bool follows(uint32_t w) const { return w != kInvalidNode && w < n_ && !removed_(w); }

    const uint32_t *row(uint32_t v)
    {
        auto it = changed_.find(v);
        return it != changed_.end() ? it->second.data() : g_.neighbors(v, scratch_.data());
    }

    /* An edge from -> u into padding, else in place of the last edge whose
     * target keeps another way in; false: from's row has no such place. */
    bool link(uint32_t from, uint32_t u)
    {
        if (!counted_)
            count_ways_in();
        const uint32_t *current = row(from);
        std::vector<uint32_t> r(current, current + degree_);
        uint32_t slot = kInvalidNode;
        for (uint32_t j = 0; j < degree_ && slot == kInvalidNode; j++)
            if (!follows(r[j]))
                slot = j;
        for (uint32_t j = degree_; j-- > 0 && slot == kInvalidNode;)
            if (twice_.test(r[j]))
                slot = j;
        if (slot == kInvalidNode)
            return false;
        if (follows(r[slot])) { /* "at least twice" becomes once: a lower bound stays one */
            if (twice_.test(r[slot]))
                twice_.reset(r[slot]);
            else
                once_.reset(r[slot]);
        }
        r[slot] = u;
        count(u);
        changed_[from] = std::move(r);
        return true;
    }

    /* The whole rows changed, in node order. */
    std::vector<RowRewrite> rewrites()
    {
        std::vector<RowRewrite> out;
        out.reserve(changed_.size());
        for (auto &kv : changed_)
            out.push_back({kv.first, std::move(kv.second)});
        std::sort(out.begin(), out.end(), [](const RowRewrite &a, const RowRewrite &b) { return a.node < b.node; });
        return out;
    }

private:
    void count(uint32_t w)
    {
        if (once_.test(w))
            twice_.set(w);
        else
            once_.set(w);
    }

    void count_ways_in()
    {
        for (uint32_t v = 0; v < n_; v++) {
            if (removed_(v))
                continue;
            const uint32_t *r = row(v);
            for (uint32_t j = 0; j < degree_; j++)
                if (follows(r[j]))
                    count(r[j]);
        }
        counted_ = true;
    }

    const Accessor &g_;
    const Removed &removed_;
    const uint32_t n_, degree_;
    std::unordered_map<uint32_t, std::vector<uint32_t>> changed_;
    std::vector<uint32_t> scratch_;
    NodeBits once_, twice_;
    bool counted_ = false;
};

} // namespace detail

inline SearchParams candidate_search_params(const SearchParams &params, uint32_t want)
{
    SearchParams p = params;
    p.itopk_size = std::min<uint32_t>(1024, std::max(p.itopk_size, want));
    p.search_width = std::min(p.search_width, p.itopk_size);
    return p;
}

inline uint32_t insert_candidate_count(uint32_t degree, const SearchParams &params, uint32_t others)
{
    return std::min(others, std::max(2 * degree, params.itopk_size));
}

namespace detail {

/* insert_candidates from `entries`: an entry list or an EntryIndex, as the
 * Searcher takes them. */
template <class Accessor, class Entries, class Accept>
std::vector<Neighbor> search_insert_candidates(const Accessor &g, const float *vec, uint32_t new_id,
                                               const SearchParams &params, const Entries &entries, Accept accept,
                                               uint32_t accepted)
{
    const uint32_t degree = g.degree();
    const uint32_t n = g.size();
    validate_search_params(params, 0);
    const uint32_t others = std::min(new_id < n ? n - 1 : n, accepted);
    const uint32_t want = insert_candidate_count(degree, params, others);
    auto not_self = [new_id, &accept](uint32_t id) { return id != new_id && accept(id); };

    std::vector<Neighbor> cands;
    if (want > 0) {
        SearchParams p = candidate_search_params(params, want);
        Searcher<Accessor> s(g, vec, p, entries);
        cands.resize(std::min(want, p.itopk_size));
        cands.resize(s.next((uint32_t)cands.size(), not_self, cands.data()));
        if (cands.size() < std::min(others, degree))
            cands = exhaustive_candidates(g, vec, not_self, want);
    }
    return cands;
}

} // namespace detail

template <class Accessor, class Accept>
std::vector<Neighbor> insert_candidates(const Accessor &g, const float *vec, uint32_t new_id,
                                        const SearchParams &params, const std::vector<uint32_t> &entry_nodes,
                                        Accept accept, uint32_t accepted)
{
    return detail::search_insert_candidates(g, vec, new_id, params, entry_nodes, accept, accepted);
}

template <class Accessor, class Accept>
InsertPlan plan_insert(const Accessor &g, const float *vec, uint32_t new_id, const SearchParams &params,
                       const std::vector<uint32_t> &entry_nodes, Accept accept, uint32_t accepted)
{
    return plan_insert_from(g, vec, new_id, insert_candidates(g, vec, new_id, params, entry_nodes, accept, accepted));
}

template <class Accessor, class Index, class Accept, class>
InsertPlan plan_insert(const Accessor &g, const float *vec, uint32_t new_id, const SearchParams &params,
                       const Index &entries, Accept accept, uint32_t accepted)
{
    return plan_insert_from(g, vec, new_id,
                            detail::search_insert_candidates(g, vec, new_id, params, entries, accept, accepted));
}

namespace detail {

/* The slot of the longest edge b -> w of b's full `row` that b reaches
 * again through another of its edges (b -> u -> w), or kInvalidNode.  The
 * rows of b's targets may read as padding where they point past the nodes
 * the caller sees. */
template <class Accessor>
uint32_t edge_reached_again(const Accessor &g, const uint32_t *row, uint32_t degree, const float *from_b)
{
    FirstPositions slot_of(degree);
    for (uint32_t s = 0; s < degree; s++)
        slot_of.add(row[s], s);
    std::vector<uint32_t> inner(degree);
    std::vector<uint8_t> again(degree, 0);
    for (uint32_t u = 0; u < degree; u++) {
        const uint32_t *urow = g.neighbors(row[u], inner.data());
        for (uint32_t t = 0; t < degree; t++) {
            const uint32_t at = slot_of.find(urow[t]);
            if (at != kInvalidNode && at != u)
                again[at] = 1;
        }
    }
    uint32_t slot = kInvalidNode;
    for (uint32_t s = 0; s < degree; s++)
        if (again[s] && (slot == kInvalidNode || from_b[s] > from_b[slot]))
            slot = s;
    return slot;
}

} // namespace detail

template <class Accessor>
std::vector<uint32_t> insert_row(const Accessor &g, const std::vector<Neighbor> &cands)
{
    std::vector<uint32_t> row = detail::prune_candidates(g, cands, g.degree());
    row.resize(g.degree(), kInvalidNode);
    return row;
}

namespace detail {

/* Whether neighbour j of the new row, whose row is b_row, has its reverse
 * edge decided by distances: in the first half, its row full and without
 * an edge to new_id (one from before the slot was taken again). */
inline bool reverse_edge_is_measured(uint32_t j, uint32_t degree, const uint32_t *b_row, uint32_t new_id)
{
    const uint32_t *end = b_row + degree;
    return j < std::max(1u, degree / 2) && std::find(b_row, end, new_id) == end &&
           std::find(b_row, end, kInvalidNode) == end;
}

/*
 * The reverse edges of the new node's `row`, the distances of each
 * measured neighbour from measure(b, b_row) (a NeighbourDistances).
 *
 * Each neighbour b takes the new node in place of padding, or (in the
 * first half of the row, the edges pruning ranks best) of an edge b -> w
 * that the new node detours: it is closer to b than w is, and closer to w
 * than b is; the longest such.  w is handed to the new node
 * (b -> new -> w), so no insert takes a node's way in, and that way in
 * moves closer to w, never away from it (taking b's farthest edge instead
 * let a chain of inserts carry a node's only nearby way in off, one
 * hand-off at a time).  The closest neighbour always takes the new node,
 * so it is reachable: where it has no such edge, in place of the one whose
 * target the new node is closest to relative to b, w handed off as well.
 * Taking an edge only because the new row also held its target moved w's
 * one nearby way in to a new node far from w, where no search for w's
 * vector looks.  Until the new node has a quarter of a row's reverse
 * edges, first-half neighbours with no such edge take it in place of their
 * longest edge they reach again through another (b -> u -> w, as
 * rank-based pruning drops edges): rows of a region the new node lies
 * outside of have no edge it detours, and without this a row inserted
 * beyond them, closest to another inserted row, got ways in only from
 * inserted rows, where no search from the built ones looks.
 */
template <class Accessor, class Measure>
InsertPlan plan_reverse_edges(const Accessor &g, uint32_t new_id, std::vector<uint32_t> row, Measure &&measure)
{
    const uint32_t degree = g.degree();
    InsertPlan plan;
    plan.row = std::move(row);
    std::vector<uint32_t> row_scratch(degree), ids;
    const std::vector<uint32_t> neighbours = plan.row;
    /* A handed-off w goes into padding, or in place of one of the last,
     * lowest-ranked entries of the new row (its second half), never of
     * another handed-off node; false: no such place is left. */
    const uint32_t half = std::max(1u, degree / 2);
    const uint32_t first_tail = degree - half;
    std::vector<uint8_t> kept(degree, 0);
    uint32_t tail = degree;
    auto hand_off = [&](uint32_t w) {
        if (w == kInvalidNode)
            return true;
        auto at = std::find(plan.row.begin(), plan.row.end(), w);
        if (at == plan.row.end())
            at = std::find(plan.row.begin(), plan.row.end(), kInvalidNode);
        if (at == plan.row.end()) {
            while (tail > first_tail && kept[tail - 1])
                tail--;
            if (tail == first_tail)
                return false;
            at = plan.row.begin() + --tail;
        }
        *at = w;
        kept[at - plan.row.begin()] = 1;
        return true;
    };
    /* first-half neighbours with no edge the new node detours: their rows
     * and distances to their edges' targets, as the first pass read them */
    struct Unlinked {
        uint32_t node;
        std::vector<uint32_t> row;
        std::vector<float> from_b;
    };
    std::vector<Unlinked> unlinked;
    for (uint32_t j = 0; j < degree && neighbours[j] != kInvalidNode; j++) {
        const uint32_t b = neighbours[j];
        const uint32_t *b_row = g.neighbors(b, row_scratch.data());
        if (std::find(b_row, b_row + degree, new_id) != b_row + degree)
            continue; /* an edge from before the slot was taken again */
        uint32_t slot = kInvalidNode;
        for (uint32_t s = 0; s < degree && slot == kInvalidNode; s++)
            if (b_row[s] == kInvalidNode)
                slot = s;
        if (reverse_edge_is_measured(j, degree, b_row, new_id)) {
            ids.assign(b_row, b_row + degree);
            b_row = ids.data(); /* measuring may read other rows */
            const NeighbourDistances &d = measure(b, ids);
            const std::vector<float> &from_b = d.from_b, &from_new = d.from_new;
            for (uint32_t s = 0; s < degree; s++)
                if (d.to_new < from_b[s] && from_new[s] < from_b[s] &&
                    (slot == kInvalidNode || from_b[s] > from_b[slot]))
                    slot = s;
            if (slot == kInvalidNode && j == 0) {
                /* the smallest d(new, w) / d(b, w) */
                slot = 0;
                for (uint32_t s = 1; s < degree; s++)
                    if (from_new[s] * from_b[slot] < from_new[slot] * from_b[s])
                        slot = s;
            }
            if (slot == kInvalidNode)
                unlinked.push_back({b, ids, from_b});
        }
        /* the first hand-off always finds a place: nothing is kept yet */
        if (slot != kInvalidNode && hand_off(b_row[slot]))
            plan.updates.push_back({b, slot, new_id, b_row[slot]});
    }
    for (const Unlinked &u : unlinked) {
        if (plan.updates.size() >= half / 2)
            break;
        const uint32_t slot = edge_reached_again(g, u.row.data(), degree, u.from_b.data());
        if (slot != kInvalidNode && hand_off(u.row[slot]))
            plan.updates.push_back({u.node, slot, new_id, u.row[slot]});
    }
    return plan;
}

} // namespace detail

template <class Accessor>
std::vector<uint32_t> neighbours_to_measure(const Accessor &g, uint32_t new_id, const std::vector<uint32_t> &row)
{
    const uint32_t degree = g.degree();
    std::vector<uint32_t> scratch(degree), out;
    for (uint32_t j = 0; j < degree && row[j] != kInvalidNode; j++)
        if (detail::reverse_edge_is_measured(j, degree, g.neighbors(row[j], scratch.data()), new_id))
            out.push_back(row[j]);
    return out;
}

template <class Accessor>
InsertPlan plan_insert_measured(const Accessor &g, uint32_t new_id, std::vector<uint32_t> row,
                                const std::vector<NeighbourDistances> &measured)
{
    size_t next = 0;
    return detail::plan_reverse_edges(g, new_id, std::move(row),
                                      [&](uint32_t, const std::vector<uint32_t> &) -> const NeighbourDistances & {
                                          if (next >= measured.size())
                                              throw std::invalid_argument("fewer neighbour distances than neighbours to measure");
                                          return measured[next++];
                                      });
}

template <class Accessor>
InsertPlan plan_insert_from(const Accessor &g, const float *vec, uint32_t new_id, const std::vector<Neighbor> &cands)
{
    const MetricKernel dist = metric_kernel(g.metric());
    const uint32_t dim = g.dim(), degree = g.degree();
    std::vector<float> vec_scratch(dim);
    NeighbourDistances d;
    d.from_b.resize(degree);
    d.from_new.resize(degree);
    return detail::plan_reverse_edges(g, new_id, insert_row(g, cands),
                                      [&](uint32_t b, const std::vector<uint32_t> &ids) -> const NeighbourDistances & {
                                          const float *vb = g.vector(b, vec_scratch.data());
                                          d.to_new = dist(vb, vec, dim);
                                          g.distances(vb, ids.data(), degree, d.from_b.data());
                                          g.distances(vec, ids.data(), degree, d.from_new.data());
                                          return d;
                                      });
}

template <class Accessor, class Removed>
std::vector<RowRewrite> plan_repair(const Accessor &g, Removed &&removed, const SearchParams &params,
                                    const std::vector<uint32_t> &entry_nodes, uint32_t first, uint32_t last)
{
    validate_search_params(params, 0);
    last = std::min(last, g.size());
    const uint32_t degree = g.degree();
    const uint32_t dim = g.dim();
    const MetricKernel dist = metric_kernel(g.metric());

    /* The rows to repair, their kept edges and their candidates so far, and
     * for each removed node the rows that point at it. */
    struct Pending {
        uint32_t node;
        std::vector<uint32_t> keep;
        std::vector<Neighbor> cands;
    };
    std::vector<Pending> rows;
    std::vector<std::pair<uint32_t, uint32_t>> pointing; /* (removed node, index in rows) */
    std::vector<uint32_t> scratch(degree);
    for (uint32_t a = first; a < last; a++) {
        if (removed(a))
            continue;
        const uint32_t *row = g.neighbors(a, scratch.data());
        Pending p{a, {}, {}};
        bool touched = false;
        for (uint32_t j = 0; j < degree; j++) {
            if (row[j] == kInvalidNode)
                continue;
            if (removed(row[j])) {
                pointing.push_back({row[j], (uint32_t)rows.size()});
                touched = true;
            } else
                p.keep.push_back(row[j]);
        }
        if (touched)
            rows.push_back(std::move(p));
    }
    std::sort(pointing.begin(), pointing.end());
    pointing.erase(std::unique(pointing.begin(), pointing.end()), pointing.end());

    /* Candidates: the live neighbours of the removed neighbours, measured
     * removed node by removed node: the vectors of its live neighbours and
     * of the rows that point at it are read once for all those pairs, and
     * stay in cache while they are measured. */
    std::vector<uint32_t> live;
    std::vector<float> live_vecs, va_scratch(dim);
    for (size_t i = 0; i < pointing.size();) {
        const uint32_t r = pointing[i].first;
        const uint32_t *rrow = g.neighbors(r, scratch.data());
        live.clear();
        for (uint32_t j = 0; j < degree; j++)
            if (rrow[j] != kInvalidNode && !removed(rrow[j]) &&
                std::find(live.begin(), live.end(), rrow[j]) == live.end())
                live.push_back(rrow[j]);
        live_vecs.resize((size_t)live.size() * dim);
        for (size_t c = 0; c < live.size(); c++) {
            float *dst = &live_vecs[c * dim];
            const float *v = g.vector(live[c], dst);
            if (v != dst)
                std::copy(v, v + dim, dst);
        }
        for (; i < pointing.size() && pointing[i].first == r; i++) {
            Pending &p = rows[pointing[i].second];
            const float *va = nullptr;
            for (size_t c = 0; c < live.size(); c++) {
                const uint32_t v = live[c];
                if (v == p.node || std::find(p.keep.begin(), p.keep.end(), v) != p.keep.end() ||
                    std::find_if(p.cands.begin(), p.cands.end(), [v](const Neighbor &x) { return x.id == v; }) !=
                        p.cands.end())
                    continue;
                if (!va)
                    va = g.vector(p.node, va_scratch.data());
                p.cands.push_back({v, dist(va, &live_vecs[c * dim], dim)});
            }
        }
    }

    std::vector<RowRewrite> out;
    out.reserve(rows.size());
    for (Pending &p : rows) {
        const uint32_t need = degree - (uint32_t)p.keep.size();
        if (p.cands.size() < need) {
            /* Too few: search from the row's own vector for more live nodes. */
            auto usable = [&](uint32_t v) {
                return v != kInvalidNode && v != p.node && !removed(v) &&
                       std::find(p.keep.begin(), p.keep.end(), v) == p.keep.end() &&
                       std::find_if(p.cands.begin(), p.cands.end(), [v](const Neighbor &x) { return x.id == v; }) ==
                           p.cands.end();
            };
            const float *va = g.vector(p.node, va_scratch.data());
            SearchParams sp = candidate_search_params(params, 2 * need);
            Searcher<Accessor> s(g, va, sp, entry_nodes);
            std::vector<Neighbor> more(std::min(2 * need, sp.itopk_size));
            more.resize(s.next((uint32_t)more.size(), usable, more.data()));
            p.cands.insert(p.cands.end(), more.begin(), more.end());
        }
        std::sort(p.cands.begin(), p.cands.end(), [](const Neighbor &x, const Neighbor &y) {
            return x.distance < y.distance || (x.distance == y.distance && x.id < y.id);
        });
        RowRewrite rw{p.node, std::move(p.keep)};
        for (size_t i = 0; i < p.cands.size() && rw.row.size() < degree; i++)
            rw.row.push_back(p.cands[i].id);
        rw.row.resize(degree, kInvalidNode);
        out.push_back(std::move(rw));
    }
    return out;
}

template <class Accessor, class Removed>
std::vector<RowRewrite> plan_near_ways_in(const Accessor &g, Removed &&removed)
{
    const uint32_t n = g.size();
    const uint32_t degree = g.degree();
    detail::RowLinks<Accessor, std::remove_reference_t<Removed>> links(g, removed);
    std::vector<uint32_t> removed_row(degree), target_row(degree);
    for (uint32_t r = 0; r < n; r++) {
        if (!removed(r))
            continue;
        const uint32_t *rr = links.row(r);
        removed_row.assign(rr, rr + degree);
        for (uint32_t x : removed_row) {
            if (!links.follows(x))
                continue;
            const uint32_t *xr = links.row(x);
            target_row.assign(xr, xr + degree);
            /* x's own row holds the nodes near it: one that leads back to x
             * is a nearby way in */
            bool entered_near = false;
            for (uint32_t y : target_row)
                if (!entered_near && links.follows(y)) {
                    const uint32_t *yr = links.row(y);
                    entered_near = std::find(yr, yr + degree, x) != yr + degree;
                }
            for (uint32_t y : target_row)
                if (!entered_near && links.follows(y))
                    entered_near = links.link(y, x);
        }
    }
    return links.rewrites();
}

template <class Accessor, class Removed>
std::vector<RowRewrite> plan_reconnect(const Accessor &g, Removed &&removed, const SearchParams &params,
                                       const std::vector<uint32_t> &entry_nodes)
{
    validate_search_params(params, 0);
    const uint32_t n = g.size();
    const uint32_t degree = g.degree();
    std::vector<uint32_t> starts;
    for (uint32_t e : entry_nodes)
        if (e < n && !removed(e) && std::find(starts.begin(), starts.end(), e) == starts.end())
            starts.push_back(e);
    if (starts.empty())
        return {};

    detail::RowLinks<Accessor, std::remove_reference_t<Removed>> links(g, removed);
    auto follows = [&](uint32_t w) { return links.follows(w); };
    auto row_of = [&](uint32_t v) { return links.row(v); };

    uint32_t live = 0;
    for (uint32_t v = 0; v < n; v++)
        live += removed(v) ? 0 : 1;

    /* Per node only bits, so that the memory is a few bits a node: whether
     * it is reached, whether its row is still to be read, and the ways in
     * of RowLinks. */
    detail::NodeBits reached(n), frontier(n);
    uint32_t reached_count = 0;
    auto reach = [&](uint32_t v) {
        if (!reached.test(v)) {
            reached.set(v);
            frontier.set(v);
            reached_count++;
        }
    };
    /* Reads the rows of the frontier in id order, which is page order, each
     * once; a sweep goes again while it reached nodes behind itself. */
    auto spread = [&] {
        for (bool again = true; again;) {
            again = false;
            for (size_t wi = 0; wi < frontier.words.size(); wi++)
                while (frontier.words[wi] != 0) {
                    const uint32_t v = (uint32_t)(wi * 64 + (uint32_t)__builtin_ctzll(frontier.words[wi]));
                    frontier.reset(v);
                    const uint32_t *row = row_of(v);
                    for (uint32_t j = 0; j < degree; j++)
                        if (follows(row[j]) && !reached.test(row[j])) {
                            reach(row[j]);
                            again |= row[j] / 64 < wi;
                        }
                }
        }
    };

    const SearchParams sp = candidate_search_params(params, 32);
    std::vector<float> vec_scratch(g.dim());
    std::vector<Neighbor> near(std::min<uint32_t>(32, sp.itopk_size));
    /* a link may cut off the target it replaced: walk again, a few times */
    for (int pass = 0; pass < 8; pass++) {
        reached.clear();
        reached_count = 0;
        for (uint32_t e : starts)
            reach(e);
        spread();
        if (reached_count == live)
            break;
        for (uint32_t u = 0; u < n; u++) {
            if (removed(u) || reached.test(u))
                continue;
            auto accept = [&](uint32_t id) { return id < n && reached.test(id) && !removed(id); };
            const float *vu = g.vector(u, vec_scratch.data());
            if (vu != vec_scratch.data()) /* the search reads pages: keep the query */
                std::copy(vu, vu + g.dim(), vec_scratch.begin());
            vu = vec_scratch.data();
            Searcher<Accessor> s(g, vu, sp, starts);
            std::vector<Neighbor> found(near.begin(),
                                        near.begin() + s.next((uint32_t)near.size(), accept, near.data()));
            if (found.empty())
                found = detail::exhaustive_candidates(g, vu, accept, (uint32_t)near.size());
            bool linked = false;
            for (size_t c = 0; c < found.size() && !linked; c++)
                linked = links.link(found[c].id, u);
            if (linked) {
                reach(u);
                spread();
            }
        }
    }

    return links.rewrites();
}

} // namespace cagra
