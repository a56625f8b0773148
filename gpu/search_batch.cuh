/*
 * search_batch.cuh — a planned batch run on the device through a search
 * context (search_batch.cu): its queries, filter or nodes copied over, the
 * kernel, the answers copied back; or served by the resident kernel; and
 * the distances of given pairs.
 */
#pragma once

#include "index.cuh"
#include "search_args.cuh"

namespace cagra_gpu {

/* Plan `a` (shared memory), copy the queries and the filter (NULL: none)
 * or, for distinct entries, the `count` ids of `nodes` to the device, run
 * the kernel and copy the answers back. */
void run_batch(cagra_gpu_search_context *ctx, const cagra_gpu_index *ix, SearchArgs &a, uint32_t width, uint32_t itopk,
               const float *queries, uint32_t nq, const uint64_t *filter, const uint32_t *nodes, uint32_t count,
               uint32_t *ids_out, float *distances_out);

/* The distances of `count` pairs (cagra_gpu_measure_pairs_in, arguments
 * checked): the nq queries and the ids to the device, the distances back,
 * waited for. */
void run_pairs(cagra_gpu_search_context *ctx, const cagra_gpu_index *ix, const float *queries, uint32_t nq,
               const uint32_t *from, const uint32_t *to, uint64_t count, float *distances_out);

/* The batch through the device's resident kernel; false when the kernel
 * cannot take it. */
bool search_resident_batch(cagra_gpu_search_context *ctx, const cagra_gpu_index *ix, const cagra_gpu_search_params &p,
                           uint32_t k, const float *queries, uint32_t nq, uint32_t *ids_out, float *distances_out);

} // namespace cagra_gpu
