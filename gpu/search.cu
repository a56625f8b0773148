/*
 * search.cu — batched CAGRA search, one CTA per query.
 *
 * Shared memory per CTA: the query (fp32), the itopk buffer and the
 * candidate buffer as sorted 64-bit keys (ordered distance << 32 | id, bit
 * 31 of the id marking an expanded parent), and a visited hash (open
 * addressing).  Each iteration picks up to search_width unexpanded parents
 * from the first itopk_size entries, gathers their neighbours not yet in
 * the hash, computes exact fp32 distances with a team of threads per vector
 * (16-byte loads), sorts the candidates with a bitonic network and merges
 * them into itopk (half-cleaner, then a bitonic merge).
 *
 * The hash forgets: when it passes half full it is cleared and refilled
 * with the ids now in itopk.  A forgotten node can only come back with a
 * distance no better than the current itopk's worst (which only decreases),
 * so forgetting never duplicates results; it costs recomputed distances.
 *
 * With a filter, a parent the filter rejects leaves itopk once expanded, so
 * that itopk fills with nodes that may be returned however few pass (a
 * traversal otherwise ends with itopk full of rejected nodes).  Such a node
 * is forgotten by the hash with the rest; coming back it would be expanded
 * again, and the search would walk the same ground after every forgetting.
 * So after forgetting, a rejected candidate closer than the best unexpanded
 * entry of itopk at that moment (closer nodes were, as a rule, met and
 * expanded before) is dropped.
 *
 * With entries_distinct the entries are given node ids, measured without
 * the hash: with no iteration, the exact nearest of those nodes.
 */
#include <algorithm>

#include "metric.cuh"
#include "search.cuh"
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

