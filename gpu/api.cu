/*
 * api.cu — the C interface of libcagra_gpu.so (cagra_gpu.h): argument
 * checks, device selection, memory checks before any allocation, and the
 * boundary where internal failures become a status and a message.  No C++
 * exception leaves this file.
 */
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "core/types.h"
#include "entry_scores.cuh"
#include "internal.cuh"
#include "measure_nodes.cuh"
#include "metric.cuh"

#include "search.cuh"
#include "search_resident.cuh"

static_assert(CAGRA_GPU_INVALID_NODE == cagra::kInvalidNode, "one invalid node id");
static_assert((int)CAGRA_GPU_L2 == (int)cagra::Metric::L2 &&
                  (int)CAGRA_GPU_INNER_PRODUCT == (int)cagra::Metric::InnerProduct &&
                  (int)CAGRA_GPU_COSINE == (int)cagra::Metric::Cosine && (int)CAGRA_GPU_L1 == (int)cagra::Metric::L1 &&
                  cagra::kMetricCount == 4,
              "the GPU library's metrics are the core's, all four");

#define CAGRA_GPU_VERSION_STRING "0.1.0"

namespace cagra_gpu {

/* A lazy module load may wait for the device to go idle, which it never
 * does while a resident search kernel runs (search_resident.cu): every
 * kernel is loaded with the context instead.  Set before the runtime
 * starts, which is after the library is loaded. */
__attribute__((constructor)) static void load_kernels_with_the_context()
{
    setenv("CUDA_MODULE_LOADING", "EAGER", 1);
}

namespace {

thread_local std::string last_error;

constexpr uint64_t kMaxNodes = 0x7FFFFFFEULL; /* ids keep bit 31 free for flags */
constexpr uint32_t kMaxDim = cagra::kMaxGraphDim; /* an inner-product build's vectors have one coordinate more */
constexpr uint32_t kMaxRandomEntries = cagra::kMaxRandomEntries;
constexpr uint32_t kMaxEntryNodes = cagra::kMaxStoredEntries;
constexpr uint32_t kMaxCandidates = CAGRA_GPU_MAX_STEP_CANDIDATES;
/* Kept free beside our own buffers: the context, CUB scratch, fragmentation. */
constexpr uint64_t kHeadroom = 64ULL << 20;

std::string mib(uint64_t bytes)
{
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.1f MiB", bytes / 1048576.0);
    return buf;
}

template <class F>
cagra_gpu_status guarded(F &&body)
{
    try {
        body();
        last_error.clear();
        return CAGRA_GPU_OK;
    } catch (const Failure &f) {
        last_error = f.message;
        return f.status;
    } catch (const std::bad_alloc &) {
        last_error = "out of host memory";
        return CAGRA_GPU_OUT_OF_MEMORY;
    } catch (const std::exception &e) {
        last_error = e.what();
        return CAGRA_GPU_DEVICE_ERROR;
    } catch (...) {
        last_error = "unknown failure";
        return CAGRA_GPU_DEVICE_ERROR;
    }
}

void invalid(const std::string &message)
{
    fail(CAGRA_GPU_INVALID_ARGUMENT, message);
}

void check_metric(cagra_gpu_metric metric)
{
    if (metric != CAGRA_GPU_L2 && metric != CAGRA_GPU_INNER_PRODUCT && metric != CAGRA_GPU_COSINE &&
        metric != CAGRA_GPU_L1)
        invalid("unknown metric " + std::to_string((int)metric));
}

void check_shape(uint64_t n, uint32_t dim)
{
    if (n == 0)
        invalid("the data has no rows");
    if (n > kMaxNodes)
        invalid("too many rows: " + std::to_string(n) + " (at most " + std::to_string(kMaxNodes) + ")");
    if (dim == 0 || dim > kMaxDim)
        invalid("dimension " + std::to_string(dim) + " is out of range 1.." + std::to_string(kMaxDim));
}

void check_build_params(const cagra_gpu_build_params *p)
{
    if (!p)
        invalid("build parameters are NULL");
    if (p->graph_degree < 2 || p->graph_degree > kMaxIntermediateDegree)
        invalid("graph_degree " + std::to_string(p->graph_degree) + " is out of range 2.." +
                std::to_string(kMaxIntermediateDegree));
    if (p->intermediate_degree < p->graph_degree || p->intermediate_degree > kMaxIntermediateDegree)
        invalid("intermediate_degree " + std::to_string(p->intermediate_degree) + " must lie between graph_degree (" +
                std::to_string(p->graph_degree) + ") and " + std::to_string(kMaxIntermediateDegree));
    if (p->nn_descent_max_iterations < 1)
        invalid("nn_descent_max_iterations must be at least 1");
    if (!(p->nn_descent_termination >= 0.0f && p->nn_descent_termination < 1.0f))
        invalid("nn_descent_termination must lie in [0, 1)");
}

struct Stream {
    cudaStream_t s = nullptr;
    Stream()
    {
        ResidentPause pause;
        check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
    }
    ~Stream()
    {
        if (s)
            cudaStreamDestroy(s);
    }
};

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

uint32_t stride_for(uint32_t dim, cagra_gpu_dtype dtype)
{
    return (uint32_t)round_up(dim, dtype == CAGRA_GPU_FLOAT16 ? 8 : 4);
}

uint64_t index_bytes(uint64_t n, uint32_t dim, uint32_t degree, cagra_gpu_dtype dtype)
{
    uint64_t elt = dtype == CAGRA_GPU_FLOAT16 ? 2 : 4;
    return n * stride_for(dim, dtype) * elt + n * degree * 4 + kMaxEntryNodes * 4 + entry_rows_bytes(kMaxEntryNodes, dim);
}

} // namespace

bool verbose()
{
    static const bool on = std::getenv("CAGRA_GPU_VERBOSE") != nullptr;
    return on;
}

namespace {

/* Phase timer for CAGRA_GPU_VERBOSE (host clock after a stream sync). */
struct PhaseTimer {
    cudaStream_t stream;
    std::chrono::steady_clock::time_point t = std::chrono::steady_clock::now();
    void lap(const char *phase)
    {
        if (!verbose())
            return;
        cudaStreamSynchronize(stream);
        auto now = std::chrono::steady_clock::now();
        std::fprintf(stderr, "cagra_gpu: %s %.3f s\n", phase, std::chrono::duration<double>(now - t).count());
        t = now;
    }
};

} // namespace

[[noreturn]] void fail_cuda(cudaError_t err, const char *what)
{
    cudaGetLastError(); /* clear a non-sticky error so later calls can proceed */
    std::string msg = std::string(what) + ": " + cudaGetErrorString(err);
    switch (err) {
    case cudaErrorMemoryAllocation:
        fail(CAGRA_GPU_OUT_OF_MEMORY, "device out of memory in " + msg);
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorInitializationError:
    case cudaErrorInvalidDevice:
    case cudaErrorDevicesUnavailable:
        fail(CAGRA_GPU_NO_DEVICE, msg);
    default:
        fail(CAGRA_GPU_DEVICE_ERROR, msg);
    }
}

void require_free_memory(uint64_t need, const char *what)
{
    size_t free_b = 0, total_b = 0;
    check(cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo");
    if (need + kHeadroom > free_b)
        fail(CAGRA_GPU_OUT_OF_MEMORY, std::string(what) + " needs " + mib(need) + " of device memory, but only " +
                                          mib(free_b) + " of " + mib(total_b) + " are free");
}

void use_device(int device)
{
    int count = 0;
    cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess || count == 0) {
        cudaGetLastError();
        fail(CAGRA_GPU_NO_DEVICE,
             std::string("no CUDA device: ") + (err != cudaSuccess ? cudaGetErrorString(err) : "none found"));
    }
    if (device < 0 || device >= count)
        invalid("device " + std::to_string(device) + " does not exist (" + std::to_string(count) + " present)");
    check(cudaSetDevice(device), "cudaSetDevice");
}

} // namespace cagra_gpu

