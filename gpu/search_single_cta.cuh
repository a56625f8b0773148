/*
 * search_single_cta.cuh — one thread block's walk of the graph for one
 * query, as the batched kernel (search.cu: a CTA per query of a launch) and
 * the resident kernel (search_resident.cu: a CTA per job, kernel running
 * between searches) both run it.
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
#pragma once

#include "search_steps.cuh"

namespace cagra_gpu {
namespace {

/* The CTA's visited hash in shared memory (open addressing, uint32 ids). */
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

/* The fixed entries of a scored batch (entry_scores.cuh): itopk takes the
 * best itopk_cap by score, a candidate buffer at a time, and then those
 * are measured exactly (and hashed) in place of their scores.  An entry
 * left out may still be met in the walk: not hashed, it is measured then.
 * Returns how many were measured. */
template <class T, int TEAM>
__device__ uint32_t seed_from_scores(const SearchArgs &a, const float *q, uint32_t qi, uint64_t *itopk, uint64_t *cand,
                                     uint32_t *cand_count, uint32_t *hash, uint32_t hmask, uint32_t *hash_count)
{
    const float *scores = a.entry_scores + (uint64_t)qi * a.entry_count;
    for (uint32_t base = 0; base < a.entry_count; base += a.cand_cap) {
        const uint32_t count = min(a.cand_cap, a.entry_count - base);
        for (uint32_t t = threadIdx.x; t < count; t += blockDim.x)
            cand[t] = (uint64_t)ordered_key(scores[base + t]) << 32 | a.entries[base + t];
        merge_candidates(itopk, a.itopk_cap, cand, count);
    }
    /* the ids itopk kept (each once: a caller's entries may repeat) */
    for (uint32_t i = threadIdx.x; i < a.itopk_cap; i += blockDim.x) {
        const uint32_t id = (uint32_t)itopk[i];
        itopk[i] = kEmptyKey;
        if (id != kInvalid && hash_insert(hash, hmask, hash_count, id))
            cand[atomicAdd(cand_count, 1u)] = id;
    }
    __syncthreads();
    const uint32_t count = *cand_count;
    __syncthreads();
    if (threadIdx.x == 0)
        *cand_count = 0;
    distances_and_merge<T, TEAM>(a, q, itopk, a.itopk_cap, cand, count, 0);
    __syncthreads();
    return count;
}

/* One CTA walks the graph for one query: `query` (stride floats, read
 * past L1: a resident kernel finds each new query in the same host
 * memory), entry seeds drawn for query number qi, the first k accepted
 * entries into ids_row and dist_row.  All threads of the CTA call it. */
template <class T, int TEAM>
__device__ void search_one(const SearchArgs &a, const float *query, uint32_t qi, uint32_t k, uint32_t *ids_row,
                           float *dist_row)
{
    extern __shared__ __align__(16) unsigned char smem[];
    __shared__ uint32_t s_cand_count, s_hash_count, s_parents, s_drop_below, s_measured;
    float *q = reinterpret_cast<float *>(smem + a.query_off);
    uint64_t *itopk = reinterpret_cast<uint64_t *>(smem + a.itopk_off);
    uint64_t *cand = reinterpret_cast<uint64_t *>(smem + a.cand_off);
    uint32_t *hash = reinterpret_cast<uint32_t *>(smem + a.hash_off);
    uint32_t *parents = reinterpret_cast<uint32_t *>(smem + a.parents_off);
    const uint32_t tid = threadIdx.x, lane = tid & 31, warp = tid / 32;
    const uint32_t hmask = a.hash_slots - 1;

    for (uint32_t i = tid; i < a.stride; i += blockDim.x)
        q[i] = __ldcv(query + i);
    for (uint32_t i = tid; i < a.itopk_cap; i += blockDim.x)
        itopk[i] = kEmptyKey;
    for (uint32_t i = tid; i < a.hash_slots; i += blockDim.x)
        hash[i] = kInvalid;
    if (tid == 0) {
        s_cand_count = 0;
        s_hash_count = 0;
        s_drop_below = 0; /* no candidate is dropped */
        s_measured = 0;
    }
    __syncthreads();

    /* Entry nodes: the fixed ones, then random ones, a candidate buffer at a time. */
    const uint32_t entries = a.entry_count + a.random_entries;
    uint32_t first = 0;
    if (a.entry_scores) {
        const uint32_t measured = seed_from_scores<T, TEAM>(a, q, qi, itopk, cand, &s_cand_count, hash, hmask,
                                                            &s_hash_count);
        if (tid == 0)
            s_measured += measured;
        first = a.entry_count;
    }
    for (uint32_t base = first; base < entries; base += a.cand_cap) {
        for (uint32_t t = tid; t < a.cand_cap && base + t < entries; t += blockDim.x) {
            uint32_t idx = base + t;
            uint32_t id = entry_node(a, qi, idx);
            if (a.entries_distinct || hash_insert(hash, hmask, &s_hash_count, id))
                cand[atomicAdd(&s_cand_count, 1u)] = id;
        }
        __syncthreads();
        uint32_t count = s_cand_count;
        __syncthreads();
        if (tid == 0) {
            s_cand_count = 0;
            s_measured += count;
        }
        if (count)
            distances_and_merge<T, TEAM>(a, q, itopk, a.itopk_cap, cand, count, 0);
        __syncthreads();
    }

    uint32_t iter = 0;
    for (; iter < a.max_iterations; iter++) {
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
            uint32_t np = pick_parents(a, itopk, a.itopk, a.itopk_cap, a.width, ~0u, parents, lane);
            if (lane == 0)
                s_parents = np;
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
        if (tid == 0) {
            s_cand_count = 0;
            s_measured += count;
        }
        if (count)
            distances_and_merge<T, TEAM>(a, q, itopk, a.itopk_cap, cand, count, s_drop_below);
        __syncthreads();
    }

    /* The first k accepted entries, in order. */
    if (warp == 0)
        write_results(a, itopk, a.itopk_cap, k, ids_row, dist_row, lane);
    if (a.stats && tid == 0) {
        atomicAdd(&a.stats->measured, (unsigned long long)s_measured);
        atomicAdd(&a.stats->iterations, (unsigned long long)iter);
    }
}

/* Threads per CTA of a single-CTA walk: 256 for large buffers or steps. */
inline uint32_t single_cta_threads(const SearchArgs &a)
{
    return a.itopk_cap >= 256 || a.step_cands >= 256 ? 256 : 128;
}

} // namespace
} // namespace cagra_gpu
