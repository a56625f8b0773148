/*
 * nn_descent.cuh — the kNN graph on the device (nn_descent.cu).
 */
#pragma once

#include "dataset.cuh"

namespace cagra_gpu {

/* Width of the forward samples per list in one NN-descent iteration. */
constexpr uint32_t kSample = 32;
/* Candidate slots per node collected between two merges. */
constexpr uint32_t kCandidateSlots = 64;
/* Up to this many nodes the kNN graph is computed exactly. */
constexpr uint64_t kExactKnnLimit = 1024;
/* Largest intermediate degree the device build takes. */
constexpr uint32_t kMaxIntermediateDegree = 512;

/* kNN graph, n x k ids, nearest first, no self edge; kInvalid pads when n - 1 < k. */
void build_knn(const HalfDataset &data, cagra_gpu_metric metric, uint32_t k, const cagra_gpu_build_params &params,
               uint32_t *knn, cudaStream_t stream);

/* Device bytes of NN-descent besides the kNN lists' ids (the build needs
 * the largest sum of a phase's buffers alive at once). */
uint64_t knn_phase_bytes(uint64_t n, uint32_t k);

} // namespace cagra_gpu
