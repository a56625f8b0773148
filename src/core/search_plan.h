/*
 * search_plan.h — what a search runs, decided in one place (header only:
 * the GPU library applies its rules too, and links nothing of the core).
 *
 * A SearchPlan is resolved once from the settings as set and what the
 * index's build measured (resolve_search_plan), where it runs and an index
 * scan's first round when the search begins (resolve_search_site), carried
 * whole to where the search runs (the backend's Searcher, or the worker's
 * request), and executed there.  What follows from where it runs is
 * resolved there by the rules below, never changed otherwise: an automatic
 * width on the CPU by cpu_search_params (types.h); on the GPU, where it
 * depends on the size of the batch, by gpu_batch_params (the worker's
 * engine) and the launch's shape by gpu_search_shape (the GPU library).
 * docs/architecture.md, "The search plan", gives every rule.
 */
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "types.h"

namespace cagra {

/* The search settings as set; 0 and -1 leave a value to the index or to
 * where the search runs. */
struct SearchSettings {
    uint32_t itopk_size = 0;                  /* 0: the index's own */
    uint32_t search_width = kAutoSearchWidth; /* 0: for where the search runs */
    uint32_t max_iterations = 0;              /* 0: from itopk_size and the width it runs at */
    int32_t entry_probes = -1;                /* -1: the index's own */
};

/* What an index's build measured its searches to need (0: nothing, as for
 * an index built before it measured them). */
struct IndexSearchChoice {
    uint32_t itopk_size = 0;
    uint32_t entry_probes = 0;
};

/* Where a search runs. */
enum class SearchSite : uint8_t {
    Backend, /* the backend's Searcher over the index pages */
    Worker,  /* the worker's engine: the GPU library, or the core */
};

struct SearchPlan {
    uint32_t k = 0;        /* results wanted; at most params.itopk_size */
    SearchParams params;   /* search_width and max_iterations may stay automatic */
    bool filtered = false; /* only the allowed rows may be returned */
    SearchSite site = SearchSite::Backend; /* resolve_search_site */
    uint32_t first_round_k = 0;            /* an index scan's first worker round; 0: none */
    bool plans_inserts = false;            /* each query is a new node's vector: the worker answers
                                              its insert plan from the candidates too */
};

/* Whether two plans search alike: where they run and an index scan's first
 * round are the backend's choices, made before the worker is asked. */
inline bool operator==(const SearchPlan &a, const SearchPlan &b)
{
    return a.k == b.k && a.params == b.params && a.filtered == b.filtered && a.plans_inserts == b.plans_inserts;
}
inline bool operator!=(const SearchPlan &a, const SearchPlan &b)
{
    return !(a == b);
}

/* The plan of a search for itopk_size results (k: params.itopk_size),
 * unfiltered: each setting as set, else the index's own, else the core's
 * default (SearchParams). */
inline SearchPlan resolve_search_plan(const SearchSettings &settings, const IndexSearchChoice &index)
{
    const SearchParams defaults;
    SearchPlan plan;
    plan.params.itopk_size = settings.itopk_size > 0 ? settings.itopk_size
                             : index.itopk_size > 0  ? index.itopk_size
                                                     : defaults.itopk_size;
    plan.params.search_width = settings.search_width;
    plan.params.max_iterations = settings.max_iterations;
    plan.params.entry_probes = settings.entry_probes >= 0 ? (uint32_t)settings.entry_probes
                               : index.entry_probes > 0   ? index.entry_probes
                                                          : defaults.entry_probes;
    plan.k = plan.params.itopk_size;
    return plan;
}

/* An index scan's rounds on the worker: each asks for k results, the next
 * for twice the k before, up to the most the worker answers.  A round also
 * costs its round trip and the kernel's fixed part, counted as
 * kRoundFixedCost results.  Not measured apart: it only tips the choice
 * between a larger first round and a second one (with about 100 results a
 * scan and a quarter of scans past 128, any value below about 270 picks 128
 * over 256). */
constexpr uint32_t kRoundFixedCost = 64;

/* What rounds from `first` doubling up to max_k cost a scan that returned
 * `returned` results. */
inline uint64_t scan_rounds_cost(uint32_t first, uint32_t returned, uint32_t max_k)
{
    uint64_t cost = 0;
    for (uint32_t k = first;; k = std::min(2 * k, max_k)) {
        cost += k + kRoundFixedCost;
        if (returned <= k || k == max_k)
            return cost;
    }
}

/* The first round of an index scan on a worker that answers at most max_k
 * results a query: the one of itopk and the powers of two above it up to
 * max_k that would have cost the last scans of the index, which returned
 * recent[0 .. nrecent) results (0: no scan), the fewest; itopk when there
 * were none.  Powers of two only, so that the first rounds of concurrent
 * scans ask alike and the worker batches them. */
inline uint32_t scan_first_round_k(uint32_t itopk, const uint32_t *recent, size_t nrecent, uint32_t max_k)
{
    uint32_t best = itopk;
    uint64_t best_cost = UINT64_MAX;
    for (uint32_t k = itopk;;) {
        uint64_t cost = 0;
        for (size_t i = 0; i < nrecent; i++)
            if (recent[i] > 0)
                cost += scan_rounds_cost(k, recent[i], max_k);
        if (cost < best_cost) {
            best = k;
            best_cost = cost;
        }
        if (k >= max_k)
            return best;
        uint32_t next = 1;
        while (next <= k)
            next <<= 1;
        k = std::min(next, max_k);
    }
}

/* Where `plan` runs, and an index scan's first round: on the worker when it
 * may serve the search (the device allows it) and runs, else in the
 * backend; an index scan whose itopk_size is over what the worker answers
 * (max_k) has no worker rounds (first_round_k 0). */
inline void resolve_search_site(SearchPlan &plan, bool worker_serves, const uint32_t *recent, size_t nrecent,
                                uint32_t max_k)
{
    const uint32_t itopk = std::max(plan.params.itopk_size, 1u);
    plan.site = worker_serves ? SearchSite::Worker : SearchSite::Backend;
    plan.first_round_k =
        worker_serves && itopk <= max_k ? scan_first_round_k(itopk, recent, nrecent, max_k) : 0;
}

/* The iterations of a search that keeps `buffer` candidates and expands
 * `width` parents a step (0 counts as 1): `requested` when set, else twice
 * the steps that expand each entry once, and 32 more.  A converging search
 * expands roughly every entry once; the cap only stops pathological walks,
 * so it leaves generous room. */
inline uint32_t max_iterations_for(uint32_t buffer, uint32_t width, uint32_t requested)
{
    if (requested)
        return requested;
    return 2 * (buffer / (width ? width : 1)) + 32;
}

/* The GPU library's steps: the most candidates one step may measure
 * (search_width x graph degree), asserted equal to the library's own in
 * src/worker/engine.cpp. */
constexpr uint32_t kGpuMaxStepCandidates = 4096;

/* A batch of at most kGpuSmallBatch queries leaves most of the device idle
 * at one thread block per query: with an automatic width, each query then
 * expands up to kGpuSmallBatchWidth parents a step (fewer, wider steps, at
 * the same or better recall), and an unfiltered one goes to the device's
 * resident kernel (no launch, copy or interrupt per batch). */
constexpr uint32_t kGpuSmallBatch = 64;
constexpr uint32_t kGpuSmallBatchWidth = 8;

/* What the GPU library runs for a batch of nq queries of `params` over a
 * graph of out-degree `degree`, with a filter (traversed with the allowed
 * nodes as a bitset) or not. */
struct GpuBatchParams {
    SearchParams params; /* search_width resolved */
    bool resident = false;
};
inline GpuBatchParams gpu_batch_params(const SearchParams &params, uint32_t nq, uint32_t degree, bool filter)
{
    GpuBatchParams batch;
    batch.params = gpu_search_params(params);
    const bool small = nq <= kGpuSmallBatch;
    if (params.search_width == kAutoSearchWidth && small && degree > 0)
        batch.params.search_width =
            std::max(1u, std::min({kGpuSmallBatchWidth, batch.params.itopk_size, kGpuMaxStepCandidates / degree}));
    batch.resident = small && !filter;
    return batch;
}

/* Several thread blocks (CTAs) per query: each keeps a buffer of its own,
 * a power of two from kGpuCtaItopkMin to kGpuCtaItopkMax keys, and hands in
 * its best entries for the final merge, at most kGpuMaxHandedIn keys per
 * query in all.  A launch's grid holds at most kGpuMaxGridQueries queries
 * in its second dimension. */
constexpr uint32_t kGpuCtaItopkMin = 32, kGpuCtaItopkMax = 128;
constexpr uint32_t kGpuMaxHandedIn = 4096;
constexpr uint32_t kGpuMaxGridQueries = 65535;
/* The most bytes of vectors one CTA of several measures a step: more made
 * a step of long rows slower than the parents it saved. */
constexpr uint64_t kGpuCtaStepBytes = 512 * 1024;

/* The buffer each CTA of a multi-CTA search keeps for a requested itopk. */
inline uint32_t gpu_cta_itopk(uint32_t itopk)
{
    uint32_t pow2 = 1;
    while (pow2 < itopk)
        pow2 <<= 1;
    return std::min(kGpuCtaItopkMax, std::max(kGpuCtaItopkMin, pow2));
}

/*
 * How many CTAs search each of nq queries of itopk (and k results), and how
 * many parents each expands a step, for a walk at `width` whose parents
 * read parent_bytes each (degree x row bytes).  requested_ctas 1: one CTA
 * per query at `width`; 2 or more: that many at `width` each; 0 (the
 * worker's): a small batch (kGpuSmallBatch) whose itopk fits one CTA's
 * buffer gets 16 CTAs per query up to 16 queries and 8 beyond, each
 * expanding `width` parents a step but at most an eighth of its buffer
 * (more lost recall) and kGpuCtaStepBytes of vectors; else one CTA.
 * Several CTAs are then raised so that their buffers hold itopk keys and
 * lowered so that their hand-ins fit the final merge.
 */
struct GpuSearchShape {
    uint32_t ctas, width;
};
inline GpuSearchShape gpu_search_shape(uint32_t nq, uint32_t itopk, uint32_t k, uint32_t width, uint32_t requested_ctas,
                                       uint64_t parent_bytes)
{
    if (requested_ctas == 1 || nq > kGpuMaxGridQueries)
        return {1, width};
    GpuSearchShape shape{requested_ctas, width};
    const uint32_t cta_itopk = gpu_cta_itopk(itopk);
    if (requested_ctas == 0) {
        /* an itopk beyond a CTA's buffer gets no bound between the CTAs,
         * and unbounded CTAs walk longer than one CTA does */
        if (nq > kGpuSmallBatch || itopk > kGpuCtaItopkMax)
            return {1, width};
        shape.ctas = nq <= 16 ? 16 : 8;
        shape.width = (uint32_t)std::min<uint64_t>(
            {width, cta_itopk / 8, std::max<uint64_t>(1, kGpuCtaStepBytes / std::max<uint64_t>(1, parent_bytes))});
    }
    /* each CTA hands in min(k, its buffer) keys, rounded up to a power of two */
    uint32_t hand_in = 1;
    while (hand_in < k)
        hand_in <<= 1;
    hand_in = std::min(hand_in, cta_itopk);
    shape.ctas = std::max(shape.ctas, (itopk + cta_itopk - 1) / cta_itopk);
    shape.ctas = std::max(2u, std::min(shape.ctas, kGpuMaxHandedIn / hand_in));
    return shape;
}

} // namespace cagra
