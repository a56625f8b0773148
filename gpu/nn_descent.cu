/*
 * nn_descent.cu — the kNN graph on the device.
 *
 * NN-descent with fixed-size lists: each node keeps k (id, distance) pairs
 * sorted by distance, ids flagged "new" until sampled once.  One iteration:
 *   sample   up to kSample new and kSample old neighbours per node (a bit
 *            mask over the node's own list: the ids stay where they are)
 *            and the reverse lists (who sampled me), all on the device;
 *   join     per node, one CTA gathers new = fwd-new + rev-new and
 *            old = fwd-old + rev-old (each up to 2 * kSample) in fp16 and
 *            computes the new x new and new x old distances in one pass over
 *            the features: dots on the tensor cores (WMMA, fp32
 *            accumulation), or for L1, which has no dot form, absolute
 *            differences in fp32 on the CUDA cores; each member proposes its
 *            closest few partners to its own list;
 *   merge    per node, the proposals (hash slots of atomicMin keys, so a
 *            repeated proposal dedupes itself and a collision keeps the
 *            closer one) are merged into the sorted list.
 * It stops when an iteration changes fewer than termination * n * k entries.
 * Up to kExactKnnLimit nodes, an exact kNN is computed instead.
 */
#include <mma.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <set>
#include <thread>
#include <vector>

#include "dataset.cuh"
#include "metric.cuh"
#include "nn_descent.cuh"
#include "sort.cuh"

namespace cagra_gpu {

namespace {

constexpr uint32_t kNewFlag = 0x80000000u;
constexpr uint32_t kListEmpty = 0x7FFFFFFFu;
constexpr uint64_t kEmptyKey = ~0ULL;

/* Join tile: up to 64 new and 64 old members, features in chunks of 128
 * (fp16; L1: 64, as fp32). */
constexpr int kJoinNew = 2 * kSample;
constexpr int kJoinMembers = 4 * kSample;
constexpr int kChunk = 128;
constexpr int kL1Chunk = 64;
constexpr int kChunkStride = kChunk + 8; /* halfs; breaks bank conflicts of the tile loads */
constexpr int kGramStride = kJoinMembers + 4;
constexpr int kJoinThreads = 256;
/* Proposals each join member makes (its closest partners in the join). */
constexpr int kProposals = 3;

/* The build's fp16 set as the kernels read it (HalfDataset). */
struct HalfRows {
    const __half *v;
    const float *norms;
    uint32_t dim16;
    float inv_scale, inv_scale2;

    __device__ const __half *row(uint32_t i) const { return v + (uint64_t)i * dim16; }

