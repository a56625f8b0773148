/*
 * index.cu — an index copied to a device (vectors padded to the row
 * stride, the graph, the entry nodes and their rows), the device memory it
 * holds, and search contexts.
 */
#include <algorithm>
#include <cstring>

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
        ix->capacity = n;
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
        ix->entry_ids.assign(entries, entries + entry_count);
        if (metric_has_dot_form(metric))
            load_entry_rows(ix->entry_rows, vectors, dtype, dim, entries, entry_count, s);
        check(cudaStreamSynchronize(s), "loading the index");
    } catch (...) {
        delete ix;
        throw;
    }
    return ix;
}

namespace {

/* Row r of `count` rows of `words` 32-bit words from src (row src_ids[r],
 * or r when src_ids is NULL) to dst (row dst_ids[r], or r). */
__global__ void copy_rows_kernel(uint32_t *dst, const uint32_t *dst_ids, const uint32_t *src, const uint32_t *src_ids,
                                 uint32_t words, uint32_t count)
{
    for (uint32_t r = blockIdx.x; r < count; r += gridDim.x) {
        const uint64_t to = (uint64_t)(dst_ids ? dst_ids[r] : r) * words;
        const uint64_t from = (uint64_t)(src_ids ? src_ids[r] : r) * words;
        for (uint32_t w = threadIdx.x; w < words; w += blockDim.x)
            dst[to + w] = src[from + w];
    }
}

void copy_rows(uint32_t *dst, const uint32_t *dst_ids, const uint32_t *src, const uint32_t *src_ids, uint32_t words,
               uint32_t count, cudaStream_t s)
{
    if (count == 0)
        return;
    copy_rows_kernel<<<std::min(count, 65535u), 128, 0, s>>>(dst, dst_ids, src, src_ids, words, count);
    check_launch("copy_rows_kernel");
}

/* Room for n rows: the vectors and the graph moved to buffers a quarter
 * larger (so that a stream of small updates reallocates rarely), the new
 * rows' padding zero. */
void reserve_rows(cagra_gpu_index *ix, uint64_t n, cudaStream_t s)
{
    if (n <= ix->capacity)
        return;
    const uint64_t row_bytes = (uint64_t)ix->stride * (ix->dtype == CAGRA_GPU_FLOAT16 ? 2 : 4);
    const uint64_t capacity = std::max(n, ix->n + std::max<uint64_t>(ix->n / 4, 1024));
    require_free_memory(capacity * (row_bytes + ix->degree * 4ull), "growing this index");
    DeviceBuffer<unsigned char> vectors(capacity * row_bytes);
    DeviceBuffer<uint32_t> graph(capacity * ix->degree);
    check(cudaMemsetAsync(vectors.get() + ix->n * row_bytes, 0, (capacity - ix->n) * row_bytes, s), "cudaMemset");
    check(cudaMemcpyAsync(vectors.get(), ix->vectors.get(), ix->n * row_bytes, cudaMemcpyDeviceToDevice, s),
          "moving the vectors");
    check(cudaMemcpyAsync(graph.get(), ix->graph.get(), ix->n * ix->degree * 4, cudaMemcpyDeviceToDevice, s),
          "moving the graph");
    check(cudaStreamSynchronize(s), "growing the index");
    ix->vectors = std::move(vectors);
    ix->graph = std::move(graph);
    ix->capacity = capacity;
}

/* New entry nodes, and for a metric with a dot form their rows for
 * scoring, made from the vectors on the device. */
void replace_entries(cagra_gpu_index *ix, const uint32_t *entries, uint32_t entry_count, cudaStream_t s)
{
    const uint64_t elt = ix->dtype == CAGRA_GPU_FLOAT16 ? 2 : 4;
    const uint32_t row_words = (uint32_t)(ix->stride * elt / 4);
    ensure(ix->entries, std::max<uint32_t>(entry_count, 1), "the entry nodes");
    if (entry_count)
        check(cudaMemcpyAsync(ix->entries.get(), entries, entry_count * 4, cudaMemcpyHostToDevice, s),
              "copying the entry nodes to the device");
    if (metric_has_dot_form(ix->metric)) {
        /* the entries' rows gathered on the device, then in the host
         * layout load_entry_rows reads (dim elements a row) */
        ensure(ix->staging, (uint64_t)entry_count * row_words, "the entry rows");
        copy_rows(ix->staging.get(), nullptr, reinterpret_cast<const uint32_t *>(ix->vectors.get()),
                  ix->entries.get(), row_words, entry_count, s);
        std::vector<unsigned char> rows((uint64_t)entry_count * row_words * 4), dense((uint64_t)entry_count * ix->dim * elt);
        check(cudaMemcpyAsync(rows.data(), ix->staging.get(), rows.size(), cudaMemcpyDeviceToHost, s),
              "copying the entry rows to the host");
        check(cudaStreamSynchronize(s), "gathering the entry rows");
        for (uint32_t e = 0; e < entry_count; e++)
            std::memcpy(dense.data() + (uint64_t)e * ix->dim * elt, rows.data() + (uint64_t)e * row_words * 4,
                        ix->dim * elt);
        std::vector<uint32_t> order(entry_count);
        for (uint32_t e = 0; e < entry_count; e++)
            order[e] = e;
        load_entry_rows(ix->entry_rows, dense.data(), ix->dtype, ix->dim, order.data(), entry_count, s);
    }
    ix->entry_count = entry_count;
    ix->entry_ids.assign(entries, entries + entry_count);
}

} // namespace