using namespace cagra_gpu;

struct cagra_gpu_search_context {
    int device = 0;
    /* wait briefly, then on a blocking event, rather than spin in
     * cudaStreamSynchronize for the whole search */
    bool blocking_wait = false;
    Stream stream;
    cudaEvent_t started = nullptr, done = nullptr; /* around the last launched search, for its device time */
    float resident_ms = -1.0f; /* the last search's device time when the resident kernel served it, else < 0 */
    QueryDone query_done;      /* cagra_gpu_search_context_on_query_done */
    /* per-batch buffers, kept and grown so small batches allocate nothing */
    DeviceBuffer<float> queries;
    DeviceBuffer<uint32_t> ids;
    DeviceBuffer<float> dists;
    DeviceBuffer<uint64_t> filter;
    DeviceBuffer<uint32_t> nodes; /* cagra_gpu_search_nodes */
    MeasureScratch measure;       /* its pairs and their sort */
    /* multi-CTA searches: visited tables (all free between launches),
     * hand-ins, arrival counts (all 0 between launches) and bounds (all
     * kInvalid between launches) */
    DeviceBuffer<uint32_t> visited;
    DeviceBuffer<uint64_t> handed_in;
    DeviceBuffer<uint32_t> arrivals;
    DeviceBuffer<uint32_t> bounds;
    DeviceBuffer<float> entry_scores; /* nq x the fixed entries (entry_scores.cuh) */
    DeviceBuffer<SearchStats> batch_stats; /* the last launched batch's, zeroed before it */
    cagra_gpu_search_stats stats{};        /* every batch's so far */
    /* page-locked copies of a batch's answers and counts, and of a small
     * batch's queries: a copy to pageable memory holds the calling thread
     * inside the driver until the stream drains, and small copies from
     * several threads' contexts take turns there (batches of 10 from 4
     * threads: about half the queries/s of staged copies on the H200) */
    std::unique_ptr<PinnedBuffer<unsigned char>> staging;
    uint64_t staging_bytes = 0;

    ~cagra_gpu_search_context()
    {
        if (started)
            cudaEventDestroy(started);
        if (done)
            cudaEventDestroy(done);
    }
};

struct cagra_gpu_index {
    int device = 0;
    cagra_gpu_dtype dtype = CAGRA_GPU_FLOAT32;
    cagra_gpu_metric metric = CAGRA_GPU_L2;
    uint64_t n = 0;
    uint32_t dim = 0, stride = 0, degree = 0, entry_count = 0;
    DeviceBuffer<unsigned char> vectors;
    DeviceBuffer<uint32_t> graph;
    DeviceBuffer<uint32_t> entries;
    EntryRows entry_rows; /* the fixed entries' rows, for scoring them per batch */
    cagra_gpu_search_context search; /* for cagra_gpu_search */
};

