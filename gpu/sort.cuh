/*
 * sort.cuh — bitonic sorting networks over 64-bit keys in shared memory,
 * for a whole block or for one warp on its own slice.  Keys are
 * (ordered distance << 32 | id), so ascending order is nearest first.
 */
#pragma once

#include <cstdint>

namespace cagra_gpu {

/* Sorts keys[0..n) ascending; n a power of two; every thread of the block calls it. */
__device__ inline void block_sort(uint64_t *keys, uint32_t n)
{
    for (uint32_t size = 2; size <= n; size <<= 1) {
        for (uint32_t stride = size >> 1; stride > 0; stride >>= 1) {
            for (uint32_t t = threadIdx.x; t < n / 2; t += blockDim.x) {
                uint32_t i = 2 * t - (t & (stride - 1));
                uint32_t j = i + stride;
                bool up = (i & size) == 0;
                uint64_t a = keys[i], b = keys[j];
                if ((a > b) == up) {
                    keys[i] = b;
                    keys[j] = a;
                }
            }
            __syncthreads();
        }
    }
}

/* Sorts a bitonic sequence keys[0..n) ascending (the merge half of the network). */
__device__ inline void block_bitonic_merge(uint64_t *keys, uint32_t n)
{
    for (uint32_t stride = n >> 1; stride > 0; stride >>= 1) {
        for (uint32_t t = threadIdx.x; t < n / 2; t += blockDim.x) {
            uint32_t i = 2 * t - (t & (stride - 1));
            uint32_t j = i + stride;
            uint64_t a = keys[i], b = keys[j];
            if (a > b) {
                keys[i] = b;
                keys[j] = a;
            }
        }
        __syncthreads();
    }
}

/* The same network run by one warp over its own keys[0..n). */
__device__ inline void warp_sort(uint64_t *keys, uint32_t n, uint32_t lane)
{
    for (uint32_t size = 2; size <= n; size <<= 1) {
        for (uint32_t stride = size >> 1; stride > 0; stride >>= 1) {
            for (uint32_t t = lane; t < n / 2; t += 32) {
                uint32_t i = 2 * t - (t & (stride - 1));
                uint32_t j = i + stride;
                bool up = (i & size) == 0;
                uint64_t a = keys[i], b = keys[j];
                if ((a > b) == up) {
                    keys[i] = b;
                    keys[j] = a;
                }
            }
            __syncwarp();
        }
    }
}

} // namespace cagra_gpu
