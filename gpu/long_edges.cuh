/*
 * long_edges.cuh — the navigation probe and the long edges of hard sets (long_edges.cu:
 * the core's build step 8).
 */
#pragma once

#include <vector>

#include "dataset.cuh"

namespace cagra_gpu {

/* Long edges (long_edges.cu; the core's build step 8).  From this many
 * nodes a build probes its graph (cagra::kNavigationProbes nodes, above
 * cagra::kLongEdgeMissRate misses it adds long edges: core/build.h). */
constexpr uint64_t kLongEdgeMinNodes = 2048;

/* Fraction of the probes whose search does not return them first (the
 * device graph, the fixed entries plus the default random ones). */
double navigation_miss_rate(const HalfDataset &data, cagra_gpu_metric metric, const uint32_t *graph, uint32_t degree,
                            const std::vector<uint32_t> &entries, uint64_t seed, cudaStream_t stream);

/* Splices long edges into the rows of sampled nodes (device graph, edited in
 * place); returns the pool for the fixed entries (the nodes of the highest
 * level with at least 1024, or of the first level), empty when n is too
 * small for a sample and the graph was left as it was. */
std::vector<uint32_t> add_long_edges(const HalfDataset &data, cagra_gpu_metric metric, uint32_t *graph, uint32_t degree,
                                     const cagra_gpu_build_params &params, cudaStream_t stream);

/* The probe and the long edges, besides the graph and the fp16 set (0 below kLongEdgeMinNodes). */
uint64_t long_edge_phase_bytes(uint64_t n, uint32_t dim16, uint32_t intermediate, uint32_t degree);

} // namespace cagra_gpu
