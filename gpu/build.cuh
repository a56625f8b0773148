/*
 * build.cuh — the build pipeline of the library (build.cu): the graph of a
 * set of host vectors, final when it returns, and the device memory it
 * needs.  Arguments are checked by the C API (api.cu) before these run.
 */
#pragma once

#include "common.cuh"

namespace cagra_gpu {

/* Device bytes a build of n x dim rows needs at its peak (the largest sum
 * of buffers alive at once, over its steps). */
uint64_t build_bytes(uint64_t n, uint32_t dim, uint32_t intermediate_degree, uint32_t graph_degree);

/* The whole build on the current device (cagra_gpu_build); *result filled. */
void run_build(const float *data, uint64_t n, uint32_t dim, cagra_gpu_metric metric,
               const cagra_gpu_build_params &params, uint32_t *graph_out, uint32_t *entries_out,
               uint32_t entry_capacity, cagra_gpu_build_result *result);

/* Only the kNN graph (cagra_gpu_build_knn), n >= 2. */
void run_build_knn(const float *data, uint64_t n, uint32_t dim, cagra_gpu_metric metric,
                   const cagra_gpu_build_params &params, uint32_t *knn_out);

} // namespace cagra_gpu
