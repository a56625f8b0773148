/*
 * search.cu — batched CAGRA search, one CTA per query (the walk itself:
 * search_single_cta.cuh; several CTAs per query: search_multi_cta.cu; a
 * kernel that stays running between searches: search_resident.cu), and
 * the plan of a search's shared memory.
 */
#include <algorithm>

#include "search_single_cta.cuh"

namespace cagra_gpu {

namespace {

/* Blocks of 256 threads an SM should hold at once, which bounds the
 * registers a thread may take: six where an SM runs 1,536 threads or more,
 * four on Turing, whose SMs run 1,024 (ptxas ignores a bound they cannot
 * meet, and the registers would then go unbounded). */
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
constexpr int kSearchBlocksPerSm = 4;
#else
constexpr int kSearchBlocksPerSm = 6;
#endif

template <class T, int TEAM>
__global__ void __launch_bounds__(256, kSearchBlocksPerSm) search_kernel(SearchArgs a)
{
    const uint32_t qi = blockIdx.x;
    search_one<T, TEAM>(a, a.queries + (uint64_t)qi * a.stride, qi, a.k, a.ids_out + (uint64_t)qi * a.k,
                        a.dist_out + (uint64_t)qi * a.k);
}

template <class T, int TEAM>
void launch(const SearchArgs &a, uint32_t nq, uint32_t threads, cudaStream_t stream)
{
    if (a.smem_bytes > 48 * 1024)
        check(cudaFuncSetAttribute(search_kernel<T, TEAM>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   (int)a.smem_bytes),
              "raising the search kernel's shared memory limit");
    search_kernel<T, TEAM><<<nq, threads, a.smem_bytes, stream>>>(a);
    check_launch("search_kernel");
}

template <class T>
void launch_team(const SearchArgs &a, uint32_t nq, uint32_t threads, cudaStream_t stream)
{
    switch (distance_team<T>(a.stride)) {
    case 4:
        return launch<T, 4>(a, nq, threads, stream);
    case 8:
        return launch<T, 8>(a, nq, threads, stream);
    case 16:
        return launch<T, 16>(a, nq, threads, stream);
    default:
        return launch<T, 32>(a, nq, threads, stream);
    }
}

} // namespace

uint32_t search_max_iterations(uint32_t itopk, uint32_t width, uint32_t requested)
{
    if (requested)
        return requested;
    return 2 * (itopk / width) + 32; /* the core's auto_max_iterations */
}

void plan_search(SearchArgs &a, uint32_t width, uint32_t degree, uint32_t itopk)
{
    if (a.ctas > 1)
        return plan_search_multi_cta(a, width, degree, itopk);
    a.itopk = itopk;
    a.width = width;
    a.itopk_cap = std::max<uint32_t>(32, pow2_at_least(itopk));
    a.step_cands = width * degree;
    /* the candidate buffer takes one iteration's neighbours, the entry
     * nodes in chunks of at most 256, and with scored entries the itopk
     * entries measured after them */
    const uint32_t entries = a.entry_count + a.random_entries;
    a.cand_cap = std::max({32u, pow2_at_least(a.step_cands), std::min(256u, pow2_at_least(entries)),
                           a.entry_scores ? a.itopk_cap : 0u});
    /* room for every entry node measured (but distinct ones, which skip
     * it), and for itopk plus an iteration's candidates below half load
     * after each forgetting */
    const uint32_t hashed = a.entries_distinct ? 0 : a.entry_scores ? a.itopk_cap + a.random_entries : entries;
    a.hash_slots =
        std::max({2048u, pow2_at_least(4 * (a.itopk_cap + a.step_cands)), pow2_at_least(2 * (hashed + a.step_cands))});
    lay_out_shared_memory(a, width);
}

void lay_out_shared_memory(SearchArgs &a, uint32_t width)
{
    size_t off = 0;
    a.query_off = off;
    off += round_up(a.stride * sizeof(float), 16);
    a.itopk_off = off;
    off += a.itopk_cap * sizeof(uint64_t);
    a.cand_off = off;
    off += a.cand_cap * sizeof(uint64_t);
    a.hash_off = off;
    off += a.hash_slots * sizeof(uint32_t);
    a.parents_off = off;
    off += round_up(width * sizeof(uint32_t), 16);
    a.smem_bytes = off;
}

void run_search(const SearchArgs &a, bool half, uint32_t nq, cudaStream_t stream)
{
    if (a.ctas > 1)
        return run_search_multi_cta(a, half, nq, stream);
    const uint32_t threads = single_cta_threads(a);
    if (half)
        launch_team<__half>(a, nq, threads, stream);
    else
        launch_team<float>(a, nq, threads, stream);
}

} // namespace cagra_gpu
