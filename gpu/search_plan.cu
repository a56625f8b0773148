/*
 * search_plan.cu — the search planner: how many CTAs walk each query and at
 * what width (cagra::gpu_search_shape), the buffer of each, the iterations, and the
 * buffers and shared-memory layout of a walk (plan_search).  The kernels
 * (search.cu, search_multi_cta.cu, search_resident.cu) only execute it.
 */
#include <algorithm>

#include "search_plan.cuh"

namespace cagra_gpu {

namespace {

/* The visited table of a multi-CTA search, in global memory. */
constexpr uint32_t kVisitedMinSlots = 4096, kVisitedMaxSlots = 1u << 18;

} // namespace

uint32_t search_max_iterations(uint32_t itopk, uint32_t width, uint32_t requested)
{
    return cagra::max_iterations_for(itopk, width, requested);
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
    a.cand_cap = std::max(
        {32u, pow2_at_least(a.step_cands), std::min(256u, pow2_at_least(entries)), a.entry_scores ? a.itopk_cap : 0u});
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

void plan_search_multi_cta(SearchArgs &a, uint32_t width, uint32_t degree, uint32_t requested_itopk)
{
    const uint32_t itopk = cagra::gpu_cta_itopk(requested_itopk);
    a.itopk = itopk;
    a.itopk_cap = itopk;
    a.width = width;
    a.step_cands = width * degree;
    a.hash_slots = 0; /* the visited table is in global memory */
    a.hand_in = std::min(pow2_at_least(a.k), itopk);
    a.bound_rank = requested_itopk <= itopk ? requested_itopk : 0;
    const uint32_t entries = a.entry_count + a.random_entries;
    /* the candidate buffer takes one step's neighbours, a chunk of the
     * CTA's entries, and in the last CTA every hand-in */
    a.cand_cap = std::max({32u, pow2_at_least(a.step_cands), pow2_at_least(a.ctas * a.hand_in),
                           std::min(1024u, pow2_at_least((uint32_t)div_up(entries, a.ctas)))});
    /* about twice the nodes the CTAs claim: bounded, when each expands
     * half as many parents as its buffer holds and half of their
     * neighbours are new; unbounded, up to four buffers' worth of steps */
    const uint64_t expected =
        a.bound_rank ? entries + (uint64_t)a.ctas * itopk * degree / 4
                     : entries + (uint64_t)a.ctas * std::min(a.max_iterations, 4 * itopk) * width * degree / 2;
    a.visited_slots =
        (uint32_t)std::min<uint64_t>(kVisitedMaxSlots, std::max<uint64_t>(kVisitedMinSlots, 2 * expected));
    a.visited_slots = pow2_at_least(a.visited_slots);
    lay_out_shared_memory(a, width);
}

SearchArgs index_args(const cagra_gpu_index *ix, uint32_t k)
{
    SearchArgs a{};
    a.vectors = ix->vectors.get();
    a.graph = ix->graph.get();
    a.entries = ix->entries.get();
    a.n = (uint32_t)ix->n;
    a.dim = ix->dim;
    a.stride = ix->stride;
    a.degree = ix->degree;
    a.entry_count = ix->entry_count;
    a.metric = ix->metric;
    a.k = k;
    return a;
}

SearchArgs plan_batch(const cagra_gpu_index *ix, const cagra_gpu_search_params &p, uint32_t nq, uint32_t k,
                      uint32_t *width)
{
    SearchArgs a = index_args(ix, k);
    a.random_entries = p.random_entries;
    a.seed = p.seed;
    const uint64_t row_bytes = (uint64_t)ix->stride * (ix->dtype == CAGRA_GPU_FLOAT16 ? 2 : 4);
    const cagra::GpuSearchShape shape =
        cagra::gpu_search_shape(nq, p.itopk_size, k, p.search_width, p.ctas_per_query, ix->degree * row_bytes);
    a.ctas = shape.ctas;
    /* several CTAs per query: each walks with a buffer of its own */
    const uint32_t buffer = a.ctas > 1 ? cagra::gpu_cta_itopk(p.itopk_size) : p.itopk_size;
    a.max_iterations = search_max_iterations(buffer, shape.width, p.max_iterations);
    *width = shape.width;
    return a;
}

bool resident_plan(const cagra_gpu_index *ix, const cagra_gpu_search_params &p, uint32_t k, ResidentKey *key,
                   SearchArgs *a)
{
    /* One block walks each query there; at long rows several blocks per
     * query (a launch) finish a small batch sooner, so the resident kernel
     * takes short rows only (docs/benchmarks.md, "Constants"). */
    constexpr uint64_t kResidentMaxRowBytes = 1024;
    if ((uint64_t)ix->stride * (ix->dtype == CAGRA_GPU_FLOAT16 ? 2 : 4) > kResidentMaxRowBytes)
        return false;
    *a = index_args(ix, k);
    a->random_entries = p.random_entries;
    a->seed = p.seed;
    a->ctas = 1;
    a->max_iterations = search_max_iterations(p.itopk_size, p.search_width, p.max_iterations);
    plan_search(*a, p.search_width, ix->degree, p.itopk_size);
    int max_smem = 0;
    check(cudaDeviceGetAttribute(&max_smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, ix->device),
          "cudaDeviceGetAttribute");
    if (a->smem_bytes + 64 > (size_t)max_smem)
        return false;
    key->index = ix;
    key->device = ix->device;
    key->half = ix->dtype == CAGRA_GPU_FLOAT16;
    key->itopk = p.itopk_size;
    key->width = p.search_width;
    key->max_iterations = a->max_iterations;
    key->random_entries = p.random_entries;
    key->seed = p.seed;
    return true;
}

} // namespace cagra_gpu
