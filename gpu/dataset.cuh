/*
 * dataset.cuh — the build's fp16 copy of the data on the device and the fixed entry
 * nodes picked from it (dataset.cu).
 */
#pragma once

#include <cuda_fp16.h>

#include <algorithm>
#include <vector>

#include "common.cuh"
#include "metric.cuh"

namespace cagra_gpu {

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

/* The metric's sum of two fp16 rows (dim16 halves), by one warp, 16-byte loads. */
__device__ inline float warp_sum_half(MetricSum sum, const __half *a, const __half *b, uint32_t dim16, uint32_t lane)
{
    float acc = 0.0f;
    const uint4 *va = reinterpret_cast<const uint4 *>(a);
    const uint4 *vb = reinterpret_cast<const uint4 *>(b);
    for (uint32_t c = lane; c < dim16 / 8; c += 32) {
        float xs[8], ys[8];
        halves_to_floats(va[c], xs);
        halves_to_floats(vb[c], ys);
        acc = add_terms(sum, xs, ys, acc);
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        acc += __shfl_xor_sync(0xFFFFFFFFu, acc, o);
    return acc;
}

/* The node nearest to the mean of the data (a fixed entry node). */
uint32_t central_node(const HalfDataset &data, cudaStream_t stream);

/* Fixed entry nodes after `first`: farthest-point picks over a seeded
 * sample of 8192 nodes (of `pool` when given and not empty), `want` in all
 * (fewer when the sample runs out). */
std::vector<uint32_t> farthest_entry_nodes(const HalfDataset &data, cagra_gpu_metric metric, uint32_t first,
                                           uint64_t seed, uint32_t want, cudaStream_t stream,
                                           const std::vector<uint32_t> *pool = nullptr);

} // namespace cagra_gpu
