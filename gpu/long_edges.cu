/*
 * long_edges.cu — the navigation probe and the long edges on the device,
 * the counterpart of the core's navigation_miss_rate and add_long_edges
 * (src/core/build.cpp; docs/core.md, "Hard data").
 *
 * On hard sets (clusters smaller than the kNN lists, more clusters than
 * entry nodes) every kNN edge stays inside its cluster, so a search only
 * succeeds from an entry inside the query's cluster.  The probe searches
 * cagra::kNavigationProbes seeded nodes for their own vectors with the
 * default search settings; above cagra::kLongEdgeMissRate misses the build
 * adds long edges:
 *   samples  nested seeded samples of about n/8, n/64, ... nodes (a node is
 *            in level L when the top 3(L+1) bits of its hash are zero);
 *   levels   per sample: its rows gathered into a compact fp16 set, the
 *            kNN graph of 3 x intermediate_degree candidates (build_knn),
 *            pruning, reverse edges and merge (optimize_graph) to the
 *            row's long slots;
 *   splice   a warp per sampled row keeps its first degree/8 edges and
 *            fills the rest with its level edges, top level first, one edge
 *            per level in turn, without duplicates; its own overwritten
 *            edges fill what is left.
 */
#include <algorithm>
#include <cstdio>
#include <vector>

#include "core/build.h"
#include "core/types.h"
#include "long_edges.cuh"
#include "metric.cuh"
#include "nn_descent.cuh"
#include "optimize.cuh"
#include "search.cuh"
#include "search_plan.cuh"