extern "C" {

const char *cagra_gpu_version(void)
{
    return CAGRA_GPU_VERSION_STRING;
}

int cagra_gpu_api_version(void)
{
    return CAGRA_GPU_API_VERSION;
}

const char *cagra_gpu_last_error(void)
{
    return last_error.c_str();
}

/* The defaults are the core's (src/core/types.h): one default per parameter. */
void cagra_gpu_default_build_params(cagra_gpu_build_params *p)
{
    if (!p)
        return;
    const cagra::BuildParams d;
    p->graph_degree = d.graph_degree;
    p->intermediate_degree = d.intermediate_degree;
    p->nn_descent_max_iterations = d.nn_descent_max_iterations;
    p->nn_descent_termination = d.nn_descent_termination;
    p->seed = d.seed;
    p->cancel = nullptr;
}

void cagra_gpu_default_search_params(cagra_gpu_search_params *p)
{
    if (!p)
        return;
    /* an automatic width as the GPU resolves it */
    const cagra::SearchParams d = cagra::gpu_search_params(cagra::SearchParams{});
    p->itopk_size = d.itopk_size;
    p->search_width = d.search_width;
    p->max_iterations = d.max_iterations;
    p->random_entries = d.random_entries;
    p->seed = d.seed;
    p->ctas_per_query = 0;
    p->resident = 0;
}

cagra_gpu_status cagra_gpu_device_count(int *count)
{
    if (count)
        *count = 0;
    return guarded([&] {
        if (!count)
            invalid("count is NULL");
        int c = 0;
        cudaError_t err = cudaGetDeviceCount(&c);
        if (err != cudaSuccess) {
            cudaGetLastError();
            fail(CAGRA_GPU_NO_DEVICE, std::string("no usable CUDA device: ") + cudaGetErrorString(err));
        }
        if (c == 0)
            fail(CAGRA_GPU_NO_DEVICE, "no CUDA device found");
        *count = c;
    });
}

cagra_gpu_status cagra_gpu_get_device_info(int device, cagra_gpu_device_info *info)
{
    return guarded([&] {
        if (!info)
            invalid("info is NULL");
        use_device(device);
        cudaDeviceProp prop;
        check(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
        size_t free_b = 0, total_b = 0;
        check(cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo");
        std::memset(info, 0, sizeof *info);
        std::snprintf(info->name, sizeof info->name, "%s", prop.name);
        info->total_memory = total_b;
        info->free_memory = free_b;
        info->compute_major = prop.major;
        info->compute_minor = prop.minor;
        info->multiprocessors = prop.multiProcessorCount;
    });
}

cagra_gpu_status cagra_gpu_build_memory(uint64_t n, uint32_t dim, const cagra_gpu_build_params *params, uint64_t *bytes)
{
    return guarded([&] {
        if (!bytes)
            invalid("bytes is NULL");
        check_shape(n, dim);
        check_build_params(params);
        *bytes = build_bytes(n, dim, params->intermediate_degree, params->graph_degree);
    });
}

cagra_gpu_status cagra_gpu_index_memory(uint64_t n, uint32_t dim, uint32_t degree, cagra_gpu_dtype dtype,
                                        uint64_t *bytes)
{
    return guarded([&] {
        if (!bytes)
            invalid("bytes is NULL");
        check_shape(n, dim);
        if (degree == 0)
            invalid("degree must be at least 1");
        *bytes = index_bytes(n, dim, degree, dtype);
    });
}

cagra_gpu_status cagra_gpu_build(int device, const float *data, uint64_t n, uint32_t dim, cagra_gpu_metric metric,
                                 const cagra_gpu_build_params *params, uint32_t *graph_out, uint32_t *entries_out,
                                 uint32_t entry_capacity, uint32_t *entry_count)
{
    if (entry_count)
        *entry_count = 0;
    return guarded([&] {
        if (!data || !graph_out)
            invalid("data and graph_out must not be NULL");
        if (entry_capacity && !entries_out)
            invalid("entries_out is NULL but entry_capacity is " + std::to_string(entry_capacity));
        check_shape(n, dim);
        check_metric(metric);
        check_build_params(params);
        use_device(device);
        const uint32_t k = params->intermediate_degree, degree = params->graph_degree;
        require_free_memory(build_bytes(n, dim, k, degree), "this build");

        Stream stream;
        PhaseTimer timer{stream.s};
        HalfDataset half;
        make_half_dataset(data, n, dim, half, stream.s);
        timer.lap("upload and fp16 conversion");
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
                build_knn(half, metric, k, *params, knn.get(), stream.s);
                timer.lap("kNN graph");
                check_cancel(*params);
                graph.allocate(n * degree);
                optimize_graph(knn.get(), n, k, degree, graph.get(), stream.s);
                timer.lap("pruning, reverse edges, merge");
                check_cancel(*params);
            }
            entry = central_node(half, stream.s);
            uint64_t links = connect_graph(half, metric, graph.get(), degree, entry, stream.s);
            if (verbose())
                std::fprintf(stderr, "cagra_gpu: %llu links to connect the graph\n", (unsigned long long)links);
            timer.lap("entry node and connection");
            /* Can a default search find the nodes themselves?  Where it cannot
             * (every edge local: clusters smaller than the kNN lists, more
             * clusters than entries), add long edges, pick the entries among
             * long-edge nodes and connect again (the core's step 8). */
            if (n >= kLongEdgeMinNodes) {
                check_cancel(*params);
                const uint32_t want = (uint32_t)cagra::fixed_entry_count(n);
                entries = farthest_entry_nodes(half, metric, entry, params->seed, want, stream.s);
                timer.lap("entry nodes");
                check_cancel(*params);
                const double miss =
                    navigation_miss_rate(half, metric, graph.get(), degree, entries, params->seed, stream.s);
                timer.lap("navigation probe");
                bool added = false;
                if (miss > cagra::kLongEdgeMissRate) {
                    check_cancel(*params);
                    const std::vector<uint32_t> pool =
                        add_long_edges(half, metric, graph.get(), degree, *params, stream.s);
                    timer.lap("long edges");
                    if (!pool.empty()) {
                        added = true;
                        check_cancel(*params);
                        entries = farthest_entry_nodes(half, metric, entry, params->seed, want, stream.s, &pool);
                        check_cancel(*params);
                        links = connect_graph(half, metric, graph.get(), degree, entry, stream.s);
                        timer.lap("entry nodes among long-edge nodes and connection");
                    }
                }
                if (verbose()) {
                    std::fprintf(stderr, "cagra_gpu: navigation probe: %.1f%% of %u missed; long edges %s\n",
                                 100.0 * miss, cagra::kNavigationProbes, added ? "added" : "not added");
                    if (added) {
                        /* diagnostics only: the same probe on the final graph */
                        const double after =
                            navigation_miss_rate(half, metric, graph.get(), degree, entries, params->seed, stream.s);
                        std::fprintf(stderr,
                                     "cagra_gpu: %llu links to connect the graph again; the probe then misses "
                                     "%.1f%%\n",
                                     (unsigned long long)links, 100.0 * after);
                    }
                }
            }
        }
        check(cudaMemcpyAsync(graph_out, graph.get(), graph.bytes(), cudaMemcpyDeviceToHost, stream.s),
              "copying the graph to the host");
        check(cudaStreamSynchronize(stream.s), "the build");
        timer.lap("graph download");
        if (entry_capacity) {
            if (entries.empty()) {
                entries =
                    farthest_entry_nodes(half, metric, entry, params->seed,
                                         (uint32_t)std::min<uint64_t>(cagra::fixed_entry_count(n), entry_capacity), stream.s);
                timer.lap("entry nodes");
            }
            /* farthest-point order: a prefix is what a smaller `want` picks */
            const uint32_t count = (uint32_t)std::min<uint64_t>(entries.size(), entry_capacity);
            std::copy(entries.begin(), entries.begin() + count, entries_out);
            if (entry_count)
                *entry_count = count;
        }
    });
}

cagra_gpu_status cagra_gpu_build_knn(int device, const float *data, uint64_t n, uint32_t dim, cagra_gpu_metric metric,
                                     const cagra_gpu_build_params *params, uint32_t *knn_out)
{
    return guarded([&] {
        if (!data || !knn_out)
            invalid("data and knn_out must not be NULL");
        check_shape(n, dim);
        check_metric(metric);
        check_build_params(params);
        if (n < 2)
            invalid("a kNN graph needs at least 2 rows");
        use_device(device);
        const uint32_t k = params->intermediate_degree;
        require_free_memory(build_bytes(n, dim, k, params->graph_degree), "this kNN build");
        Stream stream;
        HalfDataset half;
        make_half_dataset(data, n, dim, half, stream.s);
        DeviceBuffer<uint32_t> knn(n * k);
        build_knn(half, metric, k, *params, knn.get(), stream.s);
        check(cudaMemcpyAsync(knn_out, knn.get(), knn.bytes(), cudaMemcpyDeviceToHost, stream.s),
              "copying the kNN graph to the host");
        check(cudaStreamSynchronize(stream.s), "the kNN build");
    });
}

cagra_gpu_status cagra_gpu_index_load(int device, const void *vectors, cagra_gpu_dtype dtype, uint64_t n, uint32_t dim,
                                      const uint32_t *graph, uint32_t degree, cagra_gpu_metric metric,
                                      const uint32_t *entries, uint32_t entry_count, cagra_gpu_index **index)
{
    if (index)
        *index = nullptr;
    return guarded([&] {
        if (!vectors || !graph || !index)
            invalid("vectors, graph and index must not be NULL");
        if (dtype != CAGRA_GPU_FLOAT32 && dtype != CAGRA_GPU_FLOAT16)
            invalid("unknown vector type " + std::to_string((int)dtype));
        check_shape(n, dim);
        check_metric(metric);
        if (degree == 0 || degree > kMaxCandidates)
            invalid("degree " + std::to_string(degree) + " is out of range 1.." + std::to_string(kMaxCandidates));
        if (entry_count > kMaxEntryNodes || (entry_count && !entries))
            invalid("entry_count must be at most " + std::to_string(kMaxEntryNodes) + " with a non-NULL entries array");
        use_device(device);
        require_free_memory(index_bytes(n, dim, degree, dtype), "this index");
        /* a bad id would send the kernel outside the vectors: check them all */
        for (uint64_t i = 0; i < n * degree; i++)
            if (graph[i] >= n && graph[i] != kInvalid)
                invalid("graph edge " + std::to_string(i) + " points at node " + std::to_string(graph[i]) +
                        ", beyond the " + std::to_string(n) + " nodes");
        for (uint32_t i = 0; i < entry_count; i++)
            if (entries[i] >= n)
                invalid("entry node " + std::to_string(entries[i]) + " is beyond the " + std::to_string(n) + " nodes");

        auto *ix = new cagra_gpu_index;
        try {
            ix->device = device;
            ix->search.device = device;
            ix->dtype = dtype;
            ix->metric = metric;
            ix->n = n;
            ix->dim = dim;
            ix->degree = degree;
            ix->entry_count = entry_count;
            ix->stride = stride_for(dim, dtype);
            const uint64_t elt = dtype == CAGRA_GPU_FLOAT16 ? 2 : 4;
            ix->vectors.allocate(n * ix->stride * elt);
            ix->graph.allocate(n * degree);
            ix->entries.allocate(std::max<uint32_t>(entry_count, 1));
            cudaStream_t s = ix->search.stream.s;
            check(cudaMemsetAsync(ix->vectors.get(), 0, ix->vectors.bytes(), s), "cudaMemset");
            check(cudaMemcpy2DAsync(ix->vectors.get(), ix->stride * elt, vectors, dim * elt, dim * elt, n,
                                    cudaMemcpyHostToDevice, s),
                  "copying the vectors to the device");
            check(cudaMemcpyAsync(ix->graph.get(), graph, n * degree * 4, cudaMemcpyHostToDevice, s),
                  "copying the graph to the device");
            if (entry_count)
                check(cudaMemcpyAsync(ix->entries.get(), entries, entry_count * 4, cudaMemcpyHostToDevice, s),
                      "copying the entry nodes to the device");
            if (metric_has_dot_form(metric))
                load_entry_rows(ix->entry_rows, vectors, dtype, dim, entries, entry_count, s);
            check(cudaStreamSynchronize(s), "loading the index");
        } catch (...) {
            delete ix;
            throw;
        }
        *index = ix;
    });
}

cagra_gpu_status cagra_gpu_search_context_create(int device, cagra_gpu_search_context **context)
{
    if (context)
        *context = nullptr;
    return guarded([&] {
        if (!context)
            invalid("context must not be NULL");
        use_device(device);
        auto *c = new cagra_gpu_search_context;
        try {
            c->device = device;
            c->blocking_wait = true;
            check(cudaEventCreate(&c->started), "cudaEventCreate");
            check(cudaEventCreateWithFlags(&c->done, cudaEventBlockingSync), "cudaEventCreate");
        } catch (...) {
            delete c;
            throw;
        }
        *context = c;
    });
}

void cagra_gpu_search_context_free(cagra_gpu_search_context *c)
{
    if (!c)
        return;
    cudaSetDevice(c->device);
    delete c;
}

cagra_gpu_status cagra_gpu_search(cagra_gpu_index *ix, const float *queries, uint32_t nq, uint32_t k,
                                  const cagra_gpu_search_params *p, const uint64_t *filter, uint32_t *ids_out,
                                  float *distances_out)
{
    if (!ix) {
        last_error = "index must not be NULL";
        return CAGRA_GPU_INVALID_ARGUMENT;
    }
    return cagra_gpu_search_in(&ix->search, ix, queries, nq, k, p, filter, ids_out, distances_out);
}

} /* extern "C" */

