/*
 * optimize.cpp — turning a kNN graph into the CAGRA search graph
 * (Ootomo et al., CAGRA, sec. III-B): rank-based pruning by detour counting,
 * reverse edges, and the merge of both to graph_degree.
 *
 * Detour rule (the paper's, both rank conditions): the edge A->B at rank r in
 * A's list is detourable through D at rank i < r when B appears in D's list
 * at a rank below r, i.e. max(rank(A,D), rank(D,B)) < rank(A,B).  Edges are
 * kept in order of fewest detours, ties by rank.
 */
#include <algorithm>
#include <atomic>
#include <memory>

#include "optimize.h"
#include "parallel.h"

namespace cagra {
namespace {

/* Row A of `pruned`: the degree edges of A's kNN list with the fewest
 * detours.  rank_of is a per-thread array over all nodes, 0 except for the
 * members of A's list while A is processed (rank 0 can never be detoured,
 * so 0 doubles as "absent"): one load and no branch per lookup. */
void prune_row(const KnnGraph &knn, uint64_t a, uint32_t degree, std::vector<uint16_t> &rank_of,
               std::vector<uint32_t> &detours, std::vector<uint32_t> &order, uint32_t *out)
{
    const uint32_t k = knn.k;
    const uint32_t *row = &knn.ids[a * k];
    for (uint32_t r = 0; r < k; r++)
        rank_of[row[r]] = r;
    std::fill(detours.begin(), detours.end(), 0);
    for (uint32_t i = 0; i + 1 < k; i++) {
        if (i + 2 < k)
            __builtin_prefetch(&knn.ids[(uint64_t)row[i + 2] * k]);
        const uint32_t *drow = &knn.ids[(uint64_t)row[i] * k];
        /* rank(D,B) < r <= k-1, so D's last entry can never count. */
        for (uint32_t kdb = 0; kdb + 1 < k; kdb++) {
            uint32_t r = rank_of[drow[kdb]];
            detours[r] += (r > i) & (kdb < r);
        }
    }
    for (uint32_t r = 0; r < k; r++)
        rank_of[row[r]] = 0;
    /* Stable counting sort by detours (at most k - 1 of them): ties stay
     * in rank order, and nothing is allocated per row. */
    std::fill(order.begin(), order.end(), 0);
    for (uint32_t r = 0; r < k; r++)
        order[detours[r]]++;
    for (uint32_t c = 0, start = 0; c < k; c++) {
        uint32_t count = order[c];
        order[c] = start;
        start += count;
    }
    for (uint32_t r = 0; r < k; r++) {
        uint32_t pos = order[detours[r]]++;
        if (pos < degree)
            out[pos] = row[r];
    }
}

} // namespace

Graph optimize_graph(const KnnGraph &knn, uint32_t degree, uint32_t threads, BuildProgress *progress)
{
    const uint64_t n = knn.size();
    const uint32_t k = knn.k;
    if (degree < 2 || degree > k)
        throw Error(ErrorCode::InvalidParameter, "graph_degree (" + std::to_string(degree) +
                                                     ") must be between 2 and the kNN degree (" + std::to_string(k) +
                                                     ")");
    threads = std::max(threads, 1u);
    if (progress) {
        progress->phase.store((uint32_t)BuildPhase::Pruning);
        progress->total.store(2 * n);
        progress->done.store(0);
    }

    /* 1. Prune every kNN row to `degree` edges. */
    std::vector<uint32_t> pruned(n * degree);
    std::vector<std::vector<uint16_t>> rank_of(threads, std::vector<uint16_t>(n, 0));
    detail::parallel_for(n, 256, threads, progress, [&](uint64_t begin, uint64_t end, uint32_t t) {
        std::vector<uint32_t> detours(k), order(k);
        for (uint64_t a = begin; a < end; a++)
            prune_row(knn, a, degree, rank_of[t], detours, order, &pruned[a * degree]);
        if (progress)
            progress->done.fetch_add(end - begin, std::memory_order_relaxed);
    });

    /* 2. Reverse edges, added rank by rank so that each node's reverse list
     *    holds the sources for which it ranks highest. */
    std::vector<uint32_t> reverse(n * degree);
    std::unique_ptr<std::atomic<uint32_t>[]> rcount(new std::atomic<uint32_t>[n]);
    for (uint64_t i = 0; i < n; i++)
        rcount[i].store(0, std::memory_order_relaxed);
    for (uint32_t r = 0; r < degree; r++) {
        detail::parallel_for(n, 4096, threads, progress, [&](uint64_t begin, uint64_t end, uint32_t) {
            for (uint64_t a = begin; a < end; a++) {
                uint32_t b = pruned[a * degree + r];
                uint32_t c = rcount[b].load(std::memory_order_relaxed);
                while (c < degree && !rcount[b].compare_exchange_weak(c, c + 1, std::memory_order_relaxed))
                    ;
                if (c < degree)
                    reverse[(uint64_t)b * degree + c] = (uint32_t)a;
            }
        });
    }

    /* 3. Merge: the first half of the pruned row, then reverse edges, then
     *    the rest of the pruned row; no duplicates. */
    Graph g;
    g.degree = degree;
    g.edges.resize(n * degree);
    const uint32_t half = degree / 2;
    detail::parallel_for(n, 1024, threads, progress, [&](uint64_t begin, uint64_t end, uint32_t) {
        for (uint64_t a = begin; a < end; a++) {
            const uint32_t *fw = &pruned[a * degree];
            const uint32_t *rv = &reverse[a * degree];
            uint32_t *out = g.row(a);
            uint32_t filled = 0;
            auto present = [&](uint32_t v) {
                for (uint32_t j = 0; j < filled; j++)
                    if (out[j] == v)
                        return true;
                return false;
            };
            for (uint32_t j = 0; j < half; j++)
                out[filled++] = fw[j];
            uint32_t nrev = std::min(rcount[a].load(std::memory_order_relaxed), degree);
            for (uint32_t j = 0; j < nrev && filled < degree; j++)
                if (!present(rv[j]))
                    out[filled++] = rv[j];
            for (uint32_t j = half; j < degree && filled < degree; j++)
                if (!present(fw[j]))
                    out[filled++] = fw[j];
        }
        if (progress)
            progress->done.fetch_add(end - begin, std::memory_order_relaxed);
    });
    return g;
}

} // namespace cagra
