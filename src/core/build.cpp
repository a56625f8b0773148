/*
 * build.cpp — build_graph: validation, the kNN graph, the CAGRA
 * optimisation, the small-n cases, the choice of fixed entry nodes, the
 * navigation probe and the long edges.
 */
#include <algorithm>
#include <atomic>
#include <new>
#include <numeric>

#include "build.h"
#include "distance.h"
#include "parallel.h"
#include "entry_index.h"
#include "inner_product_graph.h"
#include "search.h"

namespace cagra {
namespace {

/* Below this many vectors the exact kNN graph is cheaper than NN-descent. */
constexpr uint64_t kBruteForceBelow = 2048;
constexpr uint64_t kEntrySample = 4096;

/* A level's 3k candidate lists are exact below this many nodes: NN-descent
 * with k = 192 (24 samples a node, about 17,000 distances a node over its
 * iterations, scattered, each list update a search of a long row) is slower
 * there than the m distances a node of a blocked matrix product
 * (brute_force_knn), whose cost grows with m.  200,000 x 256 in 1,024
 * clusters, 2 threads: the first level (25,000 nodes) took 4.4 s by
 * NN-descent, 2.6 s exactly (1.1 s since brute_force_knn's 256-row blocks),
 * at the same recall; at 37,500 nodes of 1,024 dimensions (16 threads)
 * exact was no faster. */
constexpr uint64_t kExactLevelBelow = 32768;

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
std::vector<uint32_t> choose_entry_nodes(const DatasetView &data, Metric metric, uint64_t seed,
                                         const std::vector<uint32_t> &pool = {})
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

    uint64_t count = fixed_entry_count(data.n);
    if (count <= 1)
        return entries;
    detail::Rng rng(seed ^ 0xe7e7);
    std::vector<uint32_t> sample;
    if (!pool.empty()) {
        /* Long-edge nodes: a search that starts there can leave the
         * entry's cluster at its first step. */
        for (uint64_t i = 0; i < std::min<uint64_t>(kEntrySample, pool.size()); i++)
            sample.push_back(pool.size() <= kEntrySample ? pool[i] : pool[rng.below(pool.size())]);
    } else {
        for (uint64_t i = 0; i < std::min(kEntrySample, data.n); i++)
            sample.push_back(data.n <= kEntrySample ? (uint32_t)i : (uint32_t)rng.below(data.n));
    }
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
            knn = brute_force_knn(data, metric, k, params.threads, progress);
        } else {
            knn = nn_descent(data, metric, params, progress);
        }
        detail::throw_if_cancelled(progress);
        out.graph = optimize_graph(knn, params.graph_degree, params.threads, progress);
    }
    detail::throw_if_cancelled(progress);
    out.entry_nodes = choose_entry_nodes(data, metric, params.seed);
    connect_graph(out.graph, data, metric, out.entry_nodes, progress);
    /* Can a default search find the nodes themselves?  Where it cannot,
     * the graph's edges are all local (clusters smaller than the kNN lists,
     * more clusters than entries): add long edges.  On data the plain graph
     * navigates (c100k: 0.4% misses) the graph stays as it was. */
    if (data.n >= kBruteForceBelow) {
        detail::throw_if_cancelled(progress);
        out.probe_miss_rate = navigation_miss_rate(out.graph, data, metric, out.entry_nodes, kNavigationProbes,
                                                   params.seed, params.threads);
        if (out.probe_miss_rate > kLongEdgeMissRate) {
            std::vector<uint32_t> pool = add_long_edges(out.graph, data, metric, params, progress);
            if (!pool.empty()) {
                out.long_edges = true;
                out.entry_nodes = choose_entry_nodes(data, metric, params.seed, pool);
                connect_graph(out.graph, data, metric, out.entry_nodes, progress);
            }
        }
    }
    return out;
}

/*
 * Build on a copy of the data renumbered in the leaf order of a random-
 * projection tree, so that near neighbours mostly sit near each other in
 * memory: the NN-descent join, the pruning and the linking then mostly hit
 * the cache instead of main memory.  The graph is mapped back at the end.
 * Costs one copy of the vectors during the build; an inner-product build
 * makes its augmented vectors (inner_product_graph.h) in that copy, and
 * builds an L2 graph of them.
 */