namespace cagra_gpu {

namespace {

using cagra::kLongEdgeLevelBits;
using cagra::kLongEdgeLevels;
using cagra::long_edge_keep;
constexpr uint32_t kSpliceWarps = 4;

__global__ void gather_probe_queries_kernel(const __half *v, uint32_t dim16, const uint32_t *list, uint32_t count,
                                            float *q)
{
    uint64_t t = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x;
    if (t >= (uint64_t)count * dim16)
        return;
    uint64_t i = t / dim16, c = t % dim16;
    q[t] = __half2float(v[(uint64_t)list[i] * dim16 + c]);
}

/* A probe is found when its first result is the node itself or one at
 * least as close to the query as the node (a duplicate: L2 distance 0).
 * The search ran on the scaled fp16 rows with the query equal to the row,
 * so the node's own distance is 0 (L2, L1: exact), -|v|^2 (inner product)
 * or 1 - |v|^2 (cosine), |v|^2 the scaled squared norm; for these two the
 * norm and the search sum in different orders, hence a relative tolerance. */
__global__ void count_misses_kernel(const uint32_t *probes, const uint32_t *ids, const float *dists, const float *norms,
                                    uint32_t count, cagra_gpu_metric metric, uint32_t *misses)
{
    uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= count)
        return;
    const uint32_t v = probes[i], id = ids[i];
    bool found = id == v;
    if (!found && id != kInvalid) {
        const float nv = norms[v];
        const bool products = metric_sum(metric) == MetricSum::Products;
        const float self = distance_from_sum(metric, products ? nv : 0.0f);
        const float tol = products ? 1e-4f * fabsf(nv) : 0.0f;
        found = dists[i] <= self + tol;
    }
    if (!found)
        atomicAdd(misses, 1u);
}

/* Rows `ids` of the build's fp16 set (and their norms) into a compact set. */
__global__ void gather_rows_kernel(const __half *v, const float *norms, uint32_t dim16, const uint32_t *ids,
                                   uint64_t count, __half *out, float *out_norms)
{
    const uint32_t per_row = dim16 / 8; /* 16-byte pieces */
    uint64_t t = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x;
    if (t >= count * per_row)
        return;
    uint64_t i = t / per_row, c = t % per_row;
    const uint4 *src = reinterpret_cast<const uint4 *>(v + (uint64_t)ids[i] * dim16);
    reinterpret_cast<uint4 *>(out + i * dim16)[c] = src[c];
    if (c == 0)
        out_norms[i] = norms[ids[i]];
}

struct SpliceArgs {
    uint32_t *graph; /* n x degree, global ids, edited in place */
    uint32_t degree, keep, levels;
    const uint32_t *ids[kLongEdgeLevels];   /* level L: its global ids, ascending */
    const uint32_t *edges[kLongEdgeLevels]; /* level L: size x deg, level-local ids */
    uint32_t size[kLongEdgeLevels], deg[kLongEdgeLevels];
};

/* Position of v in the ascending ids, or kInvalid. */
__device__ inline uint32_t find_sorted(const uint32_t *ids, uint32_t size, uint32_t v)
{
    uint32_t lo = 0, hi = size;
    while (lo < hi) {
        uint32_t mid = (lo + hi) / 2;
        if (ids[mid] < v)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < size && ids[lo] == v ? lo : kInvalid;
}

/* A warp per node of level 0 (every sampled node).  The row is composed in
 * shared memory: its first `keep` edges, then level edges, then its own
 * former edges, each only when not yet in the row.  All lanes hold the same
 * candidate, so every branch is warp-uniform; lane 0 appends. */
__global__ void __launch_bounds__(32 * kSpliceWarps) splice_kernel(SpliceArgs a)
{
    extern __shared__ uint32_t splice_rows[]; /* kSpliceWarps x degree */
    const uint32_t lane = threadIdx.x & 31, warp = threadIdx.x / 32;
    const uint32_t i0 = blockIdx.x * kSpliceWarps + warp;
    if (i0 >= a.size[0])
        return; /* the whole warp */
    uint32_t *row = splice_rows + warp * a.degree;
    const uint32_t v = a.ids[0][i0];
    uint32_t *grow = a.graph + (uint64_t)v * a.degree;
    for (uint32_t j = lane; j < a.keep; j += 32)
        row[j] = grow[j];
    __syncwarp();

    uint32_t pos[kLongEdgeLevels];
    uint32_t width = 0;
#pragma unroll
    for (uint32_t L = 0; L < kLongEdgeLevels; L++) {
        pos[L] = kInvalid;
        if (L < a.levels) {
            pos[L] = L == 0 ? i0 : find_sorted(a.ids[L], a.size[L], v);
            if (pos[L] != kInvalid)
                width = max(width, a.deg[L]);
        }
    }

    uint32_t filled = a.keep;
    auto offer = [&](uint32_t w) {
        if (w == kInvalid || w == v)
            return;
        bool hit = false;
        for (uint32_t j = lane; j < filled; j += 32)
            hit |= row[j] == w;
        if (__any_sync(0xFFFFFFFFu, hit))
            return;
        if (lane == 0)
            row[filled] = w;
        __syncwarp();
        filled++;
    };
    for (uint32_t j = 0; j < width && filled < a.degree; j++) {
#pragma unroll
        for (int L = kLongEdgeLevels - 1; L >= 0; L--) { /* the top level (longest edges) first */
            if (pos[L] == kInvalid || j >= a.deg[L] || filled >= a.degree)
                continue;
            const uint32_t local = a.edges[L][(uint64_t)pos[L] * a.deg[L] + j];
            offer(local == kInvalid ? kInvalid : a.ids[L][local]);
        }
    }
    /* short of long edges: the row's own edges fill the rest (there are
     * always enough: the slots held degree - keep distinct ones) */
    for (uint32_t j = a.keep; j < a.degree && filled < a.degree; j++)
        offer(grow[j]);
    for (uint32_t j = filled + lane; j < a.degree; j += 32)
        row[j] = kInvalid;
    __syncwarp();
    for (uint32_t j = a.keep + lane; j < a.degree; j += 32)
        grow[j] = row[j];
}

/* Candidates of a level's kNN graph (before the cap by the sample size). */
uint32_t long_edge_k(uint32_t intermediate, uint32_t degree)
{
    return std::min(3 * std::max(intermediate, degree), kMaxIntermediateDegree);
}

} // namespace

uint64_t long_edge_phase_bytes(uint64_t n, uint32_t dim16, uint32_t intermediate, uint32_t degree)
{
    if (n < kLongEdgeMinNodes)
        return 0;
    /* the probe: queries, results, entries */
    const uint64_t probe = (uint64_t)cagra::kNavigationProbes * (dim16 * 4 + 16) + 512 * 4 + 4096;
    /* level 0 is a random sample of about n/8: n/6 + 64 is far above it */
    const uint64_t m = n / 6 + 64;
    const uint64_t k = std::min<uint64_t>(long_edge_k(intermediate, degree), m);
    const uint64_t levels = 2 * m * (4 + (uint64_t)degree * 4); /* ids and graphs of every level (8/7 m) */
    const uint64_t sub = m * (dim16 * 2 + 4);
    const uint64_t build =
        m * k * 4 + std::max(knn_phase_bytes(m, (uint32_t)k), optimize_phase_bytes(m, (uint32_t)k, degree));
    return std::max(probe, levels + sub + build);
}

double navigation_miss_rate(const HalfDataset &data, cagra_gpu_metric metric, const uint32_t *graph, uint32_t degree,
                            const std::vector<uint32_t> &entries, uint64_t seed, cudaStream_t stream)
{
    const uint32_t n = (uint32_t)data.n;
    if (n <= degree)
        return 0.0;
    constexpr uint32_t probes = cagra::kNavigationProbes;
    std::vector<uint32_t> probe(probes);
    for (uint32_t p = 0; p < probes; p++)
        probe[p] = (uint32_t)(splitmix64(seed ^ 0x9e0beULL ^ splitmix64(p)) % n); /* the core's probe nodes */
    DeviceBuffer<uint32_t> dprobe(probes), dentries(std::max<size_t>(entries.size(), 1)), ids(probes), misses(1);
    DeviceBuffer<float> queries((uint64_t)probes * data.dim16), dists(probes);
    check(cudaMemcpyAsync(dprobe.get(), probe.data(), probes * 4, cudaMemcpyHostToDevice, stream), "cudaMemcpy");
    if (!entries.empty())
        check(cudaMemcpyAsync(dentries.get(), entries.data(), entries.size() * 4, cudaMemcpyHostToDevice, stream),
              "cudaMemcpy");
    check(cudaMemsetAsync(misses.get(), 0, 4, stream), "cudaMemset");
    gather_probe_queries_kernel<<<(unsigned)div_up((uint64_t)probes * data.dim16, 256), 256, 0, stream>>>(
        data.vectors.get(), data.dim16, dprobe.get(), probes, queries.get());
    check_launch("gather_probe_queries_kernel");

    /* the default GPU search of an index: fixed entries plus random ones,
     * width 1 (the core's probe searches the same way: build.cpp) */
    const cagra::SearchParams sp = cagra::gpu_search_params(cagra::SearchParams{});
    SearchArgs a{};
    a.vectors = data.vectors.get();
    a.graph = graph;
    a.entries = dentries.get();
    a.n = n;
    a.dim = data.dim;
    a.stride = data.dim16;
    a.degree = degree;
    a.entry_count = (uint32_t)entries.size();
    a.random_entries = sp.random_entries;
    a.metric = metric;
    a.k = 1;
    a.seed = sp.seed;
    a.max_iterations = search_max_iterations(sp.itopk_size, sp.search_width, sp.max_iterations);
    a.queries = queries.get();
    a.filter = nullptr;
    a.ids_out = ids.get();
    a.dist_out = dists.get();
    plan_search(a, sp.search_width, degree, sp.itopk_size);
    run_search(a, true, probes, stream);

    count_misses_kernel<<<(unsigned)div_up(probes, 256), 256, 0, stream>>>(
        dprobe.get(), ids.get(), dists.get(), data.norms.get(), probes, metric, misses.get());
    check_launch("count_misses_kernel");
    uint32_t missed = 0;
    check(cudaMemcpyAsync(&missed, misses.get(), 4, cudaMemcpyDeviceToHost, stream), "cudaMemcpy");
    check(cudaStreamSynchronize(stream), "the navigation probe");
    return (double)missed / probes;
}

std::vector<uint32_t> add_long_edges(const HalfDataset &data, cagra_gpu_metric metric, uint32_t *graph, uint32_t degree,
                                     const cagra_gpu_build_params &params, cudaStream_t stream)
{
    const uint64_t n = data.n;
    const uint32_t keep = long_edge_keep(degree);
    const uint32_t slots = degree - keep;
    const uint32_t k = long_edge_k(params.intermediate_degree, degree);
    if (slots == 0 || n <= degree)
        return {};

    /* Nested samples: node v is in level L when the top 3(L+1) bits of its
     * hash are zero (about n / 8^(L+1) nodes); ids ascending, the order of
     * the build.  A level is kept while larger than twice the slots. */
    std::vector<std::vector<uint32_t>> ids;
    {
        std::vector<std::vector<uint32_t>> all(kLongEdgeLevels);
        for (uint32_t L = 0; L < kLongEdgeLevels; L++)
            all[L].reserve(n / ((uint64_t)1 << (kLongEdgeLevelBits * (L + 1))) * 9 / 8 + 64);
        for (uint64_t v = 0; v < n; v++) {
            const uint64_t key = splitmix64(params.seed ^ 0x5a3b1eULL ^ splitmix64(v));
            for (uint32_t L = 0; L < kLongEdgeLevels && (key >> (64 - kLongEdgeLevelBits * (L + 1))) == 0; L++)
                all[L].push_back((uint32_t)v);
        }
        for (uint32_t L = 0; L < kLongEdgeLevels && all[L].size() > 2 * (uint64_t)slots; L++)
            ids.push_back(std::move(all[L]));
    }
    if (ids.empty())
        return {};
    const uint32_t levels = (uint32_t)ids.size();

    std::vector<DeviceBuffer<uint32_t>> level_ids(levels), level_edges(levels);
    SpliceArgs s{};
    s.graph = graph;
    s.degree = degree;
    s.keep = keep;
    s.levels = levels;
    for (uint32_t L = 0; L < levels; L++) {
        check_cancel(params);
        const uint64_t m = ids[L].size();
        level_ids[L].allocate(m);
        check(cudaMemcpyAsync(level_ids[L].get(), ids[L].data(), m * 4, cudaMemcpyHostToDevice, stream),
              "copying a long-edge sample to the device");
        HalfDataset sub;
        sub.n = m;
        sub.dim = data.dim;
        sub.dim16 = data.dim16;
        sub.inv_scale = data.inv_scale;
        sub.inv_scale2 = data.inv_scale2;
        sub.vectors.allocate(m * data.dim16);
        sub.norms.allocate(m);
        gather_rows_kernel<<<(unsigned)div_up(m * (data.dim16 / 8), 256), 256, 0, stream>>>(
            data.vectors.get(), data.norms.get(), data.dim16, level_ids[L].get(), m, sub.vectors.get(),
            sub.norms.get());
        check_launch("gather_rows_kernel");
        const uint32_t kl = (uint32_t)std::min<uint64_t>(k, m - 1);
        const uint32_t dl = std::min(slots, kl);
        {
            DeviceBuffer<uint32_t> knn(m * kl);
            build_knn(sub, metric, kl, params, knn.get(), stream);
            check_cancel(params);
            level_edges[L].allocate(m * dl);
            optimize_graph(knn.get(), m, kl, dl, level_edges[L].get(), stream);
        }
        s.ids[L] = level_ids[L].get();
        s.edges[L] = level_edges[L].get();
        s.size[L] = (uint32_t)m;
        s.deg[L] = dl;
    }
    check_cancel(params);
    splice_kernel<<<(unsigned)div_up(ids[0].size(), kSpliceWarps), 32 * kSpliceWarps,
                    kSpliceWarps * degree * sizeof(uint32_t), stream>>>(s);
    check_launch("splice_kernel");
    check(cudaStreamSynchronize(stream), "splicing the long edges");
    for (uint32_t L = levels; L-- > 0;)
        if (ids[L].size() >= cagra::kLongEdgePoolMin || L == 0)
            return std::move(ids[L]);
    return {};
}

} // namespace cagra_gpu
