/*
 * search_multi_cta.cu — CAGRA search with several CTAs per query, for
 * batches too small to fill the device one CTA per query (the choice
 * between one and several: cagra::gpu_search_shape, core/search_plan.h).
 *
 * The grid is (ctas, nq).  Each CTA of a query keeps a small sorted buffer
 * of its own (cagra::gpu_cta_itopk(itopk) keys in shared memory), starts from its
 * share of the entry nodes (every ctas-th fixed entry and every ctas-th
 * random one), and then expands `width` parents a step: the best
 * unexpanded entries of its buffer.  The query's CTAs share one visited
 * table in global memory: a node is measured by the CTA that claims it
 * first (atomicCAS), so no node is measured twice and no node can sit in
 * two CTAs' buffers.
 *
 * The CTAs also share a bound: each publishes the distance of the
 * itopk_size-th entry of its buffer (atomicMin per query), and no CTA
 * expands a parent farther than the least of them.  There are then
 * itopk_size measured nodes closer than the bound, so a node beyond it
 * would not be in a single CTA's itopk buffer either, and would not be
 * expanded there: the CTAs expand what one CTA with that buffer would, in
 * parallel, and the ones that walk far from the query stop early.  (A
 * requested itopk_size larger than a CTA's buffer, 128, gets no bound.)
 * A CTA stops when its buffer holds no unexpanded entry within the bound,
 * or after max_iterations steps.  It then hands in its best accepted
 * entries (the first min(k, buffer) that the filter passes), and the last
 * CTA of the query to finish (a counter per query) sorts all hand-ins,
 * writes the query's first k, and clears the query's visited table,
 * counter and bound for the next launch: no memset and no second kernel
 * per launch.
 *
 * The visited table never forgets (unlike the single-CTA hash in shared
 * memory), so a filtered search needs no drop rule: a parent the filter
 * rejects leaves its CTA's buffer once expanded, and is never met again.
 * A claim gives up after kVisitedProbes occupied slots and counts the node
 * as met: never a duplicate, at worst a node not measured, and only when a
 * search claims far more nodes than the table was sized for.
 */
#include <algorithm>

#include "search_multi_cta.cuh"
#include "search_steps.cuh"