__device__ inline bool hash_insert(uint32_t *hash, uint32_t mask, uint32_t *count, uint32_t id)
{
    uint32_t h = hash32(id) & mask;
    for (;;) {
        uint32_t prev = atomicCAS(&hash[h], kInvalid, id);
        if (prev == kInvalid) {
            atomicAdd(count, 1u);
            return true;
        }
        if (prev == id)
            return false;
        h = (h + 1) & mask;
    }
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

__device__ inline bool filter_passes(const uint64_t *filter, uint32_t id)
{
    return (filter[id >> 6] >> (id & 63)) & 1ULL;
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

template <class T, int TEAM>
__global__ void __launch_bounds__(256, 6) search_kernel(SearchArgs a)
{
    extern __shared__ __align__(16) unsigned char smem[];
    __shared__ uint32_t s_cand_count, s_hash_count, s_parents, s_drop_below;
    float *q = reinterpret_cast<float *>(smem + a.query_off);
    uint64_t *itopk = reinterpret_cast<uint64_t *>(smem + a.itopk_off);
    uint64_t *cand = reinterpret_cast<uint64_t *>(smem + a.cand_off);
    uint32_t *hash = reinterpret_cast<uint32_t *>(smem + a.hash_off);
    uint32_t *parents = reinterpret_cast<uint32_t *>(smem + a.parents_off);
    const uint32_t qi = blockIdx.x;
    const uint32_t tid = threadIdx.x, lane = tid & 31, warp = tid / 32;
    const uint32_t hmask = a.hash_slots - 1;
    const uint32_t lt = (1u << lane) - 1;

    for (uint32_t i = tid; i < a.stride; i += blockDim.x)
        q[i] = a.queries[(uint64_t)qi * a.stride + i];
    for (uint32_t i = tid; i < a.itopk_cap; i += blockDim.x)
        itopk[i] = kEmptyKey;
    for (uint32_t i = tid; i < a.hash_slots; i += blockDim.x)
        hash[i] = kInvalid;
    if (tid == 0) {
        s_cand_count = 0;
        s_hash_count = 0;
        s_drop_below = 0; /* no candidate is dropped */
    }
    __syncthreads();

    /* Entry nodes: the fixed ones, then random ones, a candidate buffer at a time. */
    const uint32_t entries = a.entry_count + a.random_entries;
    for (uint32_t base = 0; base < entries; base += a.cand_cap) {
        for (uint32_t t = tid; t < a.cand_cap && base + t < entries; t += blockDim.x) {
            uint32_t idx = base + t;
            uint32_t id = idx < a.entry_count ? a.entries[idx]
                                              : (uint32_t)(splitmix64(a.seed ^ ((uint64_t)qi << 32 | idx)) % a.n);
            if (a.entries_distinct || hash_insert(hash, hmask, &s_hash_count, id))
                cand[atomicAdd(&s_cand_count, 1u)] = id;
        }
        __syncthreads();
        uint32_t count = s_cand_count;
        __syncthreads();
        if (tid == 0)
            s_cand_count = 0;
        if (count)
            distances_and_merge<T, TEAM>(a, q, itopk, a.itopk_cap, cand, count, 0);
        __syncthreads();
    }

    for (uint32_t iter = 0; iter < a.max_iterations; iter++) {
        /* Forget: refill the hash with what itopk holds. */
        if (s_hash_count + a.step_cands > a.hash_slots / 2) {
            __syncthreads();
            for (uint32_t i = tid; i < a.hash_slots; i += blockDim.x)
                hash[i] = kInvalid;
            if (tid == 0)
                s_hash_count = 0;
            __syncthreads();
            for (uint32_t i = tid; i < a.itopk_cap; i += blockDim.x) {
                uint32_t id = (uint32_t)itopk[i];
                if (id != kInvalid)
                    hash_insert(hash, hmask, &s_hash_count, id & ~kExpanded);
            }
            if (a.filter && warp == 0) {
                /* the ordered distance of the best unexpanded entry */
                uint32_t best_unexpanded = 0;
                for (uint32_t base = 0; base < a.itopk; base += 32) {
                    uint32_t i = base + lane;
                    uint32_t id = i < a.itopk ? (uint32_t)itopk[i] : kInvalid;
                    uint32_t mask = __ballot_sync(0xFFFFFFFFu, id != kInvalid && !(id & kExpanded));
                    if (mask) {
                        best_unexpanded = (uint32_t)(itopk[base + __ffs(mask) - 1] >> 32);
                        break;
                    }
                }
                if (lane == 0)
                    s_drop_below = best_unexpanded;
            }
            __syncthreads();
        }
        if (warp == 0) {
            uint32_t found = 0;
            bool removed = false;
            for (uint32_t base = 0; base < a.itopk && found < a.width; base += 32) {
                uint32_t i = base + lane;
                uint64_t key = i < a.itopk ? itopk[i] : kEmptyKey;
                uint32_t id = (uint32_t)key;
                bool ok = id != kInvalid && !(id & kExpanded);
                uint32_t mask = __ballot_sync(0xFFFFFFFFu, ok);
                uint32_t r = found + __popc(mask & lt);
                bool rejected = false;
                if (ok && r < a.width) {
                    parents[r] = id;
                    rejected = a.filter && !filter_passes(a.filter, id);
                    itopk[i] = rejected ? kEmptyKey : key | kExpanded;
                }
                removed |= __any_sync(0xFFFFFFFFu, rejected);
                found += __popc(mask);
            }
            if (removed)
                close_gaps(itopk, a.itopk_cap, lane);
            if (lane == 0)
                s_parents = min(found, a.width);
        }
        __syncthreads();
        const uint32_t np = s_parents;
        if (np == 0)
            break;
        for (uint32_t t = tid; t < np * a.degree; t += blockDim.x) {
            uint32_t p = t / a.degree, e = t - p * a.degree;
            uint32_t id = __ldg(a.graph + (uint64_t)parents[p] * a.degree + e);
            if (id != kInvalid && hash_insert(hash, hmask, &s_hash_count, id))
                cand[atomicAdd(&s_cand_count, 1u)] = id;
        }
        __syncthreads();
        uint32_t count = s_cand_count;
        __syncthreads();
        if (tid == 0)
            s_cand_count = 0;
        if (count)
            distances_and_merge<T, TEAM>(a, q, itopk, a.itopk_cap, cand, count, s_drop_below);
        __syncthreads();
    }

    /* The first k accepted entries, in order. */
    if (warp == 0) {
        uint32_t written = 0;
        for (uint32_t base = 0; base < a.itopk_cap && written < a.k; base += 32) {
            uint32_t i = base + lane;
            uint64_t key = i < a.itopk_cap ? itopk[i] : kEmptyKey;
            uint32_t id = (uint32_t)key;
            bool ok = id != kInvalid;
            id &= ~kExpanded;
            if (ok && a.filter)
                ok = filter_passes(a.filter, id);
            uint32_t mask = __ballot_sync(0xFFFFFFFFu, ok);
            uint32_t r = written + __popc(mask & lt);
            if (ok && r < a.k) {
                a.ids_out[(uint64_t)qi * a.k + r] = id;
                a.dist_out[(uint64_t)qi * a.k + r] = key_to_float((uint32_t)(key >> 32));
            }
            written += __popc(mask);
        }
        for (uint32_t r = written + lane; r < a.k; r += 32) {
            a.ids_out[(uint64_t)qi * a.k + r] = kInvalid;
            a.dist_out[(uint64_t)qi * a.k + r] = INFINITY;
        }
    }
}

template <class T, int TEAM>
void launch(const SearchArgs &a, uint32_t nq, uint32_t threads, cudaStream_t stream)
{
    if (a.smem_bytes > 48 * 1024)
        check(cudaFuncSetAttribute(search_kernel<T, TEAM>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   (int)a.smem_bytes),
              "raising the search kernel's shared memory limit");
    search_kernel<T, TEAM><<<nq, threads, a.smem_bytes, stream>>>(a);
    check_launch("search_kernel");
}

template <class T>
void launch_team(const SearchArgs &a, uint32_t nq, uint32_t threads, cudaStream_t stream)
{
    /* about four 16-byte loads per thread of a team */
    uint32_t chunks = a.stride / Row<T>::per_chunk;
    if (chunks <= 16)
        launch<T, 4>(a, nq, threads, stream);
    else if (chunks <= 32)
        launch<T, 8>(a, nq, threads, stream);
    else if (chunks <= 64)
        launch<T, 16>(a, nq, threads, stream);
    else
        launch<T, 32>(a, nq, threads, stream);
}

} // namespace

uint32_t search_max_iterations(uint32_t itopk, uint32_t width, uint32_t requested)
{
    if (requested)
        return requested;
    return 2 * (itopk / width) + 32; /* the core's auto_max_iterations */
}

void plan_search(SearchArgs &a, uint32_t width, uint32_t degree, uint32_t itopk)
{
    a.itopk = itopk;
    a.width = width;
    a.itopk_cap = std::max<uint32_t>(32, pow2_at_least(itopk));
    a.step_cands = width * degree;
    /* the candidate buffer takes one iteration's neighbours, or the entry
     * nodes in chunks of at most 1024 */
    const uint32_t entries = a.entry_count + a.random_entries;
    a.cand_cap = std::max({32u, pow2_at_least(a.step_cands), std::min(1024u, pow2_at_least(entries))});
    /* room for every entry node (but distinct ones, which skip it), and for
     * itopk plus an iteration's candidates below half load after each
     * forgetting */
    const uint32_t hashed = a.entries_distinct ? 0 : entries;
    a.hash_slots =
        std::max({2048u, pow2_at_least(4 * (a.itopk_cap + a.step_cands)), pow2_at_least(2 * (hashed + a.step_cands))});
    size_t off = 0;
    a.query_off = off;
    off += round_up(a.stride * sizeof(float), 16);
    a.itopk_off = off;
    off += a.itopk_cap * sizeof(uint64_t);
    a.cand_off = off;
    off += a.cand_cap * sizeof(uint64_t);
    a.hash_off = off;
    off += a.hash_slots * sizeof(uint32_t);
    a.parents_off = off;
    off += round_up(width * sizeof(uint32_t), 16);
    a.smem_bytes = off;
}

void run_search(const SearchArgs &a, bool half, uint32_t nq, cudaStream_t stream)
{
    uint32_t threads = a.itopk_cap >= 256 || a.step_cands >= 256 ? 256 : 128;
    if (half)
        launch_team<__half>(a, nq, threads, stream);
    else
        launch_team<float>(a, nq, threads, stream);
}

} // namespace cagra_gpu