    /* The distance of rows a and b in true units, by one warp (every lane
     * gets it): from the dot and the norms, as the local join's Gram matrix
     * gives it, or from the absolute differences (L1). */
    __device__ float warp_distance(cagra_gpu_metric metric, uint32_t a, uint32_t b, uint32_t lane) const
    {
        if (!metric_has_dot_form(metric))
            return warp_sum_half(MetricSum::AbsoluteDifferences, row(a), row(b), dim16, lane) * inv_scale;
        const float dot = warp_sum_half(MetricSum::Products, row(a), row(b), dim16, lane);
        return distance_from_dot(metric, norms[a], norms[b], dot, inv_scale2);
    }
};

HalfRows rows_of(const HalfDataset &data)
{
    return {data.vectors.get(), data.norms.get(), data.dim16, data.inv_scale, data.inv_scale2};
}

/* Exact kNN for small n: one CTA per node sorts all n distances. */
__global__ void exact_knn_kernel(HalfRows rows, uint32_t n, cagra_gpu_metric metric, uint32_t k, uint32_t *knn)
{
    extern __shared__ uint64_t keys[];
    uint32_t u = blockIdx.x;
    uint32_t p = pow2_at_least(n);
    uint32_t lane = threadIdx.x & 31, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    for (uint32_t j = threadIdx.x; j < p; j += blockDim.x)
        keys[j] = kEmptyKey;
    __syncthreads();
    for (uint32_t j = warp; j < n; j += warps) {
        const float d = rows.warp_distance(metric, u, j, lane);
        if (lane == 0 && j != u)
            keys[j] = ((uint64_t)ordered_key(d) << 32) | j;
    }
    __syncthreads();
    block_sort(keys, p);
    for (uint32_t j = threadIdx.x; j < k; j += blockDim.x)
        knn[(uint64_t)u * k + j] = j + 1 < n ? (uint32_t)keys[j] : kInvalid;
}

/* Random start: k distinct neighbours u+1+((r + j*stride) mod (n-1)), then sorted. */
__global__ void init_lists_kernel(HalfRows rows, uint32_t n, cagra_gpu_metric metric, uint32_t k, uint32_t kp,
                                  uint64_t stride, uint64_t seed, uint32_t *ids, float *dists)
{
    extern __shared__ uint64_t smem[];
    uint32_t lane = threadIdx.x & 31, warp = threadIdx.x / 32;
    uint64_t *keys = smem + warp * kp;
    uint32_t u = blockIdx.x * (blockDim.x / 32) + warp;
    if (u >= n)
        return;
    uint64_t r = splitmix64(seed ^ (u * 0x9E3779B97F4A7C15ULL)) % (n - 1);
    for (uint32_t j = lane; j < kp; j += 32)
        keys[j] = kEmptyKey;
    __syncwarp();
    for (uint32_t j = 0; j < k; j++) {
        uint32_t id = (uint32_t)((u + 1 + (r + j * stride) % (n - 1)) % n);
        const float d = rows.warp_distance(metric, u, id, lane);
        if (lane == 0)
            keys[j] = ((uint64_t)ordered_key(d) << 32) | id;
    }
    __syncwarp();
    warp_sort(keys, kp, lane);
    for (uint32_t j = lane; j < k; j += 32) {
        ids[(uint64_t)u * k + j] = (uint32_t)keys[j] | kNewFlag;
        dists[(uint64_t)u * k + j] = key_to_float((uint32_t)(keys[j] >> 32));
    }
}

/* 32-bit words of one node's sample mask (a bit per list position). */
__host__ __device__ inline uint32_t mask_words(uint32_t k)
{
    return (k + 31) / 32;
}

/* Per node: the first kSample new and old entries, marked in the node's
 * masks (zero on entry), and the reverse lists. */
__global__ void sample_kernel(uint32_t n, uint32_t k, uint32_t *ids, uint32_t *new_mask, uint32_t *new_cnt,
                              uint32_t *old_mask, uint32_t *old_cnt, uint32_t *new_rev, uint32_t *new_rev_cnt,
                              uint32_t *old_rev, uint32_t *old_rev_cnt)
{
    uint32_t lane = threadIdx.x & 31;
    uint32_t u = (uint32_t)((blockIdx.x * (uint64_t)blockDim.x + threadIdx.x) / 32);
    if (u >= n)
        return;
    uint32_t taken_new = 0, taken_old = 0;
    uint32_t lt = (1u << lane) - 1;
    for (uint32_t base = 0; base < k && (taken_new < kSample || taken_old < kSample); base += 32) {
        uint32_t j = base + lane;
        uint32_t id = j < k ? ids[(uint64_t)u * k + j] : kListEmpty;
        bool valid = (id & ~kNewFlag) != kListEmpty;
        bool is_new = valid && (id & kNewFlag);
        bool is_old = valid && !(id & kNewFlag);
        uint32_t mnew = __ballot_sync(0xFFFFFFFFu, is_new);
        uint32_t mold = __ballot_sync(0xFFFFFFFFu, is_old);
        uint32_t plain = id & ~kNewFlag;
        const bool take_new = is_new && taken_new + __popc(mnew & lt) < kSample;
        const bool take_old = is_old && taken_old + __popc(mold & lt) < kSample;
        const uint32_t took_new = __ballot_sync(0xFFFFFFFFu, take_new);
        const uint32_t took_old = __ballot_sync(0xFFFFFFFFu, take_old);
        if (lane == 0) {
            new_mask[(uint64_t)u * mask_words(k) + base / 32] = took_new;
            old_mask[(uint64_t)u * mask_words(k) + base / 32] = took_old;
        }
        if (take_new) {
            ids[(uint64_t)u * k + j] = plain; /* sampled: old from now on */
            uint32_t slot = atomicAdd(&new_rev_cnt[plain], 1u);
            if (slot < kSample)
                new_rev[(uint64_t)plain * kSample + slot] = u;
        }
        if (take_old) {
            uint32_t slot = atomicAdd(&old_rev_cnt[plain], 1u);
            if (slot < kSample)
                old_rev[(uint64_t)plain * kSample + slot] = u;
        }
        taken_new = min(kSample, taken_new + __popc(mnew));
        taken_old = min(kSample, taken_old + __popc(mold));
    }
    if (lane == 0) {
        new_cnt[u] = taken_new;
        old_cnt[u] = taken_old;
    }
}

struct JoinArgs {
    HalfRows rows;
    uint32_t n, k;
    cagra_gpu_metric metric;
    const float *dists;
    const uint32_t *ids;
    const uint32_t *new_mask, *new_cnt, *old_mask, *old_cnt;
    const uint32_t *new_rev, *new_rev_cnt, *old_rev, *old_rev_cnt;
    unsigned long long *slots;
};

struct alignas(128) JoinShared {
    uint32_t ids[kJoinMembers];
    float norms[kJoinMembers];
    float worst[kJoinMembers];
    union {
        __half tile[kJoinMembers][kChunkStride];
        float2 pairs[kL1Chunk / 2][kJoinMembers]; /* L1: feature pairs (fp32), feature-major */
        float gram[kJoinNew][kGramStride];
    };
};

__device__ inline uint32_t member_id(const JoinArgs &a, uint32_t u, uint32_t i)
{
    /* members 0..63: forward new then reverse new; 64..127: the same for old */
    bool old = i >= kJoinNew;
    uint32_t j = old ? i - kJoinNew : i;
    const uint32_t *mask = (old ? a.old_mask : a.new_mask) + (uint64_t)u * mask_words(a.k);
    const uint32_t *rev = old ? a.old_rev : a.new_rev;
    uint32_t nf = old ? a.old_cnt[u] : a.new_cnt[u];
    uint32_t nr = min(old ? a.old_rev_cnt[u] : a.new_rev_cnt[u], kSample);
    if (j < nf) {
        /* the position of the mask's j-th set bit; the lists change only
         * in the merge, after the join */
        uint32_t w = 0, bits = mask[0];
        for (uint32_t c = __popc(bits); j >= c; c = __popc(bits)) {
            j -= c;
            bits = mask[++w];
        }
        for (; j > 0; j--)
            bits &= bits - 1;
        return a.ids[(uint64_t)u * a.k + w * 32 + (__ffs(bits) - 1)] & ~kNewFlag;
    }
    if (j - nf < nr)
        return rev[(uint64_t)u * kSample + (j - nf)];
    return kInvalid;
}

/* The join's distances from the Gram matrix (L2, inner product, cosine):
 * one pass of WMMA over the features computes the dots of the 64 new
 * members (rows) with all 128 (columns). */
__device__ void gram_distances(const JoinArgs &a, JoinShared &sh)
{
    using namespace nvcuda;
    const uint32_t tid = threadIdx.x, warp = tid / 32;
    const int row_tile = warp / 2;
    const int col_tile0 = (warp % 2) * 4;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[4];
#pragma unroll
    for (int t = 0; t < 4; t++)
        wmma::fill_fragment(acc[t], 0.0f);

    const uint32_t vec_per_row = kChunk / 8;
    for (uint32_t c0 = 0; c0 < a.rows.dim16; c0 += kChunk) {
        __syncthreads();
        uint32_t width = min((uint32_t)kChunk, a.rows.dim16 - c0);
        for (uint32_t e = tid; e < kJoinMembers * vec_per_row; e += kJoinThreads) {
            uint32_t m = e / vec_per_row, c = (e % vec_per_row) * 8;
            uint32_t id = sh.ids[m];
            uint4 val = make_uint4(0, 0, 0, 0);
            if (id != kInvalid && c < width)
                val = *reinterpret_cast<const uint4 *>(a.rows.row(id) + c0 + c);
            *reinterpret_cast<uint4 *>(&sh.tile[m][c]) = val;
        }
        __syncthreads();
        for (uint32_t kk = 0; kk < width; kk += 16) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> fa;
            wmma::load_matrix_sync(fa, &sh.tile[row_tile * 16][kk], kChunkStride);
#pragma unroll
            for (int t = 0; t < 4; t++) {
                wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> fb;
                wmma::load_matrix_sync(fb, &sh.tile[(col_tile0 + t) * 16][kk], kChunkStride);
                wmma::mma_sync(acc[t], fa, fb, acc[t]);
            }
        }
    }
    __syncthreads(); /* the gram overlays the tile */
#pragma unroll
    for (int t = 0; t < 4; t++)
        wmma::store_matrix_sync(&sh.gram[row_tile * 16][(col_tile0 + t) * 16], acc[t], kGramStride,
                                wmma::mem_row_major);
    __syncthreads();
    for (uint32_t e = tid; e < kJoinNew * kJoinMembers; e += kJoinThreads) {
        uint32_t i = e / kJoinMembers, j = e % kJoinMembers;
        sh.gram[i][j] = distance_from_dot(a.metric, sh.norms[i], sh.norms[j], sh.gram[i][j], a.rows.inv_scale2);
    }
}

/* The join's L1 distances, summed directly in fp32 on the CUDA cores (a
 * Gram matrix holds no absolute differences).  Each chunk of features is
 * staged as fp32 pairs, feature-major; each thread sums a 4 x 8 block of
 * the 64 x 128 distances in registers: 4 consecutive new members (rows) by
 * 8 members 16 apart (columns), so that at each feature pair a half-warp
 * reads its 4 rows in two broadcast loads and 16 consecutive columns.  Warps
 * skip rows, and all threads blocks of 16 columns, that hold no member:
 * most of them in the first iteration (nothing is old yet) and in the last
 * ones (little is new). */
__device__ void l1_distances(const JoinArgs &a, JoinShared &sh, uint32_t u)
{
    const uint32_t tid = threadIdx.x, lane = tid & 31, warp = tid / 32;
    const uint32_t row0 = warp * 8 + (lane / 16) * 4, col = lane % 16;
    const uint32_t new_count = a.new_cnt[u] + min(a.new_rev_cnt[u], kSample);
    const uint32_t old_count = a.old_cnt[u] + min(a.old_rev_cnt[u], kSample);
    const bool rows_live = warp * 8 < new_count;
    uint32_t live_blocks = 0;
#pragma unroll
    for (uint32_t j = 0; j < kJoinMembers / 16; j++) {
        const uint32_t first = j * 16;
        const bool live = first < kJoinNew ? first < new_count : first - kJoinNew < old_count;
        live_blocks |= (uint32_t)live << j;
    }
    float acc[4][8] = {};

    for (uint32_t c0 = 0; c0 < a.rows.dim16; c0 += kL1Chunk) {
        __syncthreads();
        const uint32_t width = min((uint32_t)kL1Chunk, a.rows.dim16 - c0);
        /* consecutive threads take consecutive members: conflict-free stores */
        for (uint32_t e = tid; e < kJoinMembers * (kL1Chunk / 8); e += kJoinThreads) {
            const uint32_t m = e % kJoinMembers, c = (e / kJoinMembers) * 8;
            const uint32_t id = sh.ids[m];
            uint4 val = make_uint4(0, 0, 0, 0);
            if (id != kInvalid && c < width)
                val = *reinterpret_cast<const uint4 *>(a.rows.row(id) + c0 + c);
            float f[8];
            halves_to_floats(val, f);
#pragma unroll
            for (int q = 0; q < 4; q++)
                sh.pairs[c / 2 + q][m] = make_float2(f[2 * q], f[2 * q + 1]);
        }
        __syncthreads();
        if (!rows_live)
            continue;
        for (uint32_t p = 0; p < width / 2; p++) {
            const float4 r01 = *reinterpret_cast<const float4 *>(&sh.pairs[p][row0]);
            const float4 r23 = *reinterpret_cast<const float4 *>(&sh.pairs[p][row0 + 2]);
            const float2 r[4] = {{r01.x, r01.y}, {r01.z, r01.w}, {r23.x, r23.y}, {r23.z, r23.w}};
#pragma unroll
            for (uint32_t j = 0; j < 8; j++) {
                if (!((live_blocks >> j) & 1))
                    continue;
                const float2 x = sh.pairs[p][j * 16 + col];
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    acc[i][j] = add_term<MetricSum::AbsoluteDifferences>(r[i].x, x.x, acc[i][j]);
                    acc[i][j] = add_term<MetricSum::AbsoluteDifferences>(r[i].y, x.y, acc[i][j]);
                }
            }
        }
    }
    __syncthreads(); /* the gram overlays the pairs */
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (uint32_t j = 0; j < 8; j++)
            sh.gram[row0 + i][j * 16 + col] = acc[i][j] * a.rows.inv_scale;
}

