/*
 * entry_index.h — a two-level index over the fixed entry nodes, so a search
 * measures a few of them instead of all.
 *
 * The entry list (up to 1,024 nodes, farthest-point order) is split into
 * groups: about 2 sqrt(E) pivots picked by farthest-point traversal among
 * the entries, from the first (the build's central node), which is then no
 * pivot itself: at high intrinsic dimension it is the nearest pivot of
 * nearly every entry and its group would hold them all.  Every other entry
 * joins the group of its nearest pivot and of its second nearest (an entry
 * near a boundary between two groups is then found from either side).  A search measures the pivots, then only
 * the members of the `entry_probes` groups whose pivots are closest to the
 * query (SearchParams::entry_probes).
 *
 * It is derived from (entry list, vectors) alone, deterministically, with
 * about 2 * pivots * E distances (c100k: ~30,000, well under a millisecond),
 * so callers that store only the entry list (index pages, the GPU upload)
 * derive it once and cache it next to the list; no storage format changes.
 */
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "types.h"

namespace cagra {

struct EntryIndex {
    std::vector<uint32_t> pivots;      /* measured by every search */
    std::vector<uint32_t> group_begin; /* pivots.size() + 1 offsets into members */
    std::vector<uint32_t> members;     /* group t: members[group_begin[t] .. group_begin[t + 1]) */
    uint32_t entry_count = 0;          /* distinct valid entries indexed (pivots included) */

    bool empty() const { return pivots.empty(); }
};

namespace detail {

/* Entries below this count are all pivots: grouping would save little. */
constexpr uint32_t kEntryGroupingFrom = 48;

/* Valid (< n), distinct entries, in their first order. */
std::vector<uint32_t> distinct_entries(const std::vector<uint32_t> &entries, uint32_t n);

/* Pivots for `count` entries: about 2 sqrt(count). */
uint32_t entry_pivot_count(uint32_t count);

/* The groups from the pivot x entry distance matrix (row t: distances from
 * pivot t to every entry); `pivot_pos` are the pivots' positions in `ids`. */
EntryIndex group_entries(const std::vector<uint32_t> &ids, const std::vector<uint32_t> &pivot_pos,
                         const std::vector<float> &matrix);

} // namespace detail

/* The entry index of `entries` over the graph's vectors (any Accessor of
 * search.h).  Ids >= size() and repeats are skipped. */
template <class Accessor>
EntryIndex derive_entry_index(const Accessor &g, const std::vector<uint32_t> &entries)
{
    std::vector<uint32_t> ids = detail::distinct_entries(entries, g.size());
    const uint32_t count = (uint32_t)ids.size();
    EntryIndex out;
    out.entry_count = count;
    if (count < detail::kEntryGroupingFrom) {
        out.pivots = ids;
        out.group_begin.assign(count + 1, 0);
        return out;
    }
    const uint32_t want = detail::entry_pivot_count(count);
    std::vector<float> scratch(g.dim());
    std::vector<float> matrix;
    matrix.reserve((size_t)want * count);
    std::vector<float> nearest(count, std::numeric_limits<float>::infinity());
    std::vector<uint32_t> pivot_pos;
    /* Farthest-point traversal from the first entry (the build's most
     * central node): pivots spread over the entries whatever their order. */
    uint32_t next = 0;
    while (pivot_pos.size() < want) {
        pivot_pos.push_back(next);
        const float *v = g.vector(ids[next], scratch.data());
        size_t row = matrix.size();
        matrix.resize(row + count);
        g.distances(v, ids.data(), count, &matrix[row]);
        uint32_t far = 0;
        float far_d = -1;
        for (uint32_t e = 0; e < count; e++) {
            float d = matrix[row + e];
            if (d != d)
                d = std::numeric_limits<float>::infinity();
            nearest[e] = std::min(nearest[e], d);
            if (nearest[e] > far_d) {
                far_d = nearest[e];
                far = e;
            }
        }
        if (std::find(pivot_pos.begin(), pivot_pos.end(), far) != pivot_pos.end())
            break; /* every entry coincides with a pivot */
        next = far;
    }
    /* the central entry starts the traversal but is no pivot: at high
     * intrinsic dimension it is the nearest pivot of nearly every entry */
    if (pivot_pos.size() > 2) {
        pivot_pos.erase(pivot_pos.begin());
        matrix.erase(matrix.begin(), matrix.begin() + count);
    }
    return detail::group_entries(ids, pivot_pos, matrix);
}

} // namespace cagra
