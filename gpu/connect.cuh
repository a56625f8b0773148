/*
 * connect.cuh — every node made reachable from the first entry node (connect.cu).
 */
#pragma once

#include "dataset.cuh"

namespace cagra_gpu {

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

} // namespace cagra_gpu
