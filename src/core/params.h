/*
 * params.h — the checks of build and search parameters and what follows from
 * them: a search's iterations, a filtered search's plan (params.cpp).
 */
#pragma once

#include "types.h"

namespace cagra {

/* Throws Error(InvalidParameter / InvalidData) with a message a user can act on. */
void validate_build_params(const BuildParams &params);
void validate_dataset(const DatasetView &data, uint32_t max_dim = kMaxDim);

/* max_iterations when params.max_iterations is 0. */
uint32_t auto_max_iterations(const SearchParams &params);

/* Throws Error(InvalidParameter) for itopk_size 0 or > 1024, search_width
 * > 64 or (when not automatic) > itopk_size, random_entries > 1024, k >
 * itopk_size. */
void validate_search_params(const SearchParams &params, uint32_t k);

/*
 * How a search runs whose filter lets `passing` of the graph's `n` nodes be
 * returned.  A traversal meets one passing node in n / passing, so it keeps
 * itopk_size * n / passing candidates (at most max_itopk) and, when
 * max_iterations is 0, iterates as long as a search of that many candidates
 * (at most n) would.  When the passing nodes are no more than such a
 * traversal measures at most (search_width * degree per iteration),
 * measuring every one of them is no more work, and exact.  `params` should
 * be resolved for where the search runs (cpu_search_params,
 * gpu_search_params of types.h); an automatic width counts as 1.
 */
struct FilteredSearchPlan {
    SearchParams params; /* the caller's, widened */
    bool exact = false;  /* measure each passing node instead of traversing */
};
FilteredSearchPlan plan_filtered_search(const SearchParams &params, uint32_t degree, uint64_t passing, uint64_t n,
                                        uint32_t max_itopk);

} // namespace cagra
