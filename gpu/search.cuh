/*
 * search.cuh — the launch description of the batched search kernels
 * (search.cu: one CTA per query; search_multi_cta.cu: several CTAs per
 * query) as the C API (api.cu) fills it in.
 */
#pragma once

#include "common.cuh"
#include "core/search_plan.h"

namespace cagra_gpu {

/* What the CTAs of a batch did, summed (cagra_gpu_search_stats). */
struct SearchStats {
    unsigned long long measured, iterations;
};

struct SearchArgs {
    /* index */
    const void *vectors; /* n rows of `stride` elements (fp32 or fp16), zero padded */
    const uint32_t *graph;
    const uint32_t *entries;
    uint32_t n, dim, stride, degree, entry_count;
    bool entries_distinct; /* the entries are distinct node ids: measured without the visited hash */
    /* nq x entry_count scores that rank the fixed entries for each query
     * (entry_scores.cuh; single-CTA walks), or NULL: each walk measures
     * every fixed entry */
    const float *entry_scores;
    cagra_gpu_metric metric;
    /* batch */
    const float *queries; /* nq rows of `stride` floats, zero padded */
    const uint64_t *filter;
    uint32_t *ids_out;
    float *dist_out;
    SearchStats *stats; /* NULL, or where single-CTA walks add what they did */
    uint32_t k, itopk, width, max_iterations, random_entries;
    uint64_t seed;
    /* CTAs per query: below 2, one CTA walks each query (search.cu); else
     * that many walk it together (search_multi_cta.cu), with these global
     * buffers of the search context: */
    uint32_t ctas;
    uint32_t *visited;   /* nq tables of visited_slots ids (kInvalid: free), the nodes the query's CTAs measured */
    uint64_t *handed_in; /* nq x ctas x hand_in keys: each CTA's best accepted entries at its end */
    uint32_t *arrivals;  /* nq counts of the CTAs that have handed in; 0 between launches */
    uint32_t *bounds;    /* nq ordered distances, the least of the CTAs' bound_rank-th (kInvalid between launches) */
    uint32_t visited_slots, hand_in;
    /* the rank in a CTA's buffer whose distance bounds every CTA's parents
     * (the requested itopk_size); 0: no bound, when the buffer is smaller */
    uint32_t bound_rank;
    /* shared-memory plan (plan_search) */
    uint32_t itopk_cap, cand_cap, step_cands, hash_slots;
    size_t query_off, itopk_off, cand_off, hash_off, parents_off, smem_bytes;
};

/* How many CTAs search each query and the buffer each keeps: the search
 * plan's rules, cagra::gpu_search_shape and cagra::gpu_cta_itopk
 * (core/search_plan.h). */

/* Fills the buffer sizes and the shared-memory layout; a.stride,
 * a.entry_count, a.random_entries, a.ctas (and for several CTAs a.k and
 * a.max_iterations) must be set. */
void plan_search(SearchArgs &a, uint32_t width, uint32_t degree, uint32_t itopk);
void plan_search_multi_cta(SearchArgs &a, uint32_t width, uint32_t degree, uint32_t itopk);
/* The shared-memory offsets of a planned search: the query, the itopk
 * buffer, the candidates, the hash (hash_slots, 0 for none), the parents. */
void lay_out_shared_memory(SearchArgs &a, uint32_t width);

uint32_t search_max_iterations(uint32_t itopk, uint32_t width, uint32_t requested);

void run_search(const SearchArgs &a, bool half, uint32_t nq, cudaStream_t stream);
void run_search_multi_cta(const SearchArgs &a, bool half, uint32_t nq, cudaStream_t stream);

} // namespace cagra_gpu
