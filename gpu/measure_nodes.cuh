/*
 * measure_nodes.cuh — the exact search of a node list, and the distances
 * of given pairs (measure_nodes.cu).
 */
#pragma once

#include <cuda_fp16.h>

#include "common.cuh"

namespace cagra_gpu {

/* Past this many (query, node) pairs the node list is walked by the search
 * kernel instead (its scratch would take 16 bytes a pair). */
constexpr uint64_t kMeasurePairsLimit = 1ull << 26;

struct MeasureArgs {
    const void *vectors; /* the index's rows, `stride` elements each */
    bool half;           /* float16 rows (else float32) */
    uint32_t dim, stride;
    cagra_gpu_metric metric;
    uint32_t nq, count, k; /* measure_nodes only */
};

/* Kept in a search context between calls. */
struct MeasureScratch {
    DeviceBuffer<float> dists, sorted_dists;
    DeviceBuffer<uint32_t> ids, sorted_ids;
    DeviceBuffer<int> offsets;
    DeviceBuffer<unsigned char> temp;
};

/* Whether nq x count pairs are measured here. */
bool measure_fits(uint32_t nq, uint32_t count);

/* Every one of nq device queries (`stride` floats each) against each of the
 * `count` device node ids; each query's k nearest (nearest first; kInvalid
 * and +inf past count) into dist_out and ids_out, nq x k, on the device. */
void measure_nodes(const MeasureArgs &a, MeasureScratch &s, const float *queries, const uint32_t *nodes,
                   float *dist_out, uint32_t *ids_out, cudaStream_t stream);

/* The distance of each of `count` pairs of device ids, from[i] (a node, or
 * CAGRA_GPU_PAIR_QUERY | q: the q-th of the device queries, `stride`
 * floats each) to the node to[i], into dists on the device. */
void measure_pairs(const MeasureArgs &a, const float *queries, const uint32_t *from, const uint32_t *to, uint64_t count,
                   float *dists, cudaStream_t stream);

} // namespace cagra_gpu