void update_index(cagra_gpu_index *ix, uint64_t n, const uint32_t *node_ids, const void *node_vectors,
                  const uint32_t *node_rows, uint32_t node_count, const uint32_t *row_ids, const uint32_t *rows,
                  uint32_t row_count, const uint32_t *entries, uint32_t entry_count)
{
    /* a resident kernel holds the index's pointers and n: it starts again
     * with the next search, as they are then */
    stop_resident_for_update(ix);
    cudaStream_t s = ix->search.stream.s;
    reserve_rows(ix, n, s);

    /* into the staging buffer: the ids, the vectors padded to the row
     * stride, the rows; then each row to its place */
    const uint64_t elt = ix->dtype == CAGRA_GPU_FLOAT16 ? 2 : 4;
    const uint32_t row_words = (uint32_t)(ix->stride * elt / 4);
    const uint64_t ids_words = (uint64_t)node_count + row_count;
    const uint64_t vec_words = (uint64_t)node_count * row_words;
    const uint64_t edge_words = ids_words * ix->degree;
    ensure(ix->staging, std::max<uint64_t>(ids_words + vec_words + edge_words, 1), "an index update");
    uint32_t *ids = ix->staging.get();
    uint32_t *vecs = ids + ids_words;
    uint32_t *edges = vecs + vec_words;
    check(cudaMemcpyAsync(ids, node_ids, node_count * 4ull, cudaMemcpyHostToDevice, s), "copying an update");
    check(cudaMemcpyAsync(ids + node_count, row_ids, row_count * 4ull, cudaMemcpyHostToDevice, s), "copying an update");
    check(cudaMemsetAsync(vecs, 0, vec_words * 4, s), "cudaMemset");
    if (node_count)
        check(cudaMemcpy2DAsync(vecs, row_words * 4ull, node_vectors, ix->dim * elt, ix->dim * elt, node_count,
                                cudaMemcpyHostToDevice, s),
              "copying an update's vectors");
    check(cudaMemcpyAsync(edges, node_rows, (uint64_t)node_count * ix->degree * 4, cudaMemcpyHostToDevice, s),
          "copying an update's rows");
    check(cudaMemcpyAsync(edges + (uint64_t)node_count * ix->degree, rows, (uint64_t)row_count * ix->degree * 4,
                          cudaMemcpyHostToDevice, s),
          "copying an update's rows");
    copy_rows(reinterpret_cast<uint32_t *>(ix->vectors.get()), ids, vecs, nullptr, row_words, node_count, s);
    copy_rows(ix->graph.get(), ids, edges, nullptr, ix->degree, node_count + row_count, s);
    /* the host buffers are the caller's again after the call */
    check(cudaStreamSynchronize(s), "updating the index");
    ix->n = n;
    if (!std::equal(entries, entries + entry_count, ix->entry_ids.begin(), ix->entry_ids.end()))
        replace_entries(ix, entries, entry_count, s);
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