BuiltGraph build_unchecked(const DatasetView &data, Metric metric, const BuildParams &params, BuildProgress *progress)
{
    const bool augmented = graph_is_augmented(metric);
    if (data.n < kBruteForceBelow && !augmented)
        return build_graph_in_order(data, metric, params, progress);
    const uint64_t n = data.n;
    const uint32_t dim = data.dim;
    const uint32_t width = augmented ? dim + 1 : dim;
    const double max_norm = augmented ? largest_norm(data, params.threads) : 0;
    std::vector<uint32_t> order;
    if (data.n < kBruteForceBelow) {
        order.resize(n);
        std::iota(order.begin(), order.end(), 0u);
    } else {
        std::vector<std::pair<uint64_t, uint64_t>> leaves;
        detail::rp_tree_leaves(data, 256, params.seed ^ 0x10ca1, progress, order, leaves);
    }
    std::vector<float> copy(n * width);
    detail::parallel_for(n, 4096, params.threads, progress, [&](uint64_t begin, uint64_t end, uint32_t) {
        for (uint64_t i = begin; i < end; i++) {
            if (augmented)
                augment_vector(data.row(order[i]), dim, max_norm, &copy[i * width]);
            else
                std::copy(data.row(order[i]), data.row(order[i]) + dim, &copy[i * width]);
        }
    });
    BuiltGraph local =
        build_graph_in_order(DatasetView{copy.data(), n, width}, augmented ? Metric::L2 : metric, params, progress);
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
    out.long_edges = local.long_edges;
    out.probe_miss_rate = local.probe_miss_rate;
    return out;
}

} // namespace

double navigation_miss_rate(const Graph &graph, const DatasetView &data, Metric metric,
                            const std::vector<uint32_t> &entry_nodes, uint32_t probes, uint64_t seed, uint32_t threads)
{
    if (data.n == 0 || probes == 0)
        return 0;
    InMemoryGraph acc(graph, data, metric);
    /* The narrower of the two default searches, the GPU's (width 1), so
     * that the graph serves both; the CPU's automatic width 2 would miss
     * fewer probes and add long edges to fewer graphs.  From the plain
     * entry list, as the GPU starts: every fixed entry and the random ones
     * measured first (the probe judges the graph, not the entry index's
     * groups or its later random entries). */
    const SearchParams sp = gpu_search_params(SearchParams{});
    std::atomic<uint32_t> misses{0};
    detail::parallel_for(probes, 16, std::max(threads, 1u), nullptr, [&](uint64_t begin, uint64_t end, uint32_t) {
        for (uint64_t p = begin; p < end; p++) {
            uint32_t v = (uint32_t)(detail::mix64(seed ^ 0x9e0be ^ detail::mix64(p)) % data.n);
            std::vector<Neighbor> r = search(acc, data.row(v), 1, sp, entry_nodes);
            /* A duplicate of v at distance 0 is as good as v. */
            if (r.empty() || (r[0].id != v && r[0].distance > 0))
                misses.fetch_add(1, std::memory_order_relaxed);
        }
    });
    return (double)misses.load() / probes;
}

