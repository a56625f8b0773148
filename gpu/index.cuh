/*
 * index.cuh — the library's two handles (cagra_gpu.h): an index copied to
 * a device, and a search context (a stream and the scratch of one search
 * at a time); index.cu loads the one and makes the other.
 */
#pragma once

#include <cuda_runtime.h>

#include <memory>
#include <vector>

#include "common.cuh"
#include "entry_scores.cuh"
#include "measure_nodes.cuh"
#include "search_args.cuh"
#include "search_resident.cuh"

struct cagra_gpu_search_context {
    int device = 0;
    /* wait briefly, then on a blocking event, rather than spin in
     * cudaStreamSynchronize for the whole search */
    bool blocking_wait = false;
    cagra_gpu::Stream stream;
    cudaEvent_t started = nullptr, done = nullptr; /* around the last launched search, for its device time */
    float resident_ms = -1.0f;       /* the last search's device time when the resident kernel served it, else < 0 */
    cagra_gpu::QueryDone query_done; /* cagra_gpu_search_context_on_query_done */
    /* per-batch buffers, kept and grown so small batches allocate nothing */
    cagra_gpu::DeviceBuffer<float> queries;
    cagra_gpu::DeviceBuffer<uint32_t> ids;
    cagra_gpu::DeviceBuffer<float> dists;
    cagra_gpu::DeviceBuffer<uint64_t> filter;
    cagra_gpu::DeviceBuffer<uint32_t> nodes; /* cagra_gpu_search_nodes */
    cagra_gpu::MeasureScratch measure;       /* its pairs and their sort */
    /* cagra_gpu_measure_pairs_in: the pairs' first ids, then their second
     * ids; their distances */
    cagra_gpu::DeviceBuffer<uint32_t> pair_ids;
    cagra_gpu::DeviceBuffer<float> pair_dists;
    /* multi-CTA searches: visited tables (all free between launches),
     * hand-ins, arrival counts (all 0 between launches) and bounds (all
     * kInvalid between launches) */
    cagra_gpu::DeviceBuffer<uint32_t> visited;
    cagra_gpu::DeviceBuffer<uint64_t> handed_in;
    cagra_gpu::DeviceBuffer<uint32_t> arrivals;
    cagra_gpu::DeviceBuffer<uint32_t> bounds;
    cagra_gpu::DeviceBuffer<float> entry_scores;                 /* nq x the fixed entries (entry_scores.cuh) */
    cagra_gpu::DeviceBuffer<cagra_gpu::SearchStats> batch_stats; /* the last launched batch's, zeroed before it */
    cagra_gpu_search_stats stats{};                              /* every batch's so far */
    /* page-locked copies of a batch's answers and counts, of a small
     * batch's queries and of a small measure of pairs: a copy to pageable
     * memory holds the calling thread inside the driver until the stream
     * drains, and small copies from several threads' contexts take turns
     * there (docs/benchmarks.md, "Constants") */
    std::unique_ptr<cagra_gpu::PinnedBuffer<unsigned char>> staging;
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
    uint64_t capacity = 0; /* rows the vectors and the graph have room for (updates append up to it) */
    uint32_t dim = 0, stride = 0, degree = 0, entry_count = 0;
    cagra_gpu::DeviceBuffer<unsigned char> vectors;
    cagra_gpu::DeviceBuffer<uint32_t> graph;
    cagra_gpu::DeviceBuffer<uint32_t> entries;
    std::vector<uint32_t> entry_ids;           /* the entries' host copy, to see whether an update changes them */
    cagra_gpu::DeviceBuffer<uint32_t> staging; /* an update's ids, vectors and rows on their way into place */
    cagra_gpu::EntryRows entry_rows; /* the fixed entries' rows, for scoring them per batch */
    cagra_gpu_search_context search; /* for cagra_gpu_search */
};

namespace cagra_gpu {

/* Elements of a device row of `dim` (rows aligned to 16 bytes). */
uint32_t stride_for(uint32_t dim, cagra_gpu_dtype dtype);

/* Device bytes of a loaded index (cagra_gpu_index_memory). */
uint64_t index_bytes(uint64_t n, uint32_t dim, uint32_t degree, cagra_gpu_dtype dtype);

/* A new index on the current device `device` holding copies of the host
 * buffers (cagra_gpu_index_load, arguments checked). */
cagra_gpu_index *load_index(int device, const void *vectors, cagra_gpu_dtype dtype, uint64_t n, uint32_t dim,
                            const uint32_t *graph, uint32_t degree, cagra_gpu_metric metric, const uint32_t *entries,
                            uint32_t entry_count);

/* The index brought to n nodes by an update (cagra_gpu_index_update,
 * arguments checked; the current device the index's). */
void update_index(cagra_gpu_index *ix, uint64_t n, const uint32_t *node_ids, const void *node_vectors,
                  const uint32_t *node_rows, uint32_t node_count, const uint32_t *row_ids, const uint32_t *rows,
                  uint32_t row_count, const uint32_t *entries, uint32_t entry_count);

/* A new search context on the current device `device`. */
cagra_gpu_search_context *make_search_context(int device);

} // namespace cagra_gpu