namespace {

/* What every search checks of its context and index. */
void check_context(const cagra_gpu_search_context *ctx, const cagra_gpu_index *ix)
{
    if (!ctx || !ix)
        invalid("context and index must not be NULL");
    if (ctx->device != ix->device)
        invalid("the search context is on device " + std::to_string(ctx->device) + ", the index on device " +
                std::to_string(ix->device));
}

/* ... and of a batch that is not empty. */
void check_batch(const float *queries, uint32_t k, const uint32_t *ids_out, const float *distances_out)
{
    if (!queries || !ids_out || !distances_out)
        invalid("queries, ids_out and distances_out must not be NULL");
    if (k == 0 || k > CAGRA_GPU_MAX_K)
        invalid("k " + std::to_string(k) + " is out of range 1.." + std::to_string(CAGRA_GPU_MAX_K));
}

/* The kernel's description for a search of `ix` (entries, filter and
 * iterations left to the caller). */
SearchArgs index_args(const cagra_gpu_index *ix, uint32_t k)
{
    SearchArgs a{};
    a.vectors = ix->vectors.get();
    a.graph = ix->graph.get();
    a.entries = ix->entries.get();
    a.n = (uint32_t)ix->n;
    a.dim = ix->dim;
    a.stride = ix->stride;
    a.degree = ix->degree;
    a.entry_count = ix->entry_count;
    a.metric = ix->metric;
    a.k = k;
    return a;
}

/* Plan `a` (shared memory), copy the queries and the filter (NULL: none)
 * or, for distinct entries, the `count` ids of `nodes` to the device, run
 * the kernel and copy the answers back. */
void run_batch(cagra_gpu_search_context *ctx, const cagra_gpu_index *ix, SearchArgs &a, uint32_t width, uint32_t itopk,
               const float *queries, uint32_t nq, const uint64_t *filter, const uint32_t *nodes, uint32_t count,
               uint32_t *ids_out, float *distances_out)
{
    check(cudaSetDevice(ix->device), "cudaSetDevice");
    /* one CTA a query, more fixed entries than its buffer keeps: rank them
     * for the whole batch at once, so each walk measures only its best */
    const bool score = a.ctas <= 1 && !a.entries_distinct && ix->entry_rows.count > pow2_at_least(itopk) &&
                       (uint64_t)nq * ix->entry_rows.count * sizeof(float) <= kEntryScoreBytesLimit;
    if (score) {
        ensure(ctx->entry_scores, (uint64_t)nq * ix->entry_rows.count, "this search batch");
        a.entry_scores = ctx->entry_scores.get();
    }
    plan_search(a, width, ix->degree, itopk);
    int max_smem = 0;
    check(cudaDeviceGetAttribute(&max_smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, ix->device),
          "cudaDeviceGetAttribute");
    if (a.smem_bytes + 64 > (size_t)max_smem)
        invalid("this search needs " + std::to_string(a.smem_bytes) +
                " bytes of shared memory per query, more than the device's " + std::to_string(max_smem) +
                ": lower itopk_size or search_width");

    const uint64_t fwords = filter ? div_up(ix->n, 64) : 0;
    const uint32_t k = a.k;
    ensure(ctx->queries, (uint64_t)nq * ix->stride, "this search batch");
    ensure(ctx->ids, (uint64_t)nq * k, "this search batch");
    ensure(ctx->dists, (uint64_t)nq * k, "this search batch");
    ensure(ctx->filter, fwords, "this search batch");
    ensure(ctx->nodes, a.entries_distinct ? count : 0, "this search batch");
    DeviceBuffer<float> &dq = ctx->queries;
    DeviceBuffer<uint32_t> &dids = ctx->ids;
    DeviceBuffer<float> &ddist = ctx->dists;
    cudaStream_t s = ctx->stream.s;
    /* a large batch's queries go straight from the caller's memory: the
     * driver overlaps its staging with the transfer, one memcpy here first
     * would not */
    constexpr uint64_t kStagedQueryBytesMax = 4 << 20;
    const uint64_t query_bytes = (uint64_t)nq * ix->dim * 4, answer_bytes = (uint64_t)nq * k * 4;
    const bool stage_queries = query_bytes <= kStagedQueryBytesMax;
    const uint64_t staged = (stage_queries ? query_bytes : 0) + 2 * answer_bytes + sizeof(SearchStats);
    if (ctx->staging_bytes < staged) {
        ctx->staging.reset();
        ctx->staging_bytes = 0;
        ctx->staging = std::make_unique<PinnedBuffer<unsigned char>>(staged);
        ctx->staging_bytes = staged;
    }
    SearchStats *staged_stats = reinterpret_cast<SearchStats *>(ctx->staging->get());
    float *staged_queries = reinterpret_cast<float *>(staged_stats + 1);
    uint32_t *staged_ids =
        reinterpret_cast<uint32_t *>(staged_queries + (stage_queries ? (uint64_t)nq * ix->dim : 0));
    float *staged_dists = reinterpret_cast<float *>(staged_ids + (uint64_t)nq * k);
    if (stage_queries)
        std::memcpy(staged_queries, queries, query_bytes);
    if (a.ctas > 1) {
        /* the kernel leaves them as it found them: initialised once */
        if (ensure(ctx->visited, (uint64_t)nq * a.visited_slots, "this search batch"))
            check(cudaMemsetAsync(ctx->visited.get(), 0xFF, ctx->visited.bytes(), s), "cudaMemset");
        if (ensure(ctx->arrivals, nq, "this search batch"))
            check(cudaMemsetAsync(ctx->arrivals.get(), 0, ctx->arrivals.bytes(), s), "cudaMemset");
        if (ensure(ctx->bounds, nq, "this search batch"))
            check(cudaMemsetAsync(ctx->bounds.get(), 0xFF, ctx->bounds.bytes(), s), "cudaMemset");
        ensure(ctx->handed_in, (uint64_t)nq * a.ctas * a.hand_in, "this search batch");
        a.visited = ctx->visited.get();
        a.arrivals = ctx->arrivals.get();
        a.bounds = ctx->bounds.get();
        a.handed_in = ctx->handed_in.get();
    }
    ctx->resident_ms = -1.0f;
    if (ctx->started)
        check(cudaEventRecord(ctx->started, s), "cudaEventRecord");
    if (ix->stride != ix->dim)
        check(cudaMemsetAsync(dq.get(), 0, (uint64_t)nq * ix->stride * 4, s), "cudaMemset");
    check(cudaMemcpy2DAsync(dq.get(), ix->stride * 4, stage_queries ? staged_queries : queries, ix->dim * 4,
                            ix->dim * 4, nq, cudaMemcpyHostToDevice, s),
          "copying the queries to the device");
    if (filter)
        check(cudaMemcpyAsync(ctx->filter.get(), filter, fwords * 8, cudaMemcpyHostToDevice, s),
              "copying the filter to the device");
    if (a.entries_distinct && count)
        check(cudaMemcpyAsync(ctx->nodes.get(), nodes, (uint64_t)count * 4, cudaMemcpyHostToDevice, s),
              "copying the nodes to the device");
    a.queries = dq.get();
    a.filter = filter ? ctx->filter.get() : nullptr;
    if (a.entries_distinct) {
        a.entries = ctx->nodes.get();
        a.entry_count = count;
    }
    a.ids_out = dids.get();
    a.dist_out = ddist.get();
    if (a.ctas <= 1 && !a.entries_distinct) {
        ensure(ctx->batch_stats, 1, "this search batch");
        check(cudaMemsetAsync(ctx->batch_stats.get(), 0, sizeof(SearchStats), s), "cudaMemset");
        a.stats = ctx->batch_stats.get();
    }
    if (score)
        score_entries(ix->entry_rows, ix->metric, dq.get(), ix->stride, nq, ctx->entry_scores.get(), s);
    if (a.entries_distinct && measure_fits(nq, count)) {
        const MeasureArgs m{ix->vectors.get(), ix->dtype == CAGRA_GPU_FLOAT16, ix->dim, ix->stride, ix->metric,
                            nq, count, k};
        measure_nodes(m, ctx->measure, dq.get(), ctx->nodes.get(), ddist.get(), dids.get(), s);
    } else {
        run_search(a, ix->dtype == CAGRA_GPU_FLOAT16, nq, s);
    }
    check(cudaMemcpyAsync(staged_ids, dids.get(), answer_bytes, cudaMemcpyDeviceToHost, s),
          "copying the results to the host");
    check(cudaMemcpyAsync(staged_dists, ddist.get(), answer_bytes, cudaMemcpyDeviceToHost, s),
          "copying the results to the host");
    if (a.stats)
        check(cudaMemcpyAsync(staged_stats, a.stats, sizeof(SearchStats), cudaMemcpyDeviceToHost, s),
              "copying the search's counts");
    if (ctx->blocking_wait) {
        check(cudaEventRecord(ctx->done, s), "cudaEventRecord");
        const auto since = std::chrono::steady_clock::now();
        cudaError_t state;
        for (auto waited = std::chrono::steady_clock::duration::zero();
             (state = cudaEventQuery(ctx->done)) == cudaErrorNotReady && waited < kBriefWait;
             waited = std::chrono::steady_clock::now() - since)
            wait_step(waited);
        check(state == cudaErrorNotReady ? cudaEventSynchronize(ctx->done) : state, "the search");
    } else {
        check(cudaStreamSynchronize(s), "the search");
    }
    std::memcpy(ids_out, staged_ids, answer_bytes);
    std::memcpy(distances_out, staged_dists, answer_bytes);
    if (a.stats) {
        ctx->stats.queries += nq;
        ctx->stats.distances += staged_stats->measured;
        ctx->stats.iterations += staged_stats->iterations;
    }
}

/* How the device's resident kernel (search_resident.cu) walks a query of
 * ix: one CTA at the caller's width, as a launch with ctas_per_query 1
 * would; false when the kernel cannot serve ix. */
bool resident_plan(const cagra_gpu_index *ix, const cagra_gpu_search_params &p, uint32_t k, ResidentKey *key,
                   SearchArgs *a)
{
    /* One block walks each query there; at long rows several blocks per
     * query (a launch) finish a small batch sooner.  Through SQL on an
     * H200: 512-byte rows (c1m) 2,061 -> 3,142 q/s with one client and
     * 79,009 -> 110,203 with 64; 4 KB rows (1,024 float32 dimensions)
     * 1,209 -> 826 and 34,407 -> 29,166 (docs/worker.md). */
    constexpr uint64_t kResidentMaxRowBytes = 1024;
    if ((uint64_t)ix->stride * (ix->dtype == CAGRA_GPU_FLOAT16 ? 2 : 4) > kResidentMaxRowBytes)
        return false;
    *a = index_args(ix, k);
    a->random_entries = p.random_entries;
    a->seed = p.seed;
    a->ctas = 1;
    a->max_iterations = search_max_iterations(p.itopk_size, p.search_width, p.max_iterations);
    plan_search(*a, p.search_width, ix->degree, p.itopk_size);
    int max_smem = 0;
    check(cudaDeviceGetAttribute(&max_smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, ix->device),
          "cudaDeviceGetAttribute");
    if (a->smem_bytes + 64 > (size_t)max_smem)
        return false;
    key->index = ix;
    key->device = ix->device;
    key->half = ix->dtype == CAGRA_GPU_FLOAT16;
    key->itopk = p.itopk_size;
    key->width = p.search_width;
    key->max_iterations = a->max_iterations;
    key->random_entries = p.random_entries;
    key->seed = p.seed;
    return true;
}

/* The batch through the device's resident kernel; false when the kernel
 * cannot take it. */
bool search_resident_batch(cagra_gpu_search_context *ctx, const cagra_gpu_index *ix, const cagra_gpu_search_params &p,
                           uint32_t k, const float *queries, uint32_t nq, uint32_t *ids_out, float *distances_out)
{
    ResidentKey key;
    SearchArgs a;
    float ms = -1.0f;
    if (!resident_plan(ix, p, k, &key, &a) ||
        !search_resident(key, a, ix->dim, queries, nq, k, ctx->query_done, ids_out, distances_out, &ms))
        return false;
    ctx->resident_ms = ms;
    return true;
}

/* What every traversal checks of its settings. */
void check_search_params(const cagra_gpu_index *ix, const cagra_gpu_search_params *p, uint32_t k)
{
    if (!p)
        invalid("params must not be NULL");
    if (p->itopk_size < k || p->itopk_size > CAGRA_GPU_MAX_ITOPK)
        invalid("itopk_size " + std::to_string(p->itopk_size) + " must lie between k (" + std::to_string(k) +
                ") and " + std::to_string(CAGRA_GPU_MAX_ITOPK));
    if (p->search_width == 0 || (uint64_t)p->search_width * ix->degree > kMaxCandidates)
        invalid("search_width " + std::to_string(p->search_width) +
                " must be at least 1 and search_width * degree at most " + std::to_string(kMaxCandidates));
    if (p->random_entries > kMaxRandomEntries)
        invalid("random_entries must be at most " + std::to_string(kMaxRandomEntries));
    if (p->random_entries == 0 && ix->entry_count == 0)
        invalid("no entry nodes: give the index entry nodes or random_entries > 0");
    if (p->ctas_per_query > CAGRA_GPU_MAX_CTAS_PER_QUERY)
        invalid("ctas_per_query must be at most " + std::to_string(CAGRA_GPU_MAX_CTAS_PER_QUERY));
}

} // namespace

