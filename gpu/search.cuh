/*
 * search.cuh — the launch description of the batched search kernel
 * (search.cu) as the C API (api.cu) fills it in.
 */
#pragma once

#include "common.cuh"

namespace cagra_gpu {

struct SearchArgs {
    /* index */
    const void *vectors; /* n rows of `stride` elements (fp32 or fp16), zero padded */
    const uint32_t *graph;
    const uint32_t *entries;
    uint32_t n, dim, stride, degree, entry_count;
    bool entries_distinct; /* the entries are distinct node ids: measured without the visited hash */
    cagra_gpu_metric metric;
    /* batch */
    const float *queries; /* nq rows of `stride` floats, zero padded */
    const uint64_t *filter;
    uint32_t *ids_out;
    float *dist_out;
    uint32_t k, itopk, width, max_iterations, random_entries;
    uint64_t seed;
    /* shared-memory plan (plan_search) */
    uint32_t itopk_cap, cand_cap, step_cands, hash_slots;
    size_t query_off, itopk_off, cand_off, hash_off, parents_off, smem_bytes;
};

/* Fills the buffer sizes and the shared-memory layout; a.stride,
 * a.entry_count and a.random_entries must be set. */
void plan_search(SearchArgs &a, uint32_t width, uint32_t degree, uint32_t itopk);

uint32_t search_max_iterations(uint32_t itopk, uint32_t width, uint32_t requested);

void run_search(const SearchArgs &a, bool half, uint32_t nq, cudaStream_t stream);

} // namespace cagra_gpu
