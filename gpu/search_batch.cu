/*
 * search_batch.cu — a planned search batch on the device: the context's
 * scratch grown to fit, small batches staged through page-locked memory,
 * the fixed entries scored for the batch when that saves the walks work,
 * the kernel (search.cu) or the exact measure of given nodes
 * (measure_nodes.cu), the answers back, and the wait for them; and the
 * same round trip for the distances of given pairs.
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
namespace {

/* A large batch's queries go straight from the caller's memory: the driver
 * overlaps its staging with the transfer, one memcpy here first would not. */
constexpr uint64_t kStagedBytesMax = 4 << 20;

/* The context's page-locked staging, grown to at least `bytes`. */
unsigned char *staging(cagra_gpu_search_context *ctx, uint64_t bytes)
{
    if (ctx->staging_bytes < bytes) {
        ctx->staging.reset();
        ctx->staging_bytes = 0;
        ctx->staging = std::make_unique<PinnedBuffer<unsigned char>>(bytes);
        ctx->staging_bytes = bytes;
    }
    return ctx->staging->get();
}

/* Waits for the work queued on the context's stream: a created context
 * briefly polls its `done` event, then blocks on it. */
void wait_for(cagra_gpu_search_context *ctx, const char *what)
{
    if (!ctx->blocking_wait) {
        check(cudaStreamSynchronize(ctx->stream.s), what);
        return;
    }
    check(cudaEventRecord(ctx->done, ctx->stream.s), "cudaEventRecord");
    const auto since = std::chrono::steady_clock::now();
    cudaError_t state;
    for (auto waited = std::chrono::steady_clock::duration::zero();
         (state = cudaEventQuery(ctx->done)) == cudaErrorNotReady && waited < kBriefWait;
         waited = std::chrono::steady_clock::now() - since)
        wait_step(waited);
    check(state == cudaErrorNotReady ? cudaEventSynchronize(ctx->done) : state, what);
}

} // namespace

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
    const uint64_t query_bytes = (uint64_t)nq * ix->dim * 4, answer_bytes = (uint64_t)nq * k * 4;
    const bool stage_queries = query_bytes <= kStagedBytesMax;
    const uint64_t staged = (stage_queries ? query_bytes : 0) + 2 * answer_bytes + sizeof(SearchStats);
    SearchStats *staged_stats = reinterpret_cast<SearchStats *>(staging(ctx, staged));
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
    wait_for(ctx, "the search");
    std::memcpy(ids_out, staged_ids, answer_bytes);
    std::memcpy(distances_out, staged_dists, answer_bytes);
    if (a.stats) {
        ctx->stats.queries += nq;
        ctx->stats.distances += staged_stats->measured;
        ctx->stats.iterations += staged_stats->iterations;
    }
}

void run_pairs(cagra_gpu_search_context *ctx, const cagra_gpu_index *ix, const float *queries, uint32_t nq,
               const uint32_t *from, const uint32_t *to, uint64_t count, float *distances_out)
{
    check(cudaSetDevice(ix->device), "cudaSetDevice");
    ensure(ctx->queries, (uint64_t)nq * ix->stride, "this measure of pairs");
    ensure(ctx->pair_ids, 2 * count, "this measure of pairs");
    ensure(ctx->pair_dists, count, "this measure of pairs");
    cudaStream_t s = ctx->stream.s;
    /* a small call's ids, queries and answers through the page-locked
     * staging, a large one's straight from and to the caller's memory */
    const uint64_t query_bytes = (uint64_t)nq * ix->dim * 4, id_bytes = count * 4;
    const bool stage = query_bytes + 3 * id_bytes <= kStagedBytesMax;
    uint32_t *staged_ids = stage ? reinterpret_cast<uint32_t *>(staging(ctx, query_bytes + 3 * id_bytes)) : nullptr;
    float *staged_dists = stage ? reinterpret_cast<float *>(staged_ids + 2 * count) : nullptr;
    float *staged_queries = stage ? staged_dists + count : nullptr;
    if (stage) {
        std::memcpy(staged_ids, from, id_bytes);
        std::memcpy(staged_ids + count, to, id_bytes);
        if (nq > 0)
            std::memcpy(staged_queries, queries, query_bytes);
    }
    ctx->resident_ms = -1.0f;
    if (ctx->started)
        check(cudaEventRecord(ctx->started, s), "cudaEventRecord");
    if (nq > 0) {
        if (ix->stride != ix->dim)
            check(cudaMemsetAsync(ctx->queries.get(), 0, (uint64_t)nq * ix->stride * 4, s), "cudaMemset");
        check(cudaMemcpy2DAsync(ctx->queries.get(), ix->stride * 4, stage ? staged_queries : queries, ix->dim * 4,
                                ix->dim * 4, nq, cudaMemcpyHostToDevice, s),
              "copying the queries to the device");
    }
    uint32_t *dfrom = ctx->pair_ids.get(), *dto = dfrom + count;
    if (stage) {
        check(cudaMemcpyAsync(dfrom, staged_ids, 2 * id_bytes, cudaMemcpyHostToDevice, s),
              "copying the pairs to the device");
    } else {
        check(cudaMemcpyAsync(dfrom, from, id_bytes, cudaMemcpyHostToDevice, s), "copying the pairs to the device");
        check(cudaMemcpyAsync(dto, to, id_bytes, cudaMemcpyHostToDevice, s), "copying the pairs to the device");
    }
    const MeasureArgs m{ix->vectors.get(), ix->dtype == CAGRA_GPU_FLOAT16, ix->dim, ix->stride, ix->metric, nq, 0, 0};
    measure_pairs(m, ctx->queries.get(), dfrom, dto, count, ctx->pair_dists.get(), s);
    float *dists_to = stage ? staged_dists : distances_out;
    check(cudaMemcpyAsync(dists_to, ctx->pair_dists.get(), id_bytes, cudaMemcpyDeviceToHost, s),
          "copying the distances to the host");
    wait_for(ctx, "the measure of pairs");
    if (stage)
        std::memcpy(distances_out, staged_dists, id_bytes);
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
