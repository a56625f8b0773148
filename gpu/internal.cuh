/*
 * internal.cuh — the library's internal interfaces between its CUDA files:
 * the device dataset used by the build, the kNN build (nn_descent.cu), the
 * graph optimisation (optimize.cu), the connect step (connect.cu), the
 * long edges (long_edges.cu) and their memory formulas, for the build
 * pipeline (build.cu).
 */
#pragma once

#include <cuda_fp16.h>

#include <vector>

#include "common.cuh"
#include "core/build.h"

namespace cagra_gpu {

/* Width of the forward samples per list in one NN-descent iteration. */
constexpr uint32_t kSample = 32;
/* Candidate slots per node collected between two merges. */
constexpr uint32_t kCandidateSlots = 64;
/* Up to this many nodes the kNN graph is computed exactly. */
constexpr uint64_t kExactKnnLimit = 1024;
/* Largest intermediate degree the device build takes. */
constexpr uint32_t kMaxIntermediateDegree = 512;

/* The build's copy of the data: fp16, rows padded with zeros to `dim16`
 * (a multiple of 16 for the tensor-core tiles), scaled by a power of two
 * so the largest magnitude fits fp16 comfortably; squared norms in fp32. */
struct HalfDataset {
    DeviceBuffer<__half> vectors;
    DeviceBuffer<float> norms;
    uint64_t n = 0;
    uint32_t dim = 0;
    uint32_t dim16 = 0;
    float inv_scale = 1.0f;  /* 1 / scale: turns scaled L1 distances back into true ones */
    float inv_scale2 = 1.0f; /* 1 / scale^2: turns scaled dots back into true ones */
};

/* Rows of dim floats the build's upload stages at a time: about 64 MB. */
inline uint64_t upload_chunk_rows(uint32_t dim)
{
    return std::max<uint64_t>(1, (64ull << 20) / (4ull * dim));
}

/* Uploads n x dim float32 host rows and converts them, upload_chunk_rows
 * at a time through two staging buffers. */
void make_half_dataset(const float *host, uint64_t n, uint32_t dim, HalfDataset &out, cudaStream_t stream);

/* kNN graph, n x k ids, nearest first, no self edge; kInvalid pads when n - 1 < k. */
void build_knn(const HalfDataset &data, cagra_gpu_metric metric, uint32_t k, const cagra_gpu_build_params &params,
               uint32_t *knn, cudaStream_t stream);

/* Rank-based pruning, reverse edges and merge: knn (n x k) -> graph (n x degree). */
void optimize_graph(const uint32_t *knn, uint64_t n, uint32_t k, uint32_t degree, uint32_t *graph, cudaStream_t stream);

/* What connect_graph did: the links it added, and the nodes `entry` still
 * does not reach when its bounded passes ran out (0: every node reached). */
struct ConnectResult {
    uint64_t links = 0;
    uint64_t unreached = 0;
};

/* Links every node into the part reachable from `entry` (device graph,
 * edited in place). */
ConnectResult connect_graph(const HalfDataset &data, cagra_gpu_metric metric, uint32_t *graph, uint32_t degree,
                            uint32_t entry, cudaStream_t stream);
uint64_t connect_phase_bytes(uint64_t n, uint32_t dim16);

/* The node nearest to the mean of the data (a fixed entry node). */
uint32_t central_node(const HalfDataset &data, cudaStream_t stream);

/* Fixed entry nodes after `first`: farthest-point picks over a seeded
 * sample of 8192 nodes (of `pool` when given and not empty), `want` in all
 * (fewer when the sample runs out). */
std::vector<uint32_t> farthest_entry_nodes(const HalfDataset &data, cagra_gpu_metric metric, uint32_t first,
                                           uint64_t seed, uint32_t want, cudaStream_t stream,
                                           const std::vector<uint32_t> *pool = nullptr);

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

/* Device bytes of each phase; the build needs the largest sum alive at once. */
uint64_t knn_phase_bytes(uint64_t n, uint32_t k);
uint64_t optimize_phase_bytes(uint64_t n, uint32_t k, uint32_t degree);
/* The probe and the long edges, besides the graph and the fp16 set (0 below kLongEdgeMinNodes). */
uint64_t long_edge_phase_bytes(uint64_t n, uint32_t dim16, uint32_t intermediate, uint32_t degree);

} // namespace cagra_gpu
