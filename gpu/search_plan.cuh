/*
 * search_plan.cuh — the search planner (search_plan.cu): from a search's
 * settings, its batch and its index, the shape the kernels run (CTAs per
 * query, width, iterations, buffers and shared memory).
 */
#pragma once

#include "core/search_plan.h"
#include "index.cuh"
#include "search_args.cuh"
#include "search_resident.cuh"

namespace cagra_gpu {

/* How many CTAs search each query, their width and the buffer each keeps:
 * the search plan's rules, cagra::gpu_search_shape and cagra::gpu_cta_itopk
 * (core/search_plan.h). */

/* Fills the buffer sizes and the shared-memory layout; a.stride,
 * a.entry_count, a.random_entries, a.ctas (and for several CTAs a.k and
 * a.max_iterations) must be set. */
void plan_search(SearchArgs &a, uint32_t width, uint32_t degree, uint32_t itopk);
void plan_search_multi_cta(SearchArgs &a, uint32_t width, uint32_t degree, uint32_t itopk);
/* The shared-memory offsets of a planned search: the query, the itopk
 * buffer, the candidates, the hash (hash_slots, 0 for none), the parents. */
void lay_out_shared_memory(SearchArgs &a, uint32_t width);

/* The kernel's description for a search of `ix` (entries, filter and
 * iterations left to the caller). */
SearchArgs index_args(const cagra_gpu_index *ix, uint32_t k);

/* A batch of nq queries of ix at `p`: its description, and in *width the
 * parents each CTA expands a step (the shared memory is planned by the
 * batch's run, which knows its scratch). */
SearchArgs plan_batch(const cagra_gpu_index *ix, const cagra_gpu_search_params &p, uint32_t nq, uint32_t k,
                      uint32_t *width);

/* How the device's resident kernel (search_resident.cu) walks a query of
 * ix: one CTA at the caller's width, as a launch with ctas_per_query 1
 * would; false when the kernel cannot serve ix. */
bool resident_plan(const cagra_gpu_index *ix, const cagra_gpu_search_params &p, uint32_t k, ResidentKey *key,
                   SearchArgs *a);

/* The steps a walk takes at most: `requested`, or (0) the core's
 * auto_max_iterations of its buffer and width. */
uint32_t search_max_iterations(uint32_t itopk, uint32_t width, uint32_t requested);

} // namespace cagra_gpu
