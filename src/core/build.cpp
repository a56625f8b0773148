/*
 * build.cpp — build_graph: validation, the kNN graph, the CAGRA
 * optimisation, the small-n cases and the choice of fixed entry nodes.
 */
#include <algorithm>
#include <new>

#include "build.h"
#include "distance.h"
#include "parallel.h"

namespace cagra {
namespace {

/* Below this many vectors the exact kNN graph is cheaper than NN-descent. */
constexpr uint64_t kBruteForceBelow = 2048;
constexpr uint64_t kEntrySample = 4096;

/* About 2 sqrt(n) fixed entries, at most kMaxEntryNodes: enough that each
 * cluster of a set of well-separated clusters owns one (the kNN graph has no
 * edge between such clusters, so a search can only start inside them), and
 * cheap next to a search (one distance each). */
constexpr uint64_t kMaxEntryNodes = 384;
static_assert(kMaxEntryNodes <= kMaxStoredEntries, "an index must be able to keep every entry a build picks");

uint64_t entry_count(uint64_t n)
{
    uint64_t e = 8;
    while (e * e < 4 * n && e < kMaxEntryNodes)
        e += 8;
    return std::min(e, n);
}

/* n <= degree: every row holds all other nodes, closest first, then
 * kInvalidNode padding. */
Graph small_graph(const DatasetView &data, Metric metric, uint32_t degree)
{
    const MetricKernel dist = metric_kernel(metric);
    Graph g;
    g.degree = degree;
    g.edges.assign(data.n * degree, kInvalidNode);
    std::vector<std::pair<float, uint32_t>> row;
    for (uint64_t a = 0; a < data.n; a++) {
        row.clear();
        for (uint64_t b = 0; b < data.n; b++)
            if (b != a)
                row.push_back({detail::sortable(dist(data.row(a), data.row(b), data.dim)), (uint32_t)b});
        std::sort(row.begin(), row.end());
        for (size_t j = 0; j < row.size(); j++)
            g.row(a)[j] = row[j].second;
    }
    return g;
}

/*
 * Fixed entry nodes: the node closest to the mean of the data (a medoid-like
 * start that is central for most queries), then nodes picked by farthest-
 * point traversal over a seeded sample, so that each cluster of a clustered
 * set tends to own an entry.  Random entries are added per search.
 */
std::vector<uint32_t> choose_entry_nodes(const DatasetView &data, Metric metric, uint64_t seed)
{
    const MetricKernel dist = metric_kernel(metric);
    std::vector<double> mean(data.dim, 0.0);
    for (uint64_t i = 0; i < data.n; i++)
        for (uint32_t j = 0; j < data.dim; j++)
            mean[j] += data.row(i)[j];
    std::vector<float> centre(data.dim);
    for (uint32_t j = 0; j < data.dim; j++)
        centre[j] = (float)(mean[j] / (double)data.n);

    uint32_t first = 0;
    float best = l2_squared(data.row(0), centre.data(), data.dim);
    for (uint64_t i = 1; i < data.n; i++) {
        float d = l2_squared(data.row(i), centre.data(), data.dim);
        if (d < best) {
            best = d;
            first = (uint32_t)i;
        }
    }
    std::vector<uint32_t> entries{first};

    uint64_t count = entry_count(data.n);
    if (count <= 1)
        return entries;
    detail::Rng rng(seed ^ 0xe7e7);
    std::vector<uint32_t> sample;
    for (uint64_t i = 0; i < std::min(kEntrySample, data.n); i++)
        sample.push_back(data.n <= kEntrySample ? (uint32_t)i : (uint32_t)rng.below(data.n));
    std::vector<float> nearest(sample.size());
    for (size_t s = 0; s < sample.size(); s++)
        nearest[s] = dist(data.row(sample[s]), data.row(first), data.dim);
    while (entries.size() < count) {
        size_t far = 0;
        for (size_t s = 1; s < sample.size(); s++)
            if (nearest[s] > nearest[far])
                far = s;
        uint32_t id = sample[far];
        if (std::find(entries.begin(), entries.end(), id) != entries.end())
            break; /* every sampled node is already an entry */
        entries.push_back(id);
        for (size_t s = 0; s < sample.size(); s++)
            nearest[s] = std::min(nearest[s], dist(data.row(sample[s]), data.row(id), data.dim));
    }
    return entries;
}

BuiltGraph build_graph_in_order(const DatasetView &data, Metric metric, const BuildParams &params,
                                BuildProgress *progress)
{
    BuiltGraph out;
    if (data.n <= params.graph_degree) {
        out.graph = small_graph(data, metric, params.graph_degree);
    } else {
        KnnGraph knn;
        if (data.n < kBruteForceBelow) {
            uint32_t k = (uint32_t)std::min<uint64_t>(params.intermediate_degree, data.n - 1);
            if (progress)
                progress->phase.store((uint32_t)BuildPhase::KnnGraph);
            knn = brute_force_knn(data, metric, k, params.threads);
        } else {
            knn = nn_descent(data, metric, params, progress);
        }
        detail::throw_if_cancelled(progress);
        out.graph = optimize_graph(knn, params.graph_degree, params.threads, progress);
    }
    detail::throw_if_cancelled(progress);
    out.entry_nodes = choose_entry_nodes(data, metric, params.seed);
    connect_graph(out.graph, data, metric, out.entry_nodes, progress);
    return out;
}

/*
 * Build on a copy of the data renumbered in the leaf order of a random-
 * projection tree, so that near neighbours mostly sit near each other in
 * memory: the NN-descent join, the pruning and the linking then mostly hit
 * the cache instead of main memory.  The graph is mapped back at the end.
 * Costs one copy of the vectors during the build.
 */
BuiltGraph build_unchecked(const DatasetView &data, Metric metric, const BuildParams &params,
                           BuildProgress *progress)
{
    if (data.n < kBruteForceBelow)
        return build_graph_in_order(data, metric, params, progress);
    const uint64_t n = data.n;
    const uint32_t dim = data.dim;
    std::vector<uint32_t> order;
    std::vector<std::pair<uint64_t, uint64_t>> leaves;
    detail::rp_tree_leaves(data, 256, params.seed ^ 0x10ca1, progress, order, leaves);
    std::vector<float> copy(n * dim);
    detail::parallel_for(n, 4096, params.threads, progress, [&](uint64_t begin, uint64_t end, uint32_t) {
        for (uint64_t i = begin; i < end; i++)
            std::copy(data.row(order[i]), data.row(order[i]) + dim, &copy[i * dim]);
    });
    BuiltGraph local = build_graph_in_order(DatasetView{copy.data(), n, dim}, metric, params, progress);
    copy = std::vector<float>();

    BuiltGraph out;
    out.graph.degree = local.graph.degree;
    out.graph.edges.resize(local.graph.edges.size());
    for (uint64_t i = 0; i < n; i++) {
        const uint32_t *src = local.graph.row(i);
        uint32_t *dst = out.graph.row(order[i]);
        for (uint32_t j = 0; j < out.graph.degree; j++)
            dst[j] = src[j] == kInvalidNode ? kInvalidNode : order[src[j]];
    }
    for (uint32_t e : local.entry_nodes)
        out.entry_nodes.push_back(order[e]);
    return out;
}

} // namespace

BuiltGraph build_graph(const DatasetView &data, Metric metric, const BuildParams &params, BuildProgress *progress)
{
    if (progress)
        progress->phase.store((uint32_t)BuildPhase::Validating);
    validate_build_params(params);
    validate_dataset(data);
    if (!metric_is_valid((uint32_t)metric))
        throw Error(ErrorCode::InvalidParameter, "unknown metric " + std::to_string((uint32_t)metric));
    detail::throw_if_cancelled(progress);
    BuiltGraph out;
    try {
        out = build_unchecked(data, metric, params, progress);
    } catch (const std::bad_alloc &) {
        throw Error(ErrorCode::OutOfMemory, "out of memory while building the graph of " + std::to_string(data.n) +
                                                " vectors",
                    "Lower graph_degree or intermediate_graph_degree, or build with more memory.");
    }
    if (progress)
        progress->phase.store((uint32_t)BuildPhase::Done);
    return out;
}

} // namespace cagra