/* One CTA per node u; kGram: the distances from the Gram matrix, or
 * otherwise (L1) summed directly. */
template <bool kGram>
__global__ void __launch_bounds__(kJoinThreads) local_join_kernel(JoinArgs a)
{
    __shared__ JoinShared sh;
    uint32_t u = blockIdx.x;
    if (a.new_cnt[u] + a.new_rev_cnt[u] == 0)
        return; /* nothing new around u: every pair was joined before */
    uint32_t tid = threadIdx.x, lane = tid & 31, warp = tid / 32;

    if (tid < kJoinMembers) {
        uint32_t id = member_id(a, u, tid);
        sh.ids[tid] = id;
        sh.norms[tid] = id != kInvalid ? a.rows.norms[id] : 0.0f;
        sh.worst[tid] = id != kInvalid ? a.dists[(uint64_t)id * a.k + a.k - 1] : -INFINITY;
    }
    if constexpr (kGram)
        gram_distances(a, sh);
    else
        l1_distances(a, sh, u);
    __syncthreads();

    /* Each member proposes its closest partners that beat its current worst. */
    for (uint32_t m = warp; m < kJoinMembers; m += kJoinThreads / 32) {
        uint32_t mid = sh.ids[m];
        if (mid == kInvalid)
            continue;
        float worst = sh.worst[m];
        float d[4];
        uint32_t pid[4];
#pragma unroll
        for (int r = 0; r < 4; r++) {
            uint32_t j = lane + 32 * r;
            d[r] = INFINITY;
            pid[r] = kInvalid;
            if (m < kJoinNew) {
                uint32_t id = sh.ids[j];
                if (j != m && id != kInvalid && id != mid) {
                    d[r] = sh.gram[m][j];
                    pid[r] = id;
                }
            } else if (j < kJoinNew) {
                uint32_t id = sh.ids[j];
                if (id != kInvalid && id != mid) {
                    d[r] = sh.gram[j][m];
                    pid[r] = id;
                }
            }
            if (!(d[r] < worst))
                d[r] = INFINITY;
        }
        for (int p = 0; p < kProposals; p++) {
            float best = d[0];
            int br = 0;
#pragma unroll
            for (int r = 1; r < 4; r++)
                if (d[r] < best) {
                    best = d[r];
                    br = r;
                }
            float wbest = best;
            for (int o = 16; o > 0; o >>= 1)
                wbest = fminf(wbest, __shfl_xor_sync(0xFFFFFFFFu, wbest, o));
            if (wbest == INFINITY)
                break;
            uint32_t owner = __ffs(__ballot_sync(0xFFFFFFFFu, best == wbest)) - 1;
            if (lane == owner) {
                uint32_t cid = pid[br];
                unsigned long long key = ((unsigned long long)ordered_key(best) << 32) | cid;
                atomicMin(&a.slots[(uint64_t)mid * kCandidateSlots + (hash32(cid) & (kCandidateSlots - 1))], key);
#pragma unroll
                for (int r = 0; r < 4; r++)
                    if (r == br)
                        d[r] = INFINITY;
            }
        }
    }
}

