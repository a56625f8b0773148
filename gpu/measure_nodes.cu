/*
 * measure_nodes.cu — the exact search of a node list (cagra_gpu_search_nodes):
 * every query against every listed node, all pairs at once across the
 * device (one warp a pair), then each query's distances sorted with CUB's
 * radix sort (segmented for several queries) and its first k kept.  A filtered search that
 * allows few rows comes here rather than to the search kernel, which walks
 * the list in one thread block per query.  Also the distances of given
 * pairs (cagra_gpu_measure_pairs_in), one warp a pair, by the same sums.
 */
#include <algorithm>

#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_segmented_radix_sort.cuh>

#include "measure_nodes.cuh"
#include "metric.cuh"

namespace cagra_gpu {
namespace {

template <class T>
__device__ inline float to_float(T x);
template <>
__device__ inline float to_float<float>(float x)
{
    return x;
}
template <>
__device__ inline float to_float<__half>(__half x)
{
    return __half2float(x);
}

/* Sum of the metric's terms of one row against another vector (a query or
 * a second row), by one warp. */
template <class T, class U, MetricSum S>
__device__ float warp_sum(const T *row, const U *other, uint32_t dim, uint32_t lane)
{
    float acc = 0.0f;
    for (uint32_t d = lane; d < dim; d += 32)
        acc = add_term<S>(to_float(row[d]), to_float(other[d]), acc);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        acc += __shfl_xor_sync(0xFFFFFFFFu, acc, o);
    return acc;
}

/* The metric's distance of a row and another vector, by one warp (every
 * lane gets it). */
template <class T, class U>
__device__ float warp_distance(cagra_gpu_metric metric, const T *row, const U *other, uint32_t dim, uint32_t lane)
{
    float s;
    switch (metric_sum(metric)) {
    case MetricSum::SquaredDifferences:
        s = warp_sum<T, U, MetricSum::SquaredDifferences>(row, other, dim, lane);
        break;
    case MetricSum::AbsoluteDifferences:
        s = warp_sum<T, U, MetricSum::AbsoluteDifferences>(row, other, dim, lane);
        break;
    default:
        s = warp_sum<T, U, MetricSum::Products>(row, other, dim, lane);
        break;
    }
    return distance_from_sum(metric, s);
}

template <class T>
__global__ void pair_distances_kernel(MeasureArgs a, const float *queries, const uint32_t *nodes, float *dists,
                                      uint32_t *ids)
{
    const uint32_t lane = threadIdx.x & 31;
    const uint64_t warps = (uint64_t)gridDim.x * (blockDim.x / 32);
    const uint64_t pairs = (uint64_t)a.nq * a.count;
    for (uint64_t p = (uint64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32; p < pairs; p += warps) {
        const uint32_t q = (uint32_t)(p / a.count), node = nodes[p % a.count];
        const T *row = static_cast<const T *>(a.vectors) + (uint64_t)node * a.stride;
        const float d = warp_distance(a.metric, row, queries + (uint64_t)q * a.stride, a.dim, lane);
        if (lane == 0) {
            dists[p] = d;
            ids[p] = node;
        }
    }
}

/* Pair i from a node or a query (CAGRA_GPU_PAIR_QUERY | q) to a node. */
template <class T>
__global__ void given_pairs_kernel(MeasureArgs a, const float *queries, const uint32_t *from, const uint32_t *to,
                                   uint64_t count, float *dists)
{
    const uint32_t lane = threadIdx.x & 31;
    const uint64_t warps = (uint64_t)gridDim.x * (blockDim.x / 32);
    const T *vectors = static_cast<const T *>(a.vectors);
    for (uint64_t p = (uint64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32; p < count; p += warps) {
        const uint32_t f = from[p];
        const T *row = vectors + (uint64_t)to[p] * a.stride;
        const float d =
            (f & CAGRA_GPU_PAIR_QUERY)
                ? warp_distance(a.metric, row, queries + (uint64_t)(f & ~CAGRA_GPU_PAIR_QUERY) * a.stride, a.dim, lane)
                : warp_distance(a.metric, row, vectors + (uint64_t)f * a.stride, a.dim, lane);
        if (lane == 0)
            dists[p] = d;
    }
}

__global__ void segment_offsets_kernel(uint32_t nq, uint32_t count, int *offsets)
{
    for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i <= nq; i += gridDim.x * blockDim.x)
        offsets[i] = (int)(i * count);
}

/* Each query's first k of its sorted segment, padded past count. */
__global__ void take_first_kernel(uint32_t nq, uint32_t count, uint32_t k, const float *dists, const uint32_t *ids,
                                  float *dist_out, uint32_t *ids_out)
{
    const uint64_t total = (uint64_t)nq * k;
    for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (uint64_t)gridDim.x * blockDim.x) {
        const uint64_t q = i / k, r = i % k;
        const bool real = r < count;
        dist_out[i] = real ? dists[q * count + r] : __int_as_float(0x7f800000); /* +inf */
        ids_out[i] = real ? ids[q * count + r] : kInvalid;
    }
}

} // namespace

bool measure_fits(uint32_t nq, uint32_t count)
{
    return (uint64_t)nq * count <= kMeasurePairsLimit && nq * (uint64_t)count < (uint64_t)INT32_MAX;
}

void measure_nodes(const MeasureArgs &a, MeasureScratch &s, const float *queries, const uint32_t *nodes,
                   float *dist_out, uint32_t *ids_out, cudaStream_t stream)
{
    const uint64_t pairs = (uint64_t)a.nq * a.count;
    if (pairs > 0) {
        ensure(s.dists, pairs, "this search of a node list");
        ensure(s.ids, pairs, "this search of a node list");
        ensure(s.sorted_dists, pairs, "this search of a node list");
        ensure(s.sorted_ids, pairs, "this search of a node list");
        ensure(s.offsets, (uint64_t)a.nq + 1, "this search of a node list");
        const uint32_t threads = 256;
        const uint64_t blocks = std::min<uint64_t>(div_up(pairs, threads / 32), 65535);
        if (a.half)
            pair_distances_kernel<__half><<<(uint32_t)blocks, threads, 0, stream>>>(a, queries, nodes, s.dists.get(),
                                                                                    s.ids.get());
        else
            pair_distances_kernel<float><<<(uint32_t)blocks, threads, 0, stream>>>(a, queries, nodes, s.dists.get(),
                                                                                   s.ids.get());
        check_launch("pair_distances_kernel");
        segment_offsets_kernel<<<(uint32_t)div_up((uint64_t)a.nq + 1, 256), 256, 0, stream>>>(a.nq, a.count,
                                                                                           s.offsets.get());
        check_launch("segment_offsets_kernel");
        /* one query (a filtered index scan): the device-wide sort, whose
         * blocks share the segment; several: a segment each */
        auto sort = [&](void *temp, size_t &bytes) {
            if (a.nq == 1)
                return cub::DeviceRadixSort::SortPairs(temp, bytes, s.dists.get(), s.sorted_dists.get(), s.ids.get(),
                                                       s.sorted_ids.get(), (int)pairs, 0, 32, stream);
            return cub::DeviceSegmentedRadixSort::SortPairs(temp, bytes, s.dists.get(), s.sorted_dists.get(),
                                                            s.ids.get(), s.sorted_ids.get(), (int)pairs, (int)a.nq,
                                                            s.offsets.get(), s.offsets.get() + 1, 0, 32, stream);
        };
        size_t temp = 0;
        check(sort(nullptr, temp), "sizing the sort of a node list's distances");
        ensure(s.temp, std::max<size_t>(temp, 1), "this search of a node list");
        check(sort(s.temp.get(), temp), "sorting a node list's distances");
    }
    const uint64_t out = (uint64_t)a.nq * a.k;
    take_first_kernel<<<(uint32_t)std::min<uint64_t>(div_up(out, 256), 65535), 256, 0, stream>>>(
        a.nq, a.count, a.k, s.sorted_dists.get(), s.sorted_ids.get(), dist_out, ids_out);
    check_launch("take_first_kernel");
}

void measure_pairs(const MeasureArgs &a, const float *queries, const uint32_t *from, const uint32_t *to, uint64_t count,
                   float *dists, cudaStream_t stream)
{
    if (count == 0)
        return;
    const uint32_t threads = 256;
    const uint32_t blocks = (uint32_t)std::min<uint64_t>(div_up(count, threads / 32), 65535);
    if (a.half)
        given_pairs_kernel<__half><<<blocks, threads, 0, stream>>>(a, queries, from, to, count, dists);
    else
        given_pairs_kernel<float><<<blocks, threads, 0, stream>>>(a, queries, from, to, count, dists);
    check_launch("given_pairs_kernel");
}

} // namespace cagra_gpu
