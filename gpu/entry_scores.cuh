/*
 * entry_scores.cuh — the fixed entry nodes of a batch ranked for every
 * query at once (entry_scores.cu), so that each query's walk measures
 * exactly only the entries it keeps instead of all of them.
 *
 * The fixed entries are the same for every query of an index, so their
 * dots with a batch of queries are one matrix product: tensor cores in
 * fp16, a few hundred microseconds for 10,000 queries of 1,024 dimensions
 * against 512 entries, where measuring every entry in every query's walk
 * read 1 MB of rows a query and cost 8-20% of the batch's time.  The
 * scores only rank the entries (the query's own norm, the same for all of
 * them, is left out); the walk then measures the best itopk of them
 * exactly, so every distance it returns is exact.
 */
#pragma once

#include <cuda_fp16.h>

#include "common.cuh"

namespace cagra_gpu {

/* An index's fixed entry nodes as fp16 rows for the product: `count` rows
 * of `stride` halves (a multiple of 16, zero padded, and zero rows up to a
 * multiple of kScoreEntryTile), scaled by `scale` so the largest magnitude
 * is 1, with their squared norms. */
struct EntryRows {
    DeviceBuffer<__half> rows;
    DeviceBuffer<float> norms;
    uint32_t count = 0, stride = 0;
    float scale = 1.0f;
};

/* Entries scored per thread block of the product. */
constexpr uint32_t kScoreEntryTile = 256;

/* Batches whose scores would take more than this many bytes measure their
 * entries in the walk instead. */
constexpr uint64_t kEntryScoreBytesLimit = 256ull << 20;

/* The device bytes of an index's EntryRows for `count` entries of dim. */
uint64_t entry_rows_bytes(uint32_t count, uint32_t dim);

/* Gathers the rows of `entries` from the host rows (n x dim, fp32 or
 * fp16) and uploads them. */
void load_entry_rows(EntryRows &out, const void *vectors, cagra_gpu_dtype dtype, uint32_t dim, const uint32_t *entries,
                     uint32_t count, cudaStream_t stream);

/* scores[q * rows.count + e] for nq device queries (`query_stride` floats
 * each): a value that orders the entries by the metric's distance from
 * query q (L2: |e|^2 - 2 q.e; inner product and cosine: -q.e, all scaled
 * alike).  The metric must have a dot form (metric_has_dot_form). */
void score_entries(const EntryRows &rows, cagra_gpu_metric metric, const float *queries, uint32_t query_stride,
                   uint32_t nq, float *scores, cudaStream_t stream);

} // namespace cagra_gpu
