/*
 * index.cu — an index copied to a device (vectors padded to the row
 * stride, the graph, the entry nodes and their rows), the device memory it
 * holds, and search contexts.
 */
#include <algorithm>

#include "core/types.h"
#include "index.cuh"
#include "metric.cuh"

namespace cagra_gpu {

uint32_t stride_for(uint32_t dim, cagra_gpu_dtype dtype)
{
    return (uint32_t)round_up(dim, dtype == CAGRA_GPU_FLOAT16 ? 8 : 4);
}

uint64_t index_bytes(uint64_t n, uint32_t dim, uint32_t degree, cagra_gpu_dtype dtype)
{
    constexpr uint32_t kMaxEntryNodes = cagra::kMaxStoredEntries;
    uint64_t elt = dtype == CAGRA_GPU_FLOAT16 ? 2 : 4;
    return n * stride_for(dim, dtype) * elt + n * degree * 4 + kMaxEntryNodes * 4 +
           entry_rows_bytes(kMaxEntryNodes, dim);
}

cagra_gpu_index *load_index(int device, const void *vectors, cagra_gpu_dtype dtype, uint64_t n, uint32_t dim,
                            const uint32_t *graph, uint32_t degree, cagra_gpu_metric metric, const uint32_t *entries,
                            uint32_t entry_count)
{
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
    return ix;
}

cagra_gpu_search_context *make_search_context(int device)
{
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
    return c;
}

} // namespace cagra_gpu