/* Per node (one warp): merge the candidate slots into the sorted list. */
__global__ void merge_kernel(uint32_t n, uint32_t k, uint32_t kp, uint32_t *ids, float *dists,
                             unsigned long long *slots, unsigned long long *updates)
{
    extern __shared__ uint64_t smem[];
    uint32_t lane = threadIdx.x & 31, warp = threadIdx.x / 32;
    uint64_t *keys = smem + warp * kp;
    uint32_t u = blockIdx.x * (blockDim.x / 32) + warp;
    if (u >= n)
        return;
    uint32_t *row = ids + (uint64_t)u * k;
    float *drow = dists + (uint64_t)u * k;
    for (uint32_t j = lane; j < k; j += 32)
        keys[j] = ((uint64_t)ordered_key(drow[j]) << 32) | row[j];
    __syncwarp();
    float worst = drow[k - 1];
    constexpr uint32_t per_lane = kCandidateSlots / 32;
    uint64_t mine[per_lane];
#pragma unroll
    for (uint32_t s = 0; s < per_lane; s++) {
        uint32_t t = lane + 32 * s;
        unsigned long long c = slots[(uint64_t)u * kCandidateSlots + t];
        slots[(uint64_t)u * kCandidateSlots + t] = kEmptyKey;
        uint32_t cid = (uint32_t)c;
        bool ok = c != kEmptyKey && cid != u && key_to_float((uint32_t)(c >> 32)) < worst;
        for (uint32_t j = 0; ok && j < k; j++)
            ok = ((uint32_t)keys[j] & ~kNewFlag) != cid;
        mine[s] = ok ? (c | kNewFlag) : kEmptyKey;
    }
    __syncwarp();
#pragma unroll
    for (uint32_t s = 0; s < per_lane; s++)
        keys[k + lane + 32 * s] = mine[s];
    for (uint32_t j = k + kCandidateSlots + lane; j < kp; j += 32)
        keys[j] = kEmptyKey;
    __syncwarp();
    warp_sort(keys, kp, lane);
    uint64_t last = keys[k - 1];
    uint32_t accepted = 0;
#pragma unroll
    for (uint32_t s = 0; s < per_lane; s++)
        accepted += mine[s] != kEmptyKey && mine[s] <= last;
    for (uint32_t j = lane; j < k; j += 32) {
        row[j] = (uint32_t)keys[j];
        drow[j] = key_to_float((uint32_t)(keys[j] >> 32));
    }
    for (int o = 16; o > 0; o >>= 1)
        accepted += __shfl_xor_sync(0xFFFFFFFFu, accepted, o);
    if (lane == 0 && accepted)
        atomicAdd(updates, (unsigned long long)accepted);
}

