/*
 * search.cuh — the batched search kernels' launch (search.cu: one CTA per
 * query, or through search_multi_cta.cuh several) of a planned search.
 */
#pragma once

#include "search_args.cuh"

namespace cagra_gpu {

/* Runs a search planned by plan_search (search_plan.cuh). */
void run_search(const SearchArgs &a, bool half, uint32_t nq, cudaStream_t stream);

} // namespace cagra_gpu
