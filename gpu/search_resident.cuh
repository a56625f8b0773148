/*
 * search_resident.cuh — a search kernel that stays running between
 * searches (search_resident.cu), so that a small batch costs no launch, no
 * copies through the driver and no interrupt-driven wake-up: each thread
 * block of the kernel serves one query at a time from a job slot in mapped
 * host memory, and the caller spins on the slot for the answer.
 *
 * A kernel that never ends would make cudaMalloc, cudaFree and page-locked
 * allocations wait forever (each may wait for the whole device), so every
 * such call in the library runs inside a ResidentPause (common.cuh), which
 * stops the resident kernels first; they start again with the next search.
 */
#pragma once

#include "search_args.cuh"

#include <string>

namespace cagra_gpu {

/* What a resident kernel is planned for: searches of this index with these
 * settings reuse it. */
struct ResidentKey {
    const void *index = nullptr;
    int device = 0;
    bool half = false;
    uint32_t itopk = 0, width = 0, max_iterations = 0, random_entries = 0;
    uint64_t seed = 0;
    bool operator==(const ResidentKey &o) const
    {
        return index == o.index && device == o.device && half == o.half && itopk == o.itopk && width == o.width &&
               max_iterations == o.max_iterations && random_entries == o.random_entries && seed == o.seed;
    }
};

/* The caller's hook for a query whose answer is final
 * (cagra_gpu_search_context_on_query_done). */
struct QueryDone {
    cagra_gpu_query_done_fn fn = nullptr;
    void *arg = nullptr;
    void operator()(uint32_t query) const
    {
        if (fn)
            fn(arg, query);
    }
};

/* Searches nq queries (host memory, dim floats each) with the device's
 * resident kernel for `key`, starting one (planned from `planned`: the
 * index's arguments with one CTA per query) when none runs; false when it
 * cannot serve them now (another index's kernel is busy, a pause is on, too
 * few free slots), and the caller launches instead.  Results as a launch
 * of search_kernel with the same plan gives them, each query's row handed
 * out and `done` called as soon as its block has finished; *device_ms: from
 * the first job's start to the last one's end on the device. */
bool search_resident(const ResidentKey &key, const SearchArgs &planned, uint32_t dim, const float *queries,
                     uint32_t nq, uint32_t k, const QueryDone &done, uint32_t *ids_out, float *distances_out,
                     float *device_ms);

/* One query handed to a free block of the device's resident kernel for
 * `key` (started as search_resident starts it), not waited for: its answer
 * comes back from resident_collect with `tag`.  False when the kernel
 * cannot take it now. */
bool resident_start(const ResidentKey &key, const SearchArgs &planned, uint32_t dim, const float *query, uint32_t k,
                    uint64_t tag);

/* Up to `max` queries of resident_start on `device` that are done, without
 * waiting (cagra_gpu_resident_collect); *failure is set when the kernel
 * failed: its started queries then come back with no rows. */
uint32_t resident_collect(int device, uint32_t max, cagra_gpu_resident_done *done, uint32_t *ids_out,
                          float *distances_out, std::string *failure);

/* Stops and forgets the resident kernel of `index` (before it is freed). */
void forget_resident(const void *index);

/* Stops the resident kernel of `index` once its jobs are done, before the
 * index changes under it; its host memory and stream are kept, and the
 * next search starts it again with the index's arguments as they are
 * then. */
void stop_resident_for_update(const void *index);

} // namespace cagra_gpu
