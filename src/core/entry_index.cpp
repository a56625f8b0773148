/*
 * entry_index.cpp — the non-template parts of the entry index: the entry
 * list's cleaning, the pivot count and the grouping (entry_index.h).
 */
#include "entry_index.h"

namespace cagra {
namespace detail {

std::vector<uint32_t> distinct_entries(const std::vector<uint32_t> &entries, uint32_t n)
{
    std::vector<uint32_t> sorted;
    std::vector<uint32_t> out;
    out.reserve(entries.size());
    for (uint32_t e : entries) {
        if (e >= n)
            continue;
        auto it = std::lower_bound(sorted.begin(), sorted.end(), e);
        if (it != sorted.end() && *it == e)
            continue;
        sorted.insert(it, e);
        out.push_back(e);
    }
    return out;
}

uint32_t entry_pivot_count(uint32_t count)
{
    return std::min<uint32_t>(count, (uint32_t)std::ceil(2.0 * std::sqrt((double)count)));
}

EntryIndex group_entries(const std::vector<uint32_t> &ids, const std::vector<uint32_t> &pivot_pos,
                         const std::vector<float> &matrix)
{
    const uint32_t count = (uint32_t)ids.size();
    const uint32_t pivots = (uint32_t)pivot_pos.size();
    EntryIndex out;
    out.entry_count = count;
    std::vector<uint8_t> is_pivot(count, 0);
    for (uint32_t p : pivot_pos) {
        is_pivot[p] = 1;
        out.pivots.push_back(ids[p]);
    }
    /* Each other entry joins the groups of its two nearest pivots (ties to
     * the earlier pivot), so the grouping is a function of the inputs. */
    std::vector<std::vector<uint32_t>> groups(pivots);
    auto sortable = [](float d) { return d == d ? d : std::numeric_limits<float>::infinity(); };
    for (uint32_t e = 0; e < count; e++) {
        if (is_pivot[e])
            continue;
        uint32_t best = 0, second = pivots;
        for (uint32_t t = 1; t < pivots; t++) {
            float d = sortable(matrix[(size_t)t * count + e]);
            if (d < sortable(matrix[(size_t)best * count + e])) {
                second = best;
                best = t;
            } else if (second == pivots || d < sortable(matrix[(size_t)second * count + e])) {
                second = t;
            }
        }
        groups[best].push_back(ids[e]);
        if (second < pivots)
            groups[second].push_back(ids[e]);
    }
    out.group_begin.push_back(0);
    for (auto &grp : groups) {
        out.members.insert(out.members.end(), grp.begin(), grp.end());
        out.group_begin.push_back((uint32_t)out.members.size());
    }
    return out;
}

} // namespace detail
} // namespace cagra
