/*
 * search_batch.cu — a planned search batch on the device: the context's
 * scratch grown to fit, small batches staged through page-locked memory,
 * the fixed entries scored for the batch when that saves the walks work,
 * the kernel (search.cu) or the exact measure of given nodes
 * (measure_nodes.cu), the answers back, and the wait for them.
 */
#include <chrono>
#include <cstring>
#include <memory>
#include <string>

#include "measure_nodes.cuh"
#include "search.cuh"
#include "search_batch.cuh"
#include "search_plan.cuh"

namespace cagra_gpu {

void run_batch(cagra_gpu_search_context *ctx, const cagra_gpu_index *ix, SearchArgs &a, uint32_t width, uint32_t itopk,
               const float *queries, uint32_t nq, const uint64_t *filter, const uint32_t *nodes, uint32_t count,
               uint32_t *ids_out, float *distances_out)
{
    check(cudaSetDevice(ix->device), "cudaSetDevice");
    /* one CTA a query, more fixed entries than its buffer keeps: rank them
     * for the whole batch at once, so each walk measures only its best */
    const bool score = a.ctas <= 1 && !a.entries_distinct && ix->entry_rows.count > pow2_at_least(itopk) &&
                       (uint64_t)nq * ix->entry_rows.count * sizeof(float) <= kEntryScoreBytesLimit;
    if (score) {
        ensure(ctx->entry_scores, (uint64_t)nq * ix->entry_rows.count, "this search batch");
        a.entry_scores = ctx->entry_scores.get();
    }
    plan_search(a, width, ix->degree, itopk);
    int max_smem = 0;
    check(cudaDeviceGetAttribute(&max_smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, ix->device),
          "cudaDeviceGetAttribute");
    if (a.smem_bytes + 64 > (size_t)max_smem)
        fail(CAGRA_GPU_INVALID_ARGUMENT, "this search needs " + std::to_string(a.smem_bytes) +
                                             " bytes of shared memory per query, more than the device's " +
                                             std::to_string(max_smem) + ": lower itopk_size or search_width");

    const uint64_t fwords = filter ? div_up(ix->n, 64) : 0;
    const uint32_t k = a.k;
    ensure(ctx->queries, (uint64_t)nq * ix->stride, "this search batch");
    ensure(ctx->ids, (uint64_t)nq * k, "this search batch");
    ensure(ctx->dists, (uint64_t)nq * k, "this search batch");
    ensure(ctx->filter, fwords, "this search batch");
    ensure(ctx->nodes, a.entries_distinct ? count : 0, "this search batch");
    DeviceBuffer<float> &dq = ctx->queries;
    DeviceBuffer<uint32_t> &dids = ctx->ids;
    DeviceBuffer<float> &ddist = ctx->dists;
    cudaStream_t s = ctx->stream.s;
    /* a large batch's queries go straight from the caller's memory: the
     * driver overlaps its staging with the transfer, one memcpy here first
     * would not */
    constexpr uint64_t kStagedQueryBytesMax = 4 << 20;
    const uint64_t query_bytes = (uint64_t)nq * ix->dim * 4, answer_bytes = (uint64_t)nq * k * 4;
    const bool stage_queries = query_bytes <= kStagedQueryBytesMax;
    const uint64_t staged = (stage_queries ? query_bytes : 0) + 2 * answer_bytes + sizeof(SearchStats);
    if (ctx->staging_bytes < staged) {
        ctx->staging.reset();
        ctx->staging_bytes = 0;
        ctx->staging = std::make_unique<PinnedBuffer<unsigned char>>(staged);
        ctx->staging_bytes = staged;
    }
    SearchStats *staged_stats = reinterpret_cast<SearchStats *>(ctx->staging->get());
    float *staged_queries = reinterpret_cast<float *>(staged_stats + 1);
    uint32_t *staged_ids = reinterpret_cast<uint32_t *>(staged_queries + (stage_queries ? (uint64_t)nq * ix->dim : 0));
    float *staged_dists = reinterpret_cast<float *>(staged_ids + (uint64_t)nq * k);
    if (stage_queries)
        std::memcpy(staged_queries, queries, query_bytes);
    if (a.ctas > 1) {
        /* the kernel leaves them as it found them: initialised once */
        if (ensure(ctx->visited, (uint64_t)nq * a.visited_slots, "this search batch"))
            check(cudaMemsetAsync(ctx->visited.get(), 0xFF, ctx->visited.bytes(), s), "cudaMemset");
        if (ensure(ctx->arrivals, nq, "this search batch"))
            check(cudaMemsetAsync(ctx->arrivals.get(), 0, ctx->arrivals.bytes(), s), "cudaMemset");
        if (ensure(ctx->bounds, nq, "this search batch"))
            check(cudaMemsetAsync(ctx->bounds.get(), 0xFF, ctx->bounds.bytes(), s), "cudaMemset");
        ensure(ctx->handed_in, (uint64_t)nq * a.ctas * a.hand_in, "this search batch");
        a.visited = ctx->visited.get();
        a.arrivals = ctx->arrivals.get();
        a.bounds = ctx->bounds.get();
        a.handed_in = ctx->handed_in.get();
    }
    ctx->resident_ms = -1.0f;
    if (ctx->started)
        check(cudaEventRecord(ctx->started, s), "cudaEventRecord");
    if (ix->stride != ix->dim)
        check(cudaMemsetAsync(dq.get(), 0, (uint64_t)nq * ix->stride * 4, s), "cudaMemset");
    check(cudaMemcpy2DAsync(dq.get(), ix->stride * 4, stage_queries ? staged_queries : queries, ix->dim * 4,
                            ix->dim * 4, nq, cudaMemcpyHostToDevice, s),
          "copying the queries to the device");
    if (filter)
        check(cudaMemcpyAsync(ctx->filter.get(), filter, fwords * 8, cudaMemcpyHostToDevice, s),
              "copying the filter to the device");
    if (a.entries_distinct && count)
        check(cudaMemcpyAsync(ctx->nodes.get(), nodes, (uint64_t)count * 4, cudaMemcpyHostToDevice, s),
              "copying the nodes to the device");
    a.queries = dq.get();
    a.filter = filter ? ctx->filter.get() : nullptr;
    if (a.entries_distinct) {
        a.entries = ctx->nodes.get();
        a.entry_count = count;
    }
    a.ids_out = dids.get();
    a.dist_out = ddist.get();
    if (a.ctas <= 1 && !a.entries_distinct) {
        ensure(ctx->batch_stats, 1, "this search batch");
        check(cudaMemsetAsync(ctx->batch_stats.get(), 0, sizeof(SearchStats), s), "cudaMemset");
        a.stats = ctx->batch_stats.get();
    }
    if (score)
        score_entries(ix->entry_rows, ix->metric, dq.get(), ix->stride, nq, ctx->entry_scores.get(), s);
    if (a.entries_distinct && measure_fits(nq, count)) {
        const MeasureArgs m{
            ix->vectors.get(), ix->dtype == CAGRA_GPU_FLOAT16, ix->dim, ix->stride, ix->metric, nq, count, k};
        measure_nodes(m, ctx->measure, dq.get(), ctx->nodes.get(), ddist.get(), dids.get(), s);
    } else {
        run_search(a, ix->dtype == CAGRA_GPU_FLOAT16, nq, s);
    }
    check(cudaMemcpyAsync(staged_ids, dids.get(), answer_bytes, cudaMemcpyDeviceToHost, s),
          "copying the results to the host");
    check(cudaMemcpyAsync(staged_dists, ddist.get(), answer_bytes, cudaMemcpyDeviceToHost, s),
          "copying the results to the host");
    if (a.stats)
        check(cudaMemcpyAsync(staged_stats, a.stats, sizeof(SearchStats), cudaMemcpyDeviceToHost, s),
              "copying the search's counts");
    if (ctx->blocking_wait) {
        check(cudaEventRecord(ctx->done, s), "cudaEventRecord");
        const auto since = std::chrono::steady_clock::now();
        cudaError_t state;
        for (auto waited = std::chrono::steady_clock::duration::zero();
             (state = cudaEventQuery(ctx->done)) == cudaErrorNotReady && waited < kBriefWait;
             waited = std::chrono::steady_clock::now() - since)
            wait_step(waited);
        check(state == cudaErrorNotReady ? cudaEventSynchronize(ctx->done) : state, "the search");
    } else {
        check(cudaStreamSynchronize(s), "the search");
    }
    std::memcpy(ids_out, staged_ids, answer_bytes);
    std::memcpy(distances_out, staged_dists, answer_bytes);
    if (a.stats) {
        ctx->stats.queries += nq;
        ctx->stats.distances += staged_stats->measured;
        ctx->stats.iterations += staged_stats->iterations;
    }
}

bool search_resident_batch(cagra_gpu_search_context *ctx, const cagra_gpu_index *ix, const cagra_gpu_search_params &p,
                           uint32_t k, const float *queries, uint32_t nq, uint32_t *ids_out, float *distances_out)
{
    ResidentKey key;
    SearchArgs a;
    float ms = -1.0f;
    if (!resident_plan(ix, p, k, &key, &a) ||
        !search_resident(key, a, ix->dim, queries, nq, k, ctx->query_done, ids_out, distances_out, &ms))
        return false;
    ctx->resident_ms = ms;
    return true;
}

} // namespace cagra_gpu
