/*
 * connect.cpp — connect_graph: make every node reachable from the first
 * entry node, after the idea of NSG's spanning step (Fu et al. 2019), but
 * with a fixed degree: a link replaces an edge instead of being appended.
 *
 * The replaced edge is taken from the end of the row (the merge puts the
 * least important forward edges there) and only when its target has other
 * in-edges, so a link rarely cuts off another node; a final pass checks
 * reachability again and repeats the whole procedure for what is left.
 */
#include <algorithm>
#include <deque>

#include "connect.h"
#include "parallel.h"
#include "search.h"

namespace cagra {
namespace {

/* Mark everything reachable from `start` (not yet marked); returns how many. */
uint64_t mark_reachable(const Graph &g, uint32_t start, std::vector<uint8_t> &reached, std::deque<uint32_t> &queue)
{
    if (reached[start])
        return 0;
    uint64_t count = 1;
    reached[start] = 1;
    queue.push_back(start);
    while (!queue.empty()) {
        uint32_t v = queue.front();
        queue.pop_front();
        const uint32_t *row = g.row(v);
        for (uint32_t j = 0; j < g.degree; j++) {
            uint32_t w = row[j];
            if (w != kInvalidNode && !reached[w]) {
                reached[w] = 1;
                queue.push_back(w);
                count++;
            }
        }
    }
    return count;
}

} // namespace

uint64_t connect_graph(Graph &g, const DatasetView &data, Metric metric, const std::vector<uint32_t> &entry_nodes,
                       BuildProgress *progress)
{
    const uint64_t n = g.size();
    const uint32_t degree = g.degree;
    if (n <= degree || entry_nodes.empty())
        return 0; /* rows hold every other node already */
    InMemoryGraph acc(g, data, metric);
    std::vector<uint32_t> in_degree(n, 0);
    for (uint32_t e : g.edges)
        if (e != kInvalidNode)
            in_degree[e]++;
    std::vector<uint8_t> links(n, 0); /* links added into each row */
    const std::vector<uint32_t> start{entry_nodes[0]};
    SearchParams sp;
    sp.itopk_size = 64;
    sp.search_width = 1;
    sp.random_entries = 0;
    std::vector<Neighbor> near(32);
    std::deque<uint32_t> queue;
    uint64_t added = 0;

    for (int pass = 0; pass < 8; pass++) {
        std::vector<uint8_t> reached(n, 0);
        uint64_t count = mark_reachable(g, entry_nodes[0], reached, queue);
        if (count == n)
            break;
        for (uint64_t u = 0; u < n; u++) {
            if (reached[u])
                continue;
            detail::throw_if_cancelled(progress);
            Searcher<InMemoryGraph> s(acc, data.row(u), sp, start);
            uint32_t found = s.next((uint32_t)near.size(), [&](uint32_t id) { return reached[id] != 0; }, near.data());
            bool linked = false;
            for (uint32_t c = 0; c < found && !linked; c++) {
                uint32_t r = near[c].id;
                if (links[r] >= degree / 2)
                    continue;
                uint32_t *row = g.row(r);
                /* The last slot (not already a link) whose target keeps another in-edge. */
                for (uint32_t j = degree - 1 - links[r]; j + 1 > 0 && !linked; j--) {
                    uint32_t old = row[j];
                    if (old == u)
                        break; /* cannot happen for an unreached u; stay safe */
                    if (old != kInvalidNode && in_degree[old] < 2)
                        continue;
                    /* Keep the links of this row packed at its end. */
                    uint32_t last = degree - 1 - links[r];
                    std::swap(row[j], row[last]);
                    if (row[last] != kInvalidNode)
                        in_degree[row[last]]--;
                    row[last] = (uint32_t)u;
                    in_degree[u]++;
                    links[r]++;
                    linked = true;
                }
            }
            if (!linked)
                continue; /* retried by the next pass */
            added++;
            mark_reachable(g, (uint32_t)u, reached, queue);
        }
    }
    return added;
}

} // namespace cagra