namespace {

/* The graph of `Base` without node `removed`: its id reads as padding in
 * every row, so a search meets its neighbours only through other nodes. */
template <class Base>
class WithoutNode {
public:
    WithoutNode(const Base &base, uint32_t removed) : base_(base), removed_(removed) {}
    uint32_t size() const { return base_.size(); }
    uint32_t degree() const { return base_.degree(); }
    uint32_t dim() const { return base_.dim(); }
    Metric metric() const { return base_.metric(); }
    const uint32_t *neighbors(uint32_t id, uint32_t *scratch) const
    {
        const uint32_t *row = base_.neighbors(id, scratch);
        const uint32_t degree = base_.degree();
        if (row != scratch)
            std::copy(row, row + degree, scratch);
        std::replace(scratch, scratch + degree, removed_, kInvalidNode);
        return scratch;
    }
    const float *vector(uint32_t id, float *scratch) const { return base_.vector(id, scratch); }
    void distances(const float *query, const uint32_t *ids, uint32_t count, float *out) const
    {
        base_.distances(query, ids, count, out);
    }

private:
    const Base &base_;
    uint32_t removed_;
};

/* The 10 nearest other nodes of each of `queries` (node ids), by one pass
 * over the data in blocks: each thread keeps every query's best 10 of its
 * blocks, merged at the end. */
std::vector<std::vector<uint32_t>> nearest_other_nodes(const DatasetView &data, Metric metric,
                                                       const std::vector<uint32_t> &queries, uint32_t threads)
{
    constexpr uint32_t k = 10;
    using Best = std::vector<std::pair<float, uint32_t>>; /* a max-heap of at most k */
    threads = std::max(threads, 1u);
    std::vector<std::vector<Best>> per_thread(threads, std::vector<Best>(queries.size()));
    detail::parallel_for(data.n, 4096, threads, nullptr, [&](uint64_t begin, uint64_t end, uint32_t t) {
        /* a row against every query while it is in cache (the queries stay
         * in cache too: a few hundred KB) */
        for (uint64_t i = begin; i < end; i++) {
            for (size_t q = 0; q < queries.size(); q++) {
                if (i == queries[q])
                    continue;
                Best &best = per_thread[t][q];
                const float d = distance(metric, data.row(queries[q]), data.row(i), data.dim);
                if (best.size() < k) {
                    best.emplace_back(d, (uint32_t)i);
                    std::push_heap(best.begin(), best.end());
                } else if (d < best.front().first) {
                    std::pop_heap(best.begin(), best.end());
                    best.back() = {d, (uint32_t)i};
                    std::push_heap(best.begin(), best.end());
                }
            }
        }
    });
    std::vector<std::vector<uint32_t>> out(queries.size());
    for (size_t q = 0; q < queries.size(); q++) {
        Best all;
        for (uint32_t t = 0; t < threads; t++)
            all.insert(all.end(), per_thread[t][q].begin(), per_thread[t][q].end());
        std::sort(all.begin(), all.end());
        for (size_t j = 0; j < all.size() && j < k; j++)
            out[q].push_back(all[j].second);
    }
    return out;
}

} // namespace

