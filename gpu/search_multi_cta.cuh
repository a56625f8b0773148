/*
 * search_multi_cta.cuh — several CTAs searching each query together
 * (search_multi_cta.cu).
 */
#pragma once

#include "search_args.cuh"

namespace cagra_gpu {

void run_search_multi_cta(const SearchArgs &a, bool half, uint32_t nq, cudaStream_t stream);

} // namespace cagra_gpu
