/*
 * connect.cu — make every node reachable from the first entry node, the
 * device counterpart of the core's connect_graph.  A kNN-based graph of
 * well-separated clusters falls apart into components; no search can cross
 * between them.
 *
 * A pass: breadth-first search from the entry node (one launch per level,
 * frontier lists on the device); then rounds of: take up to kRoundNodes
 * unreached nodes, search the reached part for each one's nearest reached
 * nodes (the batched search kernel with the reached set as its filter),
 * turn one of the last edges of such a node into a link to the unreached
 * node (at most degree / 2 links per row, packed at the row's end, where
 * the merge put the least important edges), and continue the search from
 * the newly linked nodes.  A replaced edge can cut a node off, so a fresh
 * pass checks reachability again.
 */
#include <algorithm>

#include "connect.cuh"
#include "search.cuh"
#include "search_plan.cuh"

namespace cagra_gpu {

namespace {

constexpr uint32_t kRoundNodes = 2048;
constexpr uint32_t kNear = 8;
constexpr int kPasses = 4;
constexpr int kRounds = 64;

__global__ void bfs_step_kernel(const uint32_t *graph, uint32_t degree, const uint32_t *frontier, uint32_t count,
                                uint32_t *reached, uint32_t *next, uint32_t *next_count)
{
    uint64_t t = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x;
    if (t >= (uint64_t)count * degree)
        return;
    uint32_t v = frontier[t / degree];
    uint32_t w = graph[(uint64_t)v * degree + t % degree];
    if (w != kInvalid && !reached[w] && atomicExch(&reached[w], 1u) == 0)
        next[atomicAdd(next_count, 1u)] = w;
}

__global__ void collect_unreached_kernel(const uint32_t *reached, uint32_t n, uint32_t *list, uint32_t cap,
                                         uint32_t *count)
{
    uint32_t u = blockIdx.x * blockDim.x + threadIdx.x;
    if (u < n && !reached[u]) {
        uint32_t c = atomicAdd(count, 1u);
        if (c < cap)
            list[c] = u;
    }
}

__global__ void reached_bits_kernel(const uint32_t *reached, uint32_t n, uint64_t *bits)
{
    uint32_t w = blockIdx.x * blockDim.x + threadIdx.x;
    if (w >= (n + 63) / 64)
        return;
    uint64_t word = 0;
    for (uint32_t b = 0; b < 64 && w * 64 + b < n; b++)
        word |= (uint64_t)(reached[w * 64 + b] != 0) << b;
    bits[w] = word;
}

__global__ void gather_queries_kernel(const __half *v, uint32_t dim16, const uint32_t *list, uint32_t count, float *q)
{
    uint64_t t = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x;
    if (t >= (uint64_t)count * dim16)
        return;
    uint64_t i = t / dim16, c = t % dim16;
    q[t] = __half2float(v[(uint64_t)list[i] * dim16 + c]);
}

__global__ void link_kernel(uint32_t *graph, uint32_t degree, const uint32_t *list, uint32_t count,
                            const uint32_t *near, uint32_t *links, uint32_t *reached, uint32_t *frontier,
                            uint32_t *frontier_count, unsigned long long *added)
{
    uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= count)
        return;
    uint32_t u = list[i];
    for (uint32_t c = 0; c < kNear; c++) {
        uint32_t r = near[(uint64_t)i * kNear + c];
        if (r == kInvalid)
            break;
        uint32_t slot = atomicAdd(&links[r], 1u);
        if (slot >= degree / 2)
            continue;
        graph[(uint64_t)r * degree + degree - 1 - slot] = u;
        atomicAdd(added, 1ULL);
        if (atomicExch(&reached[u], 1u) == 0)
            frontier[atomicAdd(frontier_count, 1u)] = u;
        return;
    }
}

uint32_t read_counter(const uint32_t *d, cudaStream_t stream)
{
    uint32_t h = 0;
    check(cudaMemcpyAsync(&h, d, 4, cudaMemcpyDeviceToHost, stream), "cudaMemcpy");
    check(cudaStreamSynchronize(stream), "connecting the graph");
    return h;
}

} // namespace

uint64_t connect_phase_bytes(uint64_t n, uint32_t dim16)
{
    return n * 4 * 4 + div_up(n, 64) * 8 + (uint64_t)kRoundNodes * (dim16 * 4 + kNear * 8 + 4) + 4096;
}