namespace {

/* The 10 nearest other nodes each sample's search returns in the graph
 * without the sample (the first 11 results less the sample itself, which
 * a random entry may still find). */
std::vector<std::vector<uint32_t>> searched_without(const InMemoryGraph &acc, const DatasetView &data,
                                                    const std::vector<uint32_t> &entry_nodes,
                                                    const std::vector<uint32_t> &nodes, const SearchParams &sp,
                                                    uint32_t threads)
{
    std::vector<std::vector<uint32_t>> out(nodes.size());
    detail::parallel_for(nodes.size(), 4, std::max(threads, 1u), nullptr, [&](uint64_t begin, uint64_t end, uint32_t) {
        for (uint64_t s = begin; s < end; s++) {
            const uint32_t v = nodes[s];
            WithoutNode<InMemoryGraph> without(acc, v);
            std::vector<uint32_t> entries;
            for (uint32_t e : entry_nodes)
                if (e != v)
                    entries.push_back(e);
            for (const Neighbor &nb : search(without, data.row(v), 11, sp, entries))
                if (nb.id != v && out[s].size() < 10)
                    out[s].push_back(nb.id);
        }
    });
    return out;
}

/* The seeded sample nodes and the neighbours their searches are judged
 * against, computed once for every itopk_size tried: the exact 10 nearest
 * other nodes, or past the brute-force budget those of a search of
 * kMaxItopk candidates at the CPU's width (the same recall on the core
 * test's default graph, 0.02 higher on a degree-4 one, whose widest search
 * misses a few). */
struct LeaveOneOutSample {
    std::vector<uint32_t> nodes;
    std::vector<std::vector<uint32_t>> truth;
    bool exact = true;
};

LeaveOneOutSample leave_one_out_sample(const InMemoryGraph &acc, const DatasetView &data, Metric metric,
                                       const std::vector<uint32_t> &entry_nodes, uint32_t samples, uint64_t seed,
                                       uint32_t threads, double brute_force_elements)
{
    LeaveOneOutSample out;
    out.nodes.resize(data.n < 2 ? 0 : samples);
    for (uint32_t s = 0; s < out.nodes.size(); s++)
        out.nodes[s] = (uint32_t)(detail::mix64(seed ^ 0x100e ^ detail::mix64(s)) % data.n);
    out.exact = (double)data.n * data.dim * samples <= brute_force_elements;
    if (out.exact) {
        out.truth = nearest_other_nodes(data, metric, out.nodes, threads);
    } else {
        SearchParams widest;
        widest.itopk_size = kMaxItopk;
        out.truth = searched_without(acc, data, entry_nodes, out.nodes, cpu_search_params(widest, false), threads);
    }
    return out;
}

double leave_one_out_recall_at(const InMemoryGraph &acc, const DatasetView &data,
                               const std::vector<uint32_t> &entry_nodes, const LeaveOneOutSample &sample,
                               uint32_t itopk, uint32_t threads)
{
    SearchParams sp;
    sp.itopk_size = itopk;
    const std::vector<std::vector<uint32_t>> got =
        searched_without(acc, data, entry_nodes, sample.nodes, gpu_search_params(sp), threads);
    uint64_t hits = 0, wanted = 0;
    for (size_t s = 0; s < got.size(); s++) {
        for (uint32_t id : got[s])
            hits += std::count(sample.truth[s].begin(), sample.truth[s].end(), id);
        wanted += sample.truth[s].size();
    }
    return wanted ? (double)hits / (double)wanted : 1.0;
}

/* Leave-one-out recall of CPU searches from the entry index at
 * choice.itopk_size with each of kProbeChoices, and the fewest probes
 * within kProbeRecallSlack of the last (ItopkChoice). */
void choose_entry_probes(const InMemoryGraph &acc, const DatasetView &data, const std::vector<uint32_t> &entry_nodes,
                         const LeaveOneOutSample &sample, uint32_t threads, ItopkChoice &choice)
{
    const EntryIndex index = derive_entry_index(acc, entry_nodes);
    std::vector<size_t> kept;
    for (size_t s = 0; s < sample.nodes.size(); s++)
        if (std::find(entry_nodes.begin(), entry_nodes.end(), sample.nodes[s]) == entry_nodes.end())
            kept.push_back(s);
    if (kept.empty())
        return;
    auto recall_at = [&](uint32_t probes) {
        SearchParams sp;
        sp.itopk_size = choice.itopk_size;
        sp.entry_probes = probes;
        const SearchParams used = cpu_search_params(sp, true);
        std::vector<uint64_t> hits(kept.size(), 0);
        detail::parallel_for(kept.size(), 4, std::max(threads, 1u), nullptr,
                             [&](uint64_t begin, uint64_t end, uint32_t) {
                                 for (uint64_t i = begin; i < end; i++) {
                                     const size_t s = kept[i];
                                     const uint32_t v = sample.nodes[s];
                                     WithoutNode<InMemoryGraph> without(acc, v);
                                     uint32_t found = 0;
                                     for (const Neighbor &nb : search(without, data.row(v), 11, used, index))
                                         if (nb.id != v && found < 10) {
                                             found++;
                                             hits[i] += std::count(sample.truth[s].begin(), sample.truth[s].end(),
                                                                   nb.id);
                                         }
                                 }
                             });
        uint64_t got = 0, wanted = 0;
        for (size_t i = 0; i < kept.size(); i++) {
            got += hits[i];
            wanted += sample.truth[kept[i]].size();
        }
        return wanted ? (double)got / (double)wanted : 1.0;
    };
    const uint32_t last = std::end(kProbeChoices)[-1];
    choice.default_probes_recall = recall_at(last);
    for (uint32_t probes : kProbeChoices) {
        choice.entry_probes = probes;
        choice.probes_recall = probes == last ? choice.default_probes_recall : recall_at(probes);
        if (choice.probes_recall >= choice.default_probes_recall - kProbeRecallSlack)
            break;
    }
}

} // namespace