__global__ void strip_flags_kernel(uint32_t *ids, uint64_t count)
{
    for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < count; i += (uint64_t)gridDim.x * blockDim.x)
        ids[i] &= ~kNewFlag;
}

uint64_t coprime_stride(uint64_t m)
{
    static const uint64_t primes[] = {1000003ULL, 998244353ULL, 1000000007ULL, 2147483647ULL};
    for (uint64_t p : primes)
        if (m % p != 0)
            return p % m == 0 ? 1 : p;
    return 1;
}

} // namespace

uint64_t knn_phase_bytes(uint64_t n, uint32_t k)
{
    /* distances of the lists (their ids are in the caller's buffer),
     * candidate slots, two reverse lists, four counters and two masks */
    return n * k * 4 + n * kCandidateSlots * 8 + n * kSample * 2 * 4 + n * (4 + 2 * mask_words(k)) * 4 + 4096;
}

void build_knn(const HalfDataset &data, cagra_gpu_metric metric, uint32_t k, const cagra_gpu_build_params &params,
               uint32_t *knn, cudaStream_t stream)
{
    const uint32_t n = (uint32_t)data.n;
    if (data.n <= kExactKnnLimit) {
        uint32_t p = pow2_at_least(n);
        exact_knn_kernel<<<n, 256, p * sizeof(uint64_t), stream>>>(rows_of(data), n, metric, k, knn);
        check_launch("exact_knn_kernel");
        check(cudaStreamSynchronize(stream), "exact kNN");
        return;
    }

    /* the lists are built in the caller's knn buffer (ids flagged "new"
     * until the end), so the device holds them once */
    uint32_t *ids = knn;
    DeviceBuffer<float> dists((uint64_t)n * k);
    DeviceBuffer<unsigned long long> slots((uint64_t)n * kCandidateSlots);
    DeviceBuffer<uint32_t> reverse((uint64_t)n * kSample * 2);
    /* four counters and the two masks, zeroed together each iteration */
    DeviceBuffer<uint32_t> counts((uint64_t)n * (4 + 2 * mask_words(k)));
    DeviceBuffer<unsigned long long> updates(1);
    uint32_t *new_rev = reverse.get(), *old_rev = new_rev + (uint64_t)n * kSample;
    uint32_t *new_cnt = counts.get(), *old_cnt = new_cnt + n;
    uint32_t *new_rev_cnt = old_cnt + n, *old_rev_cnt = new_rev_cnt + n;
    uint32_t *new_mask = old_rev_cnt + n, *old_mask = new_mask + (uint64_t)n * mask_words(k);

    const uint32_t kp = pow2_at_least(k);
    const uint32_t warps_per_block = 4;
    const unsigned list_blocks = (unsigned)div_up(n, warps_per_block);
    init_lists_kernel<<<list_blocks, 32 * warps_per_block, warps_per_block * kp * 8, stream>>>(
        rows_of(data), n, metric, k, kp, coprime_stride(n - 1), params.seed, ids, dists.get());
    check_launch("init_lists_kernel");
    check(cudaMemsetAsync(slots.get(), 0xFF, slots.bytes(), stream), "cudaMemset");

    JoinArgs ja{rows_of(data), n,       k,       metric,      dists.get(), ids,         new_mask,   new_cnt,
                old_mask,      old_cnt, new_rev, new_rev_cnt, old_rev,     old_rev_cnt, slots.get()};
    const uint32_t kpm = pow2_at_least(k + kCandidateSlots);
    const double stop = (double)params.nn_descent_termination * n * k;
    for (uint32_t it = 0; it < params.nn_descent_max_iterations; it++) {
        check(cudaMemsetAsync(counts.get(), 0, counts.bytes(), stream), "cudaMemset");
        check(cudaMemsetAsync(updates.get(), 0, 8, stream), "cudaMemset");
        sample_kernel<<<(unsigned)div_up((uint64_t)n * 32, 256), 256, 0, stream>>>(
            n, k, ids, new_mask, new_cnt, old_mask, old_cnt, new_rev, new_rev_cnt, old_rev, old_rev_cnt);
        check_launch("sample_kernel");
        if (metric_has_dot_form(metric))
            local_join_kernel<true><<<n, kJoinThreads, 0, stream>>>(ja);
        else
            local_join_kernel<false><<<n, kJoinThreads, 0, stream>>>(ja);
        check_launch("local_join_kernel");
        merge_kernel<<<list_blocks, 32 * warps_per_block, warps_per_block * kpm * 8, stream>>>(
            n, k, kpm, ids, dists.get(), slots.get(), updates.get());
        check_launch("merge_kernel");
        unsigned long long changed = 0;
        check(cudaMemcpyAsync(&changed, updates.get(), 8, cudaMemcpyDeviceToHost, stream), "cudaMemcpy");
        check(cudaStreamSynchronize(stream), "NN-descent iteration");
        if ((double)changed <= stop)
            break;
        check_cancel(params);
    }
    strip_flags_kernel<<<grid_for((uint64_t)n * k, 256), 256, 0, stream>>>(ids, (uint64_t)n * k);
    check_launch("strip_flags_kernel");
    check(cudaStreamSynchronize(stream), "NN-descent");
}

} // namespace cagra_gpu