ConnectResult connect_graph(const HalfDataset &data, cagra_gpu_metric metric, uint32_t *graph, uint32_t degree,
                            uint32_t entry, cudaStream_t stream)
{
    const uint32_t n = (uint32_t)data.n;
    if (n <= degree)
        return {}; /* rows hold every other node already */
    DeviceBuffer<uint32_t> reached(n), links(n), frontier(n), next(n), counters(2);
    DeviceBuffer<uint32_t> list(kRoundNodes), near((uint64_t)kRoundNodes * kNear), entry_dev(1);
    DeviceBuffer<float> queries((uint64_t)kRoundNodes * data.dim16), near_dist((uint64_t)kRoundNodes * kNear);
    DeviceBuffer<uint64_t> bits(div_up(n, 64));
    DeviceBuffer<unsigned long long> added(1);
    check(cudaMemsetAsync(links.get(), 0, links.bytes(), stream), "cudaMemset");
    check(cudaMemsetAsync(added.get(), 0, 8, stream), "cudaMemset");
    check(cudaMemcpyAsync(entry_dev.get(), &entry, 4, cudaMemcpyHostToDevice, stream), "cudaMemcpy");

    /* breadth-first search from the nodes already in `frontier` */
    auto spread = [&](uint32_t count) {
        uint32_t *cur = frontier.get(), *nxt = next.get();
        while (count) {
            check(cudaMemsetAsync(counters.get(), 0, 4, stream), "cudaMemset");
            uint64_t threads = (uint64_t)count * degree;
            bfs_step_kernel<<<(unsigned)div_up(threads, 256), 256, 0, stream>>>(graph, degree, cur, count,
                                                                                reached.get(), nxt, counters.get());
            check_launch("bfs_step_kernel");
            count = read_counter(counters.get(), stream);
            std::swap(cur, nxt);
        }
    };

    SearchArgs a{};
    a.vectors = data.vectors.get();
    a.graph = graph;
    a.entries = entry_dev.get();
    a.n = n;
    a.dim = data.dim;
    a.stride = data.dim16;
    a.degree = degree;
    a.entry_count = 1;
    a.random_entries = 0;
    a.metric = metric;
    a.k = kNear;
    a.seed = 0x5eedcafeULL;
    a.max_iterations = search_max_iterations(64, 1, 0);
    a.queries = queries.get();
    a.filter = bits.get();
    a.ids_out = near.get();
    a.dist_out = near_dist.get();
    plan_search(a, 1, degree, 64);

    /* reached: the entry and what a breadth-first search reaches from it */
    auto reach_from_entry = [&] {
        check(cudaMemsetAsync(reached.get(), 0, reached.bytes(), stream), "cudaMemset");
        const uint32_t one = 1;
        check(cudaMemcpyAsync(reached.get() + entry, &one, 4, cudaMemcpyHostToDevice, stream), "cudaMemcpy");
        check(cudaMemcpyAsync(frontier.get(), &entry, 4, cudaMemcpyHostToDevice, stream), "cudaMemcpy");
        spread(1);
    };
    bool connected = false;
    for (int pass = 0; pass < kPasses && !connected; pass++) {
        reach_from_entry();
        bool linked = false;
        for (int round = 0; round < kRounds; round++) {
            check(cudaMemsetAsync(counters.get(), 0, 8, stream), "cudaMemset");
            collect_unreached_kernel<<<(unsigned)div_up(n, 256), 256, 0, stream>>>(reached.get(), n, list.get(),
                                                                                   kRoundNodes, counters.get());
            check_launch("collect_unreached_kernel");
            const uint32_t unreached = read_counter(counters.get(), stream);
            if (unreached == 0)
                break;
            linked = true;
            const uint32_t count = std::min(unreached, kRoundNodes);
            reached_bits_kernel<<<(unsigned)div_up(div_up(n, 64), 256), 256, 0, stream>>>(reached.get(), n, bits.get());
            check_launch("reached_bits_kernel");
            gather_queries_kernel<<<(unsigned)div_up((uint64_t)count * data.dim16, 256), 256, 0, stream>>>(
                data.vectors.get(), data.dim16, list.get(), count, queries.get());
            check_launch("gather_queries_kernel");
            run_search(a, true, count, stream);
            link_kernel<<<(unsigned)div_up(count, 256), 256, 0, stream>>>(graph, degree, list.get(), count, near.get(),
                                                                          links.get(), reached.get(), frontier.get(),
                                                                          counters.get() + 1, added.get());
            check_launch("link_kernel");
            spread(read_counter(counters.get() + 1, stream));
        }
        /* a pass that linked nothing saw every node reached from scratch; after
         * one that linked, a replaced edge may have cut a node off: check again */
        connected = !linked;
    }
    ConnectResult result;
    if (!connected) {
        /* the passes ran out: count what the entry still does not reach */
        reach_from_entry();
        check(cudaMemsetAsync(counters.get(), 0, 4, stream), "cudaMemset");
        collect_unreached_kernel<<<(unsigned)div_up(n, 256), 256, 0, stream>>>(reached.get(), n, list.get(),
                                                                               kRoundNodes, counters.get());
        check_launch("collect_unreached_kernel");
        result.unreached = read_counter(counters.get(), stream);
    }
    unsigned long long links_added = 0;
    check(cudaMemcpyAsync(&links_added, added.get(), 8, cudaMemcpyDeviceToHost, stream), "cudaMemcpy");
    check(cudaStreamSynchronize(stream), "connecting the graph");
    result.links = links_added;
    return result;
}

} // namespace cagra_gpu
