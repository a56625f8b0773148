/*
 * api.cu — the C interface of libcagra_gpu.so (cagra_gpu.h): each call
 * checks its arguments and selects the device, then hands the work to the
 * build pipeline (build.cu), the index and its contexts (index.cu), the
 * search planner (search_plan.cu) and the batch run (search_batch.cu).  It
 * is the boundary where internal failures become a status and a message:
 * no C++ exception leaves this file.
 */
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <new>
#include <string>

#include "build.cuh"
#include "core/types.h"
#include "index.cuh"
#include "nn_descent.cuh"
#include "search_batch.cuh"
#include "search_plan.cuh"
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

/* What every traversal checks of its settings. */
void check_search_params(const cagra_gpu_index *ix, const cagra_gpu_search_params *p, uint32_t k)
{
    if (!p)
        invalid("params must not be NULL");
    if (p->itopk_size < k || p->itopk_size > CAGRA_GPU_MAX_ITOPK)
        invalid("itopk_size " + std::to_string(p->itopk_size) + " must lie between k (" + std::to_string(k) + ") and " +
                std::to_string(CAGRA_GPU_MAX_ITOPK));
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

/* Compiled for the architectures of every other kernel: the image the
 * runtime picks for it on a device is the one they all run there. */
__global__ void image_probe_kernel() {}

} // namespace

} // namespace cagra_gpu

using namespace cagra_gpu;

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
        cudaFuncAttributes image;
        const cudaError_t err = cudaFuncGetAttributes(&image, image_probe_kernel);
        if (err != cudaSuccess) {
            cudaGetLastError();
            const std::string device_name = std::string(prop.name) + " (compute capability " +
                                            std::to_string(prop.major) + "." + std::to_string(prop.minor) + ")";
            fail(CAGRA_GPU_NO_DEVICE, device_name +
                                          " cannot run this libcagra_gpu (built for " CAGRA_GPU_ARCHITECTURES "): " +
                                          cudaGetErrorString(err));
        }
        info->binary_version = image.binaryVersion;
        info->ptx_version = image.ptxVersion;
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
                                 uint32_t entry_capacity, cagra_gpu_build_result *result)
{
    cagra_gpu_build_result local;
    if (!result)
        result = &local;
    std::memset(result, 0, sizeof *result);
    return guarded([&] {
        if (!data || !graph_out)
            invalid("data and graph_out must not be NULL");
        if (entry_capacity && !entries_out)
            invalid("entries_out is NULL but entry_capacity is " + std::to_string(entry_capacity));
        check_shape(n, dim);
        check_metric(metric);
        check_build_params(params);
        use_device(device);
        require_free_memory(build_bytes(n, dim, params->intermediate_degree, params->graph_degree), "this build");
        run_build(data, n, dim, metric, *params, graph_out, entries_out, entry_capacity, result);
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
        require_free_memory(build_bytes(n, dim, params->intermediate_degree, params->graph_degree), "this kNN build");
        run_build_knn(data, n, dim, metric, *params, knn_out);
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

        *index = load_index(device, vectors, dtype, n, dim, graph, degree, metric, entries, entry_count);
    });
}

cagra_gpu_status cagra_gpu_index_update(cagra_gpu_index *index, uint64_t n, const uint32_t *node_ids,
                                        const void *node_vectors, const uint32_t *node_rows, uint32_t node_count,
                                        const uint32_t *row_ids, const uint32_t *rows, uint32_t row_count,
                                        const uint32_t *entries, uint32_t entry_count)
{
    return guarded([&] {
        if (!index)
            invalid("index must not be NULL");
        if ((node_count && (!node_ids || !node_vectors || !node_rows)) || (row_count && (!row_ids || !rows)))
            invalid("the nodes' and rows' arrays must not be NULL");
        if (n < index->n || n > kMaxNodes)
            invalid("an update brings the index from " + std::to_string(index->n) + " nodes to " + std::to_string(n));
        if (node_count < n - index->n)
            invalid("an update lacks appended nodes");
        if (entry_count > kMaxEntryNodes || (entry_count && !entries))
            invalid("entry_count must be at most " + std::to_string(kMaxEntryNodes) + " with a non-NULL entries array");
        /* a bad id would send a kernel outside the index: check them all */
        for (uint32_t i = 0; i < node_count; i++)
            if (node_ids[i] >= n || (i < n - index->n && node_ids[i] != index->n + i))
                invalid("an update's nodes must be the appended ones first, in order, then others below n");
        for (uint32_t i = 0; i < row_count; i++)
            if (row_ids[i] >= n)
                invalid("an update names row " + std::to_string(row_ids[i]) + ", beyond the " + std::to_string(n) +
                        " nodes");
        for (const auto &[edges, count] : {std::pair{node_rows, node_count}, std::pair{rows, row_count}})
            for (uint64_t i = 0; i < (uint64_t)count * index->degree; i++)
                if (edges[i] >= n && edges[i] != kInvalid)
                    invalid("an update's edge points at node " + std::to_string(edges[i]) + ", beyond the " +
                            std::to_string(n) + " nodes");
        for (uint32_t i = 0; i < entry_count; i++)
            if (entries[i] >= n)
                invalid("entry node " + std::to_string(entries[i]) + " is beyond the " + std::to_string(n) + " nodes");
        use_device(index->device);
        update_index(index, n, node_ids, node_vectors, node_rows, node_count, row_ids, rows, row_count, entries,
                     entry_count);
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
        *context = make_search_context(device);
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

        uint32_t width = 0;
        SearchArgs a = plan_batch(ix, *p, nq, k, &width);
        if (p->resident && !filter && search_resident_batch(ctx, ix, *p, k, queries, nq, ids_out, distances_out))
            return;
        run_batch(ctx, ix, a, width, p->itopk_size, queries, nq, filter, nullptr, 0, ids_out, distances_out);
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

cagra_gpu_status cagra_gpu_measure_pairs_in(cagra_gpu_search_context *ctx, cagra_gpu_index *ix, const float *queries,
                                            uint32_t nq, const uint32_t *from, const uint32_t *to, uint64_t count,
                                            float *distances_out)
{
    return guarded([&] {
        check_context(ctx, ix);
        if (nq > 0 && !queries)
            invalid("queries must not be NULL when nq is " + std::to_string(nq));
        if (count == 0)
            return;
        if (!from || !to || !distances_out)
            invalid("from, to and distances_out must not be NULL");
        for (uint64_t i = 0; i < count; i++) {
            const uint32_t q = from[i] & ~CAGRA_GPU_PAIR_QUERY;
            if ((from[i] & CAGRA_GPU_PAIR_QUERY) && q >= nq)
                invalid("pair " + std::to_string(i) + " is from query " + std::to_string(q) + ", beyond the " +
                        std::to_string(nq) + " queries");
            if (!(from[i] & CAGRA_GPU_PAIR_QUERY) && from[i] >= ix->n)
                invalid("pair " + std::to_string(i) + " is from node " + std::to_string(from[i]) +
                        ", not in the index (" + std::to_string(ix->n) + " nodes)");
            if (to[i] >= ix->n)
                invalid("pair " + std::to_string(i) + " is to node " + std::to_string(to[i]) + ", not in the index (" +
                        std::to_string(ix->n) + " nodes)");
        }
        run_pairs(ctx, ix, queries, nq, from, to, count, distances_out);
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

cagra_gpu_status cagra_gpu_resident_collect(int device, uint32_t max, cagra_gpu_resident_done *done, uint32_t *ids_out,
                                            float *distances_out, uint32_t *count)
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