extern "C" {

cagra_gpu_status cagra_gpu_search_in(cagra_gpu_search_context *ctx, cagra_gpu_index *ix, const float *queries,
                                     uint32_t nq, uint32_t k, const cagra_gpu_search_params *p, const uint64_t *filter,
                                     uint32_t *ids_out, float *distances_out)
{
    return guarded([&] {
        check_context(ctx, ix);
        if (!p)
            invalid("params must not be NULL");
        if (nq == 0)
            return;
        check_batch(queries, k, ids_out, distances_out);
        check_search_params(ix, p, k);

        SearchArgs a = index_args(ix, k);
        a.random_entries = p->random_entries;
        a.seed = p->seed;
        const uint64_t row_bytes = (uint64_t)ix->stride * (ix->dtype == CAGRA_GPU_FLOAT16 ? 2 : 4);
        const SearchShape shape =
            search_shape(nq, p->itopk_size, k, p->search_width, p->ctas_per_query, ix->degree * row_bytes);
        a.ctas = shape.ctas;
        /* several CTAs per query: each walks with a buffer of its own */
        const uint32_t buffer = a.ctas > 1 ? cta_itopk_for(p->itopk_size) : p->itopk_size;
        a.max_iterations = search_max_iterations(buffer, shape.width, p->max_iterations);
        if (p->resident && !filter && search_resident_batch(ctx, ix, *p, k, queries, nq, ids_out, distances_out))
            return;
        run_batch(ctx, ix, a, shape.width, p->itopk_size, queries, nq, filter, nullptr, 0, ids_out, distances_out);
    });
}

cagra_gpu_status cagra_gpu_search_nodes(cagra_gpu_index *ix, const float *queries, uint32_t nq, uint32_t k,
                                        const uint32_t *nodes, uint32_t count, uint32_t *ids_out, float *distances_out)
{
    if (!ix) {
        last_error = "index must not be NULL";
        return CAGRA_GPU_INVALID_ARGUMENT;
    }
    return cagra_gpu_search_nodes_in(&ix->search, ix, queries, nq, k, nodes, count, ids_out, distances_out);
}

cagra_gpu_status cagra_gpu_search_nodes_in(cagra_gpu_search_context *ctx, cagra_gpu_index *ix, const float *queries,
                                           uint32_t nq, uint32_t k, const uint32_t *nodes, uint32_t count,
                                           uint32_t *ids_out, float *distances_out)
{
    return guarded([&] {
        check_context(ctx, ix);
        if (nq == 0)
            return;
        check_batch(queries, k, ids_out, distances_out);
        if (count > 0 && !nodes)
            invalid("nodes must not be NULL");
        for (uint32_t i = 0; i < count; i++)
            if (nodes[i] >= ix->n)
                invalid("node " + std::to_string(nodes[i]) + " is not in the index (" + std::to_string(ix->n) +
                        " nodes)");
        /* every node an entry, no iteration: the kernel keeps the k nearest */
        SearchArgs a = index_args(ix, k);
        a.entries_distinct = true;
        a.random_entries = 0;
        a.max_iterations = 0;
        run_batch(ctx, ix, a, 1, k, queries, nq, nullptr, nodes, count, ids_out, distances_out);
    });
}

float cagra_gpu_search_context_device_ms(cagra_gpu_search_context *ctx)
{
    float ms = -1.0f;
    if (ctx && ctx->resident_ms >= 0.0f)
        return ctx->resident_ms;
    if (!ctx || !ctx->started || !ctx->done || cudaEventElapsedTime(&ms, ctx->started, ctx->done) != cudaSuccess)
        return -1.0f;
    return ms;
}

cagra_gpu_status cagra_gpu_resident_start(cagra_gpu_index *ix, const float *query, uint32_t k,
                                          const cagra_gpu_search_params *p, uint64_t tag, int *started)
{
    if (started)
        *started = 0;
    return guarded([&] {
        if (!ix)
            invalid("index must not be NULL");
        if (!query || !started)
            invalid("query and started must not be NULL");
        if (k == 0 || k > CAGRA_GPU_MAX_K)
            invalid("k " + std::to_string(k) + " is out of range 1.." + std::to_string(CAGRA_GPU_MAX_K));
        check_search_params(ix, p, k);
        use_device(ix->device);
        ResidentKey key;
        SearchArgs a;
        *started = resident_plan(ix, *p, k, &key, &a) && resident_start(key, a, ix->dim, query, k, tag);
    });
}

cagra_gpu_status cagra_gpu_resident_collect(int device, uint32_t max, cagra_gpu_resident_done *done,
                                            uint32_t *ids_out, float *distances_out, uint32_t *count)
{
    if (count)
        *count = 0;
    return guarded([&] {
        if (!count || (max > 0 && (!done || !ids_out || !distances_out)))
            invalid("count, done and the rows must not be NULL");
        std::string failure;
        *count = resident_collect(device, max, done, ids_out, distances_out, &failure);
        if (!failure.empty())
            fail(CAGRA_GPU_DEVICE_ERROR, failure);
    });
}

void cagra_gpu_search_context_on_query_done(cagra_gpu_search_context *ctx, cagra_gpu_query_done_fn fn, void *arg)
{
    if (ctx)
        ctx->query_done = QueryDone{fn, fn ? arg : nullptr};
}

int cagra_gpu_search_context_resident(const cagra_gpu_search_context *ctx)
{
    return ctx && ctx->resident_ms >= 0.0f ? 1 : 0;
}

cagra_gpu_status cagra_gpu_search_context_stats(const cagra_gpu_search_context *ctx, cagra_gpu_search_stats *stats)
{
    return guarded([&] {
        if (!ctx || !stats)
            invalid("context and stats must not be NULL");
        *stats = ctx->stats;
    });
}

cagra_gpu_status cagra_gpu_index_search_stats(const cagra_gpu_index *ix, cagra_gpu_search_stats *stats)
{
    if (!ix) {
        last_error = "index must not be NULL";
        return CAGRA_GPU_INVALID_ARGUMENT;
    }
    return cagra_gpu_search_context_stats(&ix->search, stats);
}

uint64_t cagra_gpu_index_device_bytes(const cagra_gpu_index *ix)
{
    return ix ? ix->vectors.bytes() + ix->graph.bytes() + ix->entries.bytes() + ix->entry_rows.rows.bytes() +
                    ix->entry_rows.norms.bytes()
              : 0;
}

void cagra_gpu_index_free(cagra_gpu_index *ix)
{
    if (!ix)
        return;
    forget_resident(ix);
    cudaSetDevice(ix->device);
    delete ix;
}

} /* extern "C" */