std::vector<double> leave_one_out_recall(const Graph &graph, const DatasetView &data, Metric metric,
                                         const std::vector<uint32_t> &entry_nodes,
                                         const std::vector<uint32_t> &itopk_sizes, uint32_t samples, uint64_t seed,
                                         uint32_t threads, double brute_force_elements)
{
    InMemoryGraph acc(graph, data, metric);
    const LeaveOneOutSample sample =
        leave_one_out_sample(acc, data, metric, entry_nodes, samples, seed, threads, brute_force_elements);
    std::vector<double> recall;
    for (uint32_t itopk : itopk_sizes)
        recall.push_back(leave_one_out_recall_at(acc, data, entry_nodes, sample, itopk, threads));
    return recall;
}

ItopkChoice choose_itopk(const Graph &graph, const DatasetView &data, Metric metric,
                         const std::vector<uint32_t> &entry_nodes, uint64_t seed, uint32_t threads)
{
    ItopkChoice choice;
    choice.itopk_size = SearchParams{}.itopk_size;
    if (data.n <= kItopkMinNodes)
        return choice;
    choice.measured = true;
    InMemoryGraph acc(graph, data, metric);
    const LeaveOneOutSample sample =
        leave_one_out_sample(acc, data, metric, entry_nodes, kItopkSamples, seed, threads, kBruteForceElements);
    choice.exact_reference = sample.exact;
    /* one size at a time, smallest first: most data stops at the first */
    for (uint32_t itopk : kItopkChoices) {
        choice.itopk_size = itopk;
        choice.recall = leave_one_out_recall_at(acc, data, entry_nodes, sample, itopk, threads);
        if (choice.recall >= kItopkTargetRecall)
            break;
    }
    choose_entry_probes(acc, data, entry_nodes, sample, threads, choice);
    return choice;
}

/*
 * Why long edges (docs/core.md, issue 12): when clusters hold fewer nodes
 * than the kNN lists, every kNN edge stays inside its cluster, and a search
 * can only succeed from an entry inside the query's cluster.  A sample of
 * 1/8 of the nodes is 8 times sparser, so its 3k nearest sample nodes
 * reach as far as the 24k nearest nodes, across several clusters; the
 * detour pruning of CAGRA keeps the diverse ones.  Measured (200,000 x 256,
 * intrinsic 96, 1,024 clusters, recall@10 at itopk 64): the first level's
 * density matters more than the levels above it (0.957 with it alone,
 * 0.776 without it), and wide candidate lists most: k candidates 0.90, 2k
 * 0.946-0.959 and 3k 0.967-0.969 over two sample seeds.  Each level above
 * samples 1/8 of the one below, for clusters larger than the first level
 * reaches across.
 */
