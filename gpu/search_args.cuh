/*
 * search_args.cuh — the launch description of the batched search kernels
 * (one CTA per query: search.cu; several: search_multi_cta.cu; the
 * resident kernel: search_resident.cu) as the planner (search_plan.cu)
 * fills it in and the kernels read it.
 */
#pragma once

#include "common.cuh"

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

} // namespace cagra_gpu
