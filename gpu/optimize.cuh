/*
 * optimize.cuh — the kNN graph pruned and merged into the CAGRA graph on the device
 * (optimize.cu).
 */
#pragma once

#include "common.cuh"

namespace cagra_gpu {

/* Rank-based pruning, reverse edges and merge: knn (n x k) -> graph (n x degree). */
void optimize_graph(const uint32_t *knn, uint64_t n, uint32_t k, uint32_t degree, uint32_t *graph, cudaStream_t stream);

/* Device bytes of the pruning and merge (the build needs the largest sum
 * of a phase's buffers alive at once). */
uint64_t optimize_phase_bytes(uint64_t n, uint32_t k, uint32_t degree);

} // namespace cagra_gpu