std::vector<uint32_t> add_long_edges(Graph &g, const DatasetView &data, Metric metric, const BuildParams &params,
                                     BuildProgress *progress)
{
    const uint64_t n = data.n;
    const uint32_t degree = g.degree;
    const uint32_t slots = degree - long_edge_keep(degree);
    const uint32_t k = std::min<uint32_t>(3 * std::max(params.intermediate_degree, degree), 1024);
    if (slots == 0 || n != g.size())
        return {};
    /* Nested samples: level L is the first n / 8^(L+1) nodes in a seeded
     * hash order, so each level is a subset of the one below. */
    std::vector<uint32_t> by_key(n);
    std::vector<uint64_t> key(n);
    for (uint64_t v = 0; v < n; v++) {
        by_key[v] = (uint32_t)v;
        key[v] = detail::mix64(params.seed ^ 0x5a3b1e ^ detail::mix64(v));
    }
    std::sort(by_key.begin(), by_key.end(), [&](uint32_t a, uint32_t b) { return key[a] < key[b]; });
    key = std::vector<uint64_t>();
    std::vector<std::vector<uint32_t>> ids;
    std::vector<Graph> graphs;
    for (uint64_t m = n >> kLongEdgeLevelBits; ids.size() < kLongEdgeLevels && m > 2 * (uint64_t)slots;
         m >>= kLongEdgeLevelBits) {
        detail::throw_if_cancelled(progress);
        std::vector<uint32_t> level(by_key.begin(), by_key.begin() + m);
        std::sort(level.begin(), level.end()); /* the locality order of the build */
        std::vector<float> copy(m * data.dim);
        for (uint64_t i = 0; i < m; i++)
            std::copy(data.row(level[i]), data.row(level[i]) + data.dim, &copy[i * data.dim]);
        const DatasetView sub{copy.data(), m, data.dim};
        BuildParams lp = params;
        lp.intermediate_degree = (uint32_t)std::min<uint64_t>(k, m - 1);
        lp.graph_degree = std::min(slots, lp.intermediate_degree);
        /* With `progress`, for the cancel checks: the phase reads KnnGraph,
         * then Pruning again, while a level is built. */
        KnnGraph knn = m < kExactLevelBelow
                           ? brute_force_knn(sub, metric, lp.intermediate_degree, params.threads, progress)
                           : nn_descent(sub, metric, lp, progress);
        detail::throw_if_cancelled(progress);
        graphs.push_back(optimize_graph(knn, lp.graph_degree, params.threads, progress));
        ids.push_back(std::move(level));
    }
    if (ids.empty())
        return {};
    /* Splice: a sampled node's levels, top level first (the longest edges),
     * round-robin, into the last `slots` slots of its row; no duplicates. */
    const uint32_t levels = (uint32_t)ids.size();
    detail::parallel_for(ids[0].size(), 1024, params.threads, progress, [&](uint64_t begin, uint64_t end, uint32_t) {
        std::vector<const uint32_t *> rows(levels);
        std::vector<uint32_t> row_level(levels);
        std::vector<uint32_t> tail;
        for (uint64_t i0 = begin; i0 < end; i0++) {
            const uint32_t v = ids[0][i0];
            uint32_t count = 0;
            for (uint32_t L = levels; L-- > 0;) {
                auto it = std::lower_bound(ids[L].begin(), ids[L].end(), v);
                if (it != ids[L].end() && *it == v) {
                    rows[count] = graphs[L].row((uint64_t)(it - ids[L].begin()));
                    row_level[count++] = L;
                }
            }
            uint32_t *row = g.row(v);
            const uint32_t keep = degree - slots;
            tail.clear();
            auto listed = [&](uint32_t w) {
                return std::find(row, row + keep, w) != row + keep ||
                       std::find(tail.begin(), tail.end(), w) != tail.end();
            };
            for (uint32_t j = 0; tail.size() < slots && j < slots; j++)
                for (uint32_t r = 0; r < count && tail.size() < slots; r++) {
                    const uint32_t L = row_level[r];
                    if (j >= graphs[L].degree || rows[r][j] == kInvalidNode)
                        continue;
                    const uint32_t w = ids[L][rows[r][j]];
                    if (!listed(w))
                        tail.push_back(w);
                }
            /* Short of long edges (small levels): the row's own edges fill
             * the rest, so the row stays full and free of duplicates. */
            for (uint32_t j = keep; j < degree && tail.size() < slots; j++)
                if (row[j] != kInvalidNode && !listed(row[j]))
                    tail.push_back(row[j]);
            for (uint32_t j = 0; j < slots; j++)
                row[keep + j] = j < tail.size() ? tail[j] : kInvalidNode;
        }
    });
    for (uint32_t L = levels; L-- > 0;)
        if (ids[L].size() >= kLongEdgePoolMin || L == 0)
            return ids[L];
    return {};
}

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
        throw Error(ErrorCode::OutOfMemory,
                    "out of memory while building the graph of " + std::to_string(data.n) + " vectors",
                    "Lower graph_degree or intermediate_graph_degree, or build with more memory.");
    }
    if (progress)
        progress->phase.store((uint32_t)BuildPhase::Done);
    return out;
}

} // namespace cagra