namespace cagra_gpu {

namespace {

constexpr uint32_t kVisitedProbes = 16;
constexpr uint32_t kMultiCtaThreads = 256;

/* True when this CTA claimed `id` for its query (it was not yet measured). */
__device__ inline bool claim(uint32_t *visited, uint32_t mask, uint32_t id)
{
    uint32_t h = hash32(id) & mask;
    for (uint32_t probe = 0; probe < kVisitedProbes; probe++) {
        const uint32_t prev = atomicCAS(&visited[h], kInvalid, id);
        if (prev == kInvalid)
            return true;
        if (prev == id)
            return false;
        h = (h + 1) & mask;
    }
    return false;
}

template <class T, int TEAM>
__global__ void __launch_bounds__(kMultiCtaThreads, 4) search_multi_cta_kernel(SearchArgs a)
{
    extern __shared__ __align__(16) unsigned char smem[];
    __shared__ uint32_t s_cand_count, s_parents, s_last, s_bound;
    float *q = reinterpret_cast<float *>(smem + a.query_off);
    uint64_t *buf = reinterpret_cast<uint64_t *>(smem + a.itopk_off);
    uint64_t *cand = reinterpret_cast<uint64_t *>(smem + a.cand_off);
    uint32_t *parents = reinterpret_cast<uint32_t *>(smem + a.parents_off);
    const uint32_t cta = blockIdx.x, ctas = gridDim.x, qi = blockIdx.y;
    const uint32_t tid = threadIdx.x, lane = tid & 31, warp = tid / 32;
    uint32_t *visited = a.visited + (uint64_t)qi * a.visited_slots;
    const uint32_t vmask = a.visited_slots - 1;

    for (uint32_t i = tid; i < a.stride; i += blockDim.x)
        q[i] = a.queries[(uint64_t)qi * a.stride + i];
    for (uint32_t i = tid; i < a.itopk_cap; i += blockDim.x)
        buf[i] = kEmptyKey;
    if (tid == 0) {
        s_cand_count = 0;
        s_bound = kInvalid; /* until the first step has read the query's */
    }
    __syncthreads();

    /* This CTA's share of the entry nodes: entries cta, cta + ctas, ... */
    const uint32_t entries = a.entry_count + a.random_entries;
    const uint32_t share = entries > cta ? (entries - cta + ctas - 1) / ctas : 0;
    for (uint32_t base = 0; base < share; base += a.cand_cap) {
        for (uint32_t t = tid; t < a.cand_cap && base + t < share; t += blockDim.x) {
            const uint32_t id = entry_node(a, qi, cta + (base + t) * ctas);
            if (claim(visited, vmask, id))
                cand[atomicAdd(&s_cand_count, 1u)] = id;
        }
        __syncthreads();
        const uint32_t count = s_cand_count;
        __syncthreads();
        if (tid == 0)
            s_cand_count = 0;
        if (count)
            distances_and_merge<T, TEAM>(a, q, buf, a.itopk_cap, cand, count, 0);
        __syncthreads();
    }

    for (uint32_t iter = 0; iter < a.max_iterations; iter++) {
        if (warp == 0) {
            const uint32_t np = pick_parents(a, buf, a.itopk_cap, a.itopk_cap, a.width, s_bound, parents, lane);
            if (lane == 0)
                s_parents = np;
        }
        __syncthreads();
        const uint32_t np = s_parents;
        if (np == 0)
            break;
        for (uint32_t t = tid; t < np * a.degree; t += blockDim.x) {
            const uint32_t p = t / a.degree, e = t - p * a.degree;
            const uint32_t id = __ldg(a.graph + (uint64_t)parents[p] * a.degree + e);
            if (id != kInvalid && claim(visited, vmask, id))
                cand[atomicAdd(&s_cand_count, 1u)] = id;
        }
        if (a.bound_rank && tid == blockDim.x - 1) {
            /* publish this CTA's bound_rank-th distance and learn the
             * query's bound for the next step, beside the gather's loads */
            const uint64_t key = buf[a.bound_rank - 1];
            const uint32_t mine = key == kEmptyKey ? kInvalid : (uint32_t)(key >> 32);
            s_bound = min(mine, atomicMin(&a.bounds[qi], mine));
        }
        __syncthreads();
        const uint32_t count = s_cand_count;
        __syncthreads();
        if (tid == 0)
            s_cand_count = 0;
        if (count)
            distances_and_merge<T, TEAM>(a, q, buf, a.itopk_cap, cand, count, 0);
        __syncthreads();
    }

    /* Hand in the first hand_in accepted entries (padded with empty keys). */
    uint64_t *mine = a.handed_in + ((uint64_t)qi * ctas + cta) * a.hand_in;
    if (warp == 0) {
        const uint32_t lt = (1u << lane) - 1;
        uint32_t kept = 0;
        for (uint32_t base = 0; base < a.itopk_cap && kept < a.hand_in; base += 32) {
            const uint64_t key = buf[base + lane];
            const uint32_t id = (uint32_t)key;
            const bool ok = id != kInvalid && (!a.filter || filter_passes(a.filter, id & ~kExpanded));
            const uint32_t mask = __ballot_sync(0xFFFFFFFFu, ok);
            const uint32_t r = kept + __popc(mask & lt);
            if (ok && r < a.hand_in)
                mine[r] = key;
            kept += __popc(mask);
        }
        for (uint32_t r = kept + lane; r < a.hand_in; r += 32)
            mine[r] = kEmptyKey;
        __threadfence();
    }
    __syncthreads();
    if (tid == 0)
        s_last = atomicAdd(&a.arrivals[qi], 1u) == ctas - 1;
    __syncthreads();
    if (!s_last)
        return;

    /* The last CTA of the query: every hand-in is visible after the fence
     * that preceded its CTA's arrival; read them past L1. */
    __threadfence();
    const uint32_t total = ctas * a.hand_in, sort_n = pow2_at_least(total);
    const unsigned long long *all = reinterpret_cast<const unsigned long long *>(a.handed_in + (uint64_t)qi * total);
    for (uint32_t i = tid; i < sort_n; i += blockDim.x)
        cand[i] = i < total ? (uint64_t)__ldcg(all + i) : kEmptyKey;
    __syncthreads();
    block_sort(cand, sort_n);
    if (warp == 0)
        write_results(a, cand, sort_n, a.k, a.ids_out + (uint64_t)qi * a.k, a.dist_out + (uint64_t)qi * a.k, lane);
    /* ready for the next launch on these buffers (stream order) */
    uint4 *slots = reinterpret_cast<uint4 *>(visited);
    const uint4 none = make_uint4(kInvalid, kInvalid, kInvalid, kInvalid);
    for (uint32_t i = tid; i < a.visited_slots / 4; i += blockDim.x)
        slots[i] = none;
    if (tid == 0) {
        a.arrivals[qi] = 0;
        a.bounds[qi] = kInvalid;
    }
}

template <class T, int TEAM>
void launch(const SearchArgs &a, uint32_t nq, cudaStream_t stream)
{
    if (a.smem_bytes > 48 * 1024)
        check(cudaFuncSetAttribute(search_multi_cta_kernel<T, TEAM>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   (int)a.smem_bytes),
              "raising the multi-CTA search kernel's shared memory limit");
    search_multi_cta_kernel<T, TEAM><<<dim3(a.ctas, nq), kMultiCtaThreads, a.smem_bytes, stream>>>(a);
    check_launch("search_multi_cta_kernel");
}

template <class T>
void launch_team(const SearchArgs &a, uint32_t nq, cudaStream_t stream)
{
    switch (distance_team<T>(a.stride)) {
    case 4:
        return launch<T, 4>(a, nq, stream);
    case 8:
        return launch<T, 8>(a, nq, stream);
    case 16:
        return launch<T, 16>(a, nq, stream);
    default:
        return launch<T, 32>(a, nq, stream);
    }
}

} // namespace

void run_search_multi_cta(const SearchArgs &a, bool half, uint32_t nq, cudaStream_t stream)
{
    if (half)
        launch_team<__half>(a, nq, stream);
    else
        launch_team<float>(a, nq, stream);
}

} // namespace cagra_gpu
