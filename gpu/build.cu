/*
 * build.cu — the library's build pipeline: the rows to the device as fp16,
 * the kNN graph (nn_descent.cu), pruning and merge (optimize.cu), the
 * central entry node and the connect step (connect.cu), the navigation
 * probe with the long edges and entry nodes among them where it misses
 * (long_edges.cu: the core's step 8), the graph and entries to the host.
 * What each step did and took goes into the caller's result.
 */
#include <algorithm>
#include <chrono>
#include <vector>

#include "build.cuh"
#include "connect.cuh"
#include "core/build.h"
#include "core/types.h"
#include "long_edges.cuh"
#include "nn_descent.cuh"
#include "optimize.cuh"

namespace cagra_gpu {

namespace {

/* Seconds of each step, read on the host once the stream has drained. */
class StepClock {
public:
    explicit StepClock(cudaStream_t stream) : stream_(stream) {}
    /* the seconds since the last lap, added to *seconds */
    void lap(double *seconds)
    {
        check(cudaStreamSynchronize(stream_), "the build");
        const auto now = std::chrono::steady_clock::now();
        *seconds += std::chrono::duration<double>(now - last_).count();
        last_ = now;
    }

private:
    cudaStream_t stream_;
    std::chrono::steady_clock::time_point last_ = std::chrono::steady_clock::now();
};

} // namespace

uint64_t build_bytes(uint64_t n, uint32_t dim, uint32_t k, uint32_t degree)
{
    uint64_t dim16 = round_up(dim, 16);
    uint64_t half = n * dim16 * 2 + n * 4;
    uint64_t upload = 2 * std::min<uint64_t>(n, upload_chunk_rows(dim)) * dim * 4; /* two staging buffers */
    uint64_t knn = n * k * 4;
    uint64_t graph = n * degree * 4;
    uint64_t phase = std::max({upload, knn + (n > kExactKnnLimit ? knn_phase_bytes(n, k) : 0),
                               optimize_phase_bytes(n, k, degree), graph + connect_phase_bytes(n, (uint32_t)dim16),
                               graph + long_edge_phase_bytes(n, (uint32_t)dim16, k, degree)});
    return half + phase;
}

void run_build(const float *data, uint64_t n, uint32_t dim, cagra_gpu_metric metric,
               const cagra_gpu_build_params &params, uint32_t *graph_out, uint32_t *entries_out,
               uint32_t entry_capacity, cagra_gpu_build_result *result)
{
    const uint32_t k = params.intermediate_degree, degree = params.graph_degree;
    Stream stream;
    StepClock clock(stream.s);
    HalfDataset half;
    make_half_dataset(data, n, dim, half, stream.s);
    clock.lap(&result->upload_seconds);
    /* allocated after NN-descent, whose join is the build's peak */
    DeviceBuffer<uint32_t> graph;
    uint32_t entry = 0;
    /* the fixed entry nodes, when the probe needed them before the download */
    std::vector<uint32_t> entries;
    if (n == 1) {
        graph.allocate(n * degree);
        check(cudaMemsetAsync(graph.get(), 0xFF, graph.bytes(), stream.s), "cudaMemset");
    } else {
        {
            DeviceBuffer<uint32_t> knn(n * k);
            build_knn(half, metric, k, params, knn.get(), stream.s);
            clock.lap(&result->knn_seconds);
            check_cancel(params);
            graph.allocate(n * degree);
            optimize_graph(knn.get(), n, k, degree, graph.get(), stream.s);
            clock.lap(&result->optimize_seconds);
            check_cancel(params);
        }
        entry = central_node(half, stream.s);
        ConnectResult connected = connect_graph(half, metric, graph.get(), degree, entry, stream.s);
        result->connect_links += connected.links;
        clock.lap(&result->connect_seconds);
        /* Can a default search find the nodes themselves?  Where it cannot
         * (every edge local: clusters smaller than the kNN lists, more
         * clusters than entries), add long edges, pick the entries among
         * long-edge nodes and connect again (the core's step 8). */
        if (n >= kLongEdgeMinNodes) {
            check_cancel(params);
            const uint32_t want = (uint32_t)cagra::fixed_entry_count(n);
            entries = farthest_entry_nodes(half, metric, entry, params.seed, want, stream.s);
            clock.lap(&result->entries_seconds);
            check_cancel(params);
            const double miss = navigation_miss_rate(half, metric, graph.get(), degree, entries, params.seed, stream.s);
            result->probe_miss_rate = (float)miss;
            clock.lap(&result->probe_seconds);
            if (miss > cagra::kLongEdgeMissRate) {
                check_cancel(params);
                const std::vector<uint32_t> pool = add_long_edges(half, metric, graph.get(), degree, params, stream.s);
                clock.lap(&result->long_edges_seconds);
                if (!pool.empty()) {
                    result->long_edges = 1;
                    check_cancel(params);
                    entries = farthest_entry_nodes(half, metric, entry, params.seed, want, stream.s, &pool);
                    clock.lap(&result->entries_seconds);
                    check_cancel(params);
                    connected = connect_graph(half, metric, graph.get(), degree, entry, stream.s);
                    result->connect_links += connected.links;
                    clock.lap(&result->connect_seconds);
                }
            }
        }
        result->unreached = connected.unreached;
    }
    check(cudaMemcpyAsync(graph_out, graph.get(), graph.bytes(), cudaMemcpyDeviceToHost, stream.s),
          "copying the graph to the host");
    clock.lap(&result->download_seconds);
    if (entry_capacity) {
        if (entries.empty()) {
            entries = farthest_entry_nodes(half, metric, entry, params.seed,
                                           (uint32_t)std::min<uint64_t>(cagra::fixed_entry_count(n), entry_capacity),
                                           stream.s);
            clock.lap(&result->entries_seconds);
        }
        /* farthest-point order: a prefix is what a smaller `want` picks */
        const uint32_t count = (uint32_t)std::min<uint64_t>(entries.size(), entry_capacity);
        std::copy(entries.begin(), entries.begin() + count, entries_out);
        result->entry_count = count;
    }
}

void run_build_knn(const float *data, uint64_t n, uint32_t dim, cagra_gpu_metric metric,
                   const cagra_gpu_build_params &params, uint32_t *knn_out)
{
    const uint32_t k = params.intermediate_degree;
    Stream stream;
    HalfDataset half;
    make_half_dataset(data, n, dim, half, stream.s);
    DeviceBuffer<uint32_t> knn(n * k);
    build_knn(half, metric, k, params, knn.get(), stream.s);
    check(cudaMemcpyAsync(knn_out, knn.get(), knn.bytes(), cudaMemcpyDeviceToHost, stream.s),
          "copying the kNN graph to the host");
    check(cudaStreamSynchronize(stream.s), "the kNN build");
}

} // namespace cagra_gpu
