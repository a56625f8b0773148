/*
 * search.cu — batched CAGRA search, one CTA per query (the walk itself:
 * search_single_cta.cuh; several CTAs per query: search_multi_cta.cu; a
 * kernel that stays running between searches: search_resident.cu).  The
 * plan it runs is search_plan.cu's.
 */
#include <algorithm>

#include "search.cuh"
#include "search_multi_cta.cuh"
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
