/*
 * search_steps.cuh — the steps both search kernels are made of: one thread
 * block per query (search.cu) and several per query (search_multi_cta.cu).
 *
 * Keys are 64-bit, (ordered distance << 32 | id), bit 31 of the id marking
 * an expanded parent, so ascending order is nearest first.  Every function
 * here works on one CTA's own buffers in shared memory.
 */
#pragma once

#include "metric.cuh"
#include "search_args.cuh"
#include "sort.cuh"

namespace cagra_gpu {
namespace {

constexpr uint32_t kExpanded = 0x80000000u;
constexpr uint64_t kEmptyKey = ~0ULL;

template <class T>
struct Row;

template <>
struct Row<float> {
    static constexpr uint32_t per_chunk = 4;
    /* the metric's partial sum over one 16-byte chunk */
    __device__ static inline float chunk(const float *row, const float *q, uint32_t c, MetricSum sum, float acc)
    {
        const float4 x = __ldg(reinterpret_cast<const float4 *>(row) + c);
        const float4 y = reinterpret_cast<const float4 *>(q)[c];
        const float xs[4] = {x.x, x.y, x.z, x.w}, ys[4] = {y.x, y.y, y.z, y.w};
        return add_terms(sum, xs, ys, acc);
    }
};

template <>
struct Row<__half> {
    static constexpr uint32_t per_chunk = 8;
    __device__ static inline float chunk(const __half *row, const float *q, uint32_t c, MetricSum sum, float acc)
    {
        float xs[8];
        halves_to_floats(__ldg(reinterpret_cast<const uint4 *>(row) + c), xs);
        const float4 *qv = reinterpret_cast<const float4 *>(q) + 2 * c;
        const float4 qa = qv[0], qb = qv[1];
        const float qs[8] = {qa.x, qa.y, qa.z, qa.w, qb.x, qb.y, qb.z, qb.w};
        return add_terms(sum, xs, qs, acc);
    }
};

/* Threads that compute one distance together: about four 16-byte loads each. */
template <class T>
uint32_t distance_team(uint32_t stride)
{
    const uint32_t chunks = stride / Row<T>::per_chunk;
    return chunks <= 16 ? 4 : chunks <= 32 ? 8 : chunks <= 64 ? 16 : 32;
}

__device__ inline bool filter_passes(const uint64_t *filter, uint32_t id)
{
    return (filter[id >> 6] >> (id & 63)) & 1ULL;
}

/* One warp sorts up to 32 candidates in registers (a key per lane, bitonic
 * network over shuffles) and merges them into an itopk buffer of 32 * R
 * keys held as R registers per lane: no shared-memory round trips or block
 * barriers inside the network. */
template <int R>
__device__ void warp_merge_small(uint64_t *itopk, const uint64_t *cand, uint32_t count, uint32_t lane)
{
    uint64_t c = lane < count ? cand[lane] : kEmptyKey;
#pragma unroll
    for (uint32_t size = 2; size <= 32; size <<= 1) {
#pragma unroll
        for (uint32_t stride = size / 2; stride > 0; stride >>= 1) {
            uint64_t o = __shfl_xor_sync(0xFFFFFFFFu, c, stride);
            bool keep_min = ((lane & stride) == 0) == ((lane & size) == 0);
            c = keep_min ? (c < o ? c : o) : (c < o ? o : c);
        }
    }
    uint64_t v[R];
#pragma unroll
    for (int r = 0; r < R; r++)
        v[r] = itopk[r * 32 + lane];
    /* half-cleaner: the last 32 entries against the candidates reversed */
    uint64_t rc = __shfl_sync(0xFFFFFFFFu, c, 31 - lane);
    v[R - 1] = v[R - 1] < rc ? v[R - 1] : rc;
    /* bitonic merge: strides of whole registers, then across lanes */
#pragma unroll
    for (int s = R / 2; s > 0; s >>= 1) {
#pragma unroll
        for (int r = 0; r < R; r++)
            if ((r & s) == 0) {
                uint64_t a = v[r], b = v[r + s];
                v[r] = a < b ? a : b;
                v[r + s] = a < b ? b : a;
            }
    }
#pragma unroll
    for (uint32_t stride = 16; stride > 0; stride >>= 1) {
        bool lower = (lane & stride) == 0;
#pragma unroll
        for (int r = 0; r < R; r++) {
            uint64_t o = __shfl_xor_sync(0xFFFFFFFFu, v[r], stride);
            v[r] = lower ? (v[r] < o ? v[r] : o) : (v[r] < o ? o : v[r]);
        }
    }
#pragma unroll
    for (int r = 0; r < R; r++)
        itopk[r * 32 + lane] = v[r];
}

/* Sorts the keys cand[0..count), written by any thread of the CTA, and
 * merges them into itopk.  All threads call it. */
__device__ inline void merge_candidates(uint64_t *itopk, uint32_t itopk_cap, uint64_t *cand, uint32_t count)
{
    if (count <= 32 && itopk_cap <= 128) {
        __syncthreads();
        if (threadIdx.x < 32) {
            if (itopk_cap == 32)
                warp_merge_small<1>(itopk, cand, count, threadIdx.x);
            else if (itopk_cap == 64)
                warp_merge_small<2>(itopk, cand, count, threadIdx.x);
            else
                warp_merge_small<4>(itopk, cand, count, threadIdx.x);
        }
        __syncthreads();
        return;
    }
    const uint32_t sort_n = pow2_at_least(count);
    for (uint32_t c = count + threadIdx.x; c < sort_n; c += blockDim.x)
        cand[c] = kEmptyKey;
    __syncthreads();
    const uint32_t m = min(sort_n, itopk_cap);
    if (sort_n > 1)
        block_sort(cand, sort_n);
    for (uint32_t t = threadIdx.x; t < m; t += blockDim.x) {
        uint32_t i = itopk_cap - m + t;
        uint64_t x = itopk[i], y = cand[m - 1 - t];
        itopk[i] = x < y ? x : y;
    }
    __syncthreads();
    block_bitonic_merge(itopk, itopk_cap);
}

/* Computes distances for cand[0..count), pads up to the sort size, sorts,
 * and merges into itopk; a rejected candidate whose ordered distance is
 * below `drop_below` is dropped.  All threads call it. */
template <class T, int TEAM>
__device__ void distances_and_merge(const SearchArgs &a, const float *q, uint64_t *itopk, uint32_t itopk_cap,
                                    uint64_t *cand, uint32_t count, uint32_t drop_below)
{
    const MetricSum sum = metric_sum(a.metric);
    const uint32_t chunks = a.stride / Row<T>::per_chunk;
    const uint32_t team = threadIdx.x / TEAM, tl = threadIdx.x % TEAM;
    const uint32_t teams = blockDim.x / TEAM;
    const T *vectors = static_cast<const T *>(a.vectors);
    for (uint32_t base = 0; base < count; base += teams) {
        uint32_t c = base + team;
        bool valid = c < count;
        /* the team leader alone reads and later rewrites cand[c] */
        uint32_t id = valid && tl == 0 ? (uint32_t)cand[c] : 0;
        id = __shfl_sync(0xFFFFFFFFu, id, 0, TEAM);
        float acc = 0.0f;
        if (valid) {
            const T *row = vectors + (uint64_t)id * a.stride;
#pragma unroll(TEAM == 32 ? 2 : 4)
            for (uint32_t ch = tl; ch < chunks; ch += TEAM)
                acc = Row<T>::chunk(row, q, ch, sum, acc);
        }
#pragma unroll
        for (int o = TEAM / 2; o > 0; o >>= 1)
            acc += __shfl_xor_sync(0xFFFFFFFFu, acc, o, TEAM);
        if (valid && tl == 0) {
            uint32_t dk = ordered_key(distance_from_sum(a.metric, acc));
            cand[c] = dk < drop_below && !filter_passes(a.filter, id) ? kEmptyKey : ((uint64_t)dk << 32) | id;
        }
    }
    merge_candidates(itopk, itopk_cap, cand, count);
}


/* One warp removes the empty entries of a sorted buffer of `cap` keys (a
 * multiple of 32), keeping the order: each write lands at or before the
 * entry it moves, after the warp has read it.  Not inlined: inlined, it
 * pushed the fp16 kernels past their 40 registers into spilling. */
__device__ __noinline__ void close_gaps(uint64_t *buf, uint32_t cap, uint32_t lane)
{
    const uint32_t lt = (1u << lane) - 1;
    uint32_t kept = 0;
    for (uint32_t base = 0; base < cap; base += 32) {
        uint64_t key = buf[base + lane];
        uint32_t mask = __ballot_sync(0xFFFFFFFFu, key != kEmptyKey);
        if (key != kEmptyKey)
            buf[kept + __popc(mask & lt)] = key;
        kept += __popc(mask);
    }
    for (uint32_t i = kept + lane; i < cap; i += 32)
        buf[i] = kEmptyKey;
}

/* Warp 0: up to `width` unexpanded entries among the first `scan` of the
 * buffer (`cap` keys) whose ordered distance is at most `limit` become
 * parents[], marked expanded; with a filter, a parent it rejects leaves
 * the buffer, whose gaps are then closed.  Returns how many parents were
 * picked. */
__device__ __forceinline__ uint32_t pick_parents(const SearchArgs &a, uint64_t *buf, uint32_t scan, uint32_t cap,
                                                 uint32_t width, uint32_t limit, uint32_t *parents, uint32_t lane)
{
    const uint32_t lt = (1u << lane) - 1;
    uint32_t found = 0;
    bool removed = false;
    for (uint32_t base = 0; base < scan && found < width; base += 32) {
        uint32_t i = base + lane;
        uint64_t key = i < scan ? buf[i] : kEmptyKey;
        uint32_t id = (uint32_t)key;
        bool ok = id != kInvalid && !(id & kExpanded) && (uint32_t)(key >> 32) <= limit;
        uint32_t mask = __ballot_sync(0xFFFFFFFFu, ok);
        uint32_t r = found + __popc(mask & lt);
        bool rejected = false;
        if (ok && r < width) {
            parents[r] = id;
            rejected = a.filter && !filter_passes(a.filter, id);
            buf[i] = rejected ? kEmptyKey : key | kExpanded;
        }
        removed |= __any_sync(0xFFFFFFFFu, rejected);
        found += __popc(mask);
    }
    if (removed)
        close_gaps(buf, cap, lane);
    return min(found, width);
}

/* Warp 0: the first k accepted entries of a sorted buffer of `cap` keys
 * become a row of the output (ids_row, dist_row), padded with invalid ids
 * and +infinity. */
__device__ __forceinline__ void write_results(const SearchArgs &a, const uint64_t *buf, uint32_t cap, uint32_t k,
                                              uint32_t *ids_row, float *dist_row, uint32_t lane)
{
    const uint32_t lt = (1u << lane) - 1;
    uint32_t written = 0;
    for (uint32_t base = 0; base < cap && written < k; base += 32) {
        uint32_t i = base + lane;
        uint64_t key = i < cap ? buf[i] : kEmptyKey;
        uint32_t id = (uint32_t)key;
        bool ok = id != kInvalid;
        id &= ~kExpanded;
        if (ok && a.filter)
            ok = filter_passes(a.filter, id);
        uint32_t mask = __ballot_sync(0xFFFFFFFFu, ok);
        uint32_t r = written + __popc(mask & lt);
        if (ok && r < k) {
            ids_row[r] = id;
            dist_row[r] = key_to_float((uint32_t)(key >> 32));
        }
        written += __popc(mask);
    }
    for (uint32_t r = written + lane; r < k; r += 32) {
        ids_row[r] = kInvalid;
        dist_row[r] = INFINITY;
    }
}

/* The id of entry `idx` of query qi: a fixed entry node, or past them a
 * random node seeded by the query and the index. */
__device__ inline uint32_t entry_node(const SearchArgs &a, uint32_t qi, uint32_t idx)
{
    return idx < a.entry_count ? a.entries[idx] : (uint32_t)(splitmix64(a.seed ^ ((uint64_t)qi << 32 | idx)) % a.n);
}

} // namespace
} // namespace cagra_gpu
