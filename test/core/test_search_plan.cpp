/*
 * test_search_plan.cpp — the rules of a search plan: each setting as set,
 * else the index's own, else the core's default; where it runs and an
 * index scan's first worker round; and what a GPU batch adds to it.
 */
#include <gtest/gtest.h>

#include <vector>

#include "search_plan.h"

using namespace cagra;

TEST(SearchPlan, SettingsAsSetWin)
{
    SearchSettings s;
    s.itopk_size = 200;
    s.search_width = 3;
    s.max_iterations = 77;
    s.entry_probes = 5;
    IndexSearchChoice index{96, 4};
    const SearchPlan plan = resolve_search_plan(s, index);
    EXPECT_EQ(plan.params.itopk_size, 200u);
    EXPECT_EQ(plan.params.search_width, 3u);
    EXPECT_EQ(plan.params.max_iterations, 77u);
    EXPECT_EQ(plan.params.entry_probes, 5u);
    EXPECT_EQ(plan.k, 200u);
    EXPECT_FALSE(plan.filtered);
}

TEST(SearchPlan, AutomaticSettingsTakeTheIndexsOwn)
{
    const SearchPlan plan = resolve_search_plan(SearchSettings{}, IndexSearchChoice{96, 4});
    EXPECT_EQ(plan.params.itopk_size, 96u);
    EXPECT_EQ(plan.params.entry_probes, 4u);
    /* the width and the iterations stay automatic: resolved where the search runs */
    EXPECT_EQ(plan.params.search_width, kAutoSearchWidth);
    EXPECT_EQ(plan.params.max_iterations, 0u);
    EXPECT_EQ(plan.k, 96u);
}

TEST(SearchPlan, AnIndexThatMeasuredNothingGetsTheDefaults)
{
    const SearchParams defaults;
    const SearchPlan plan = resolve_search_plan(SearchSettings{}, IndexSearchChoice{});
    EXPECT_EQ(plan.params, defaults);
    /* entry_probes 0 as set means every entry, not the index's own */
    SearchSettings every;
    every.entry_probes = 0;
    EXPECT_EQ(resolve_search_plan(every, IndexSearchChoice{96, 4}).params.entry_probes, 0u);
}

TEST(SearchPlan, EqualPlansOnly)
{
    SearchPlan a = resolve_search_plan(SearchSettings{}, IndexSearchChoice{64, 12});
    SearchPlan b = a;
    EXPECT_EQ(a, b);
    b.filtered = true;
    EXPECT_NE(a, b);
    b = a;
    b.k = 10;
    EXPECT_NE(a, b);
    b = a;
    b.params.search_width = 2;
    EXPECT_NE(a, b);
}

TEST(SearchPlan, SmallGpuBatchesWidenAnAutomaticWidth)
{
    SearchParams p;
    p.itopk_size = 32;
    GpuBatchParams one = gpu_batch_params(p, 1, 32, false);
    EXPECT_EQ(one.params.search_width, kGpuSmallBatchWidth);
    EXPECT_TRUE(one.resident);
    GpuBatchParams small = gpu_batch_params(p, kGpuSmallBatch, 32, false);
    EXPECT_EQ(small.params.search_width, kGpuSmallBatchWidth);
    EXPECT_TRUE(small.resident);
    GpuBatchParams large = gpu_batch_params(p, kGpuSmallBatch + 1, 32, false);
    EXPECT_EQ(large.params.search_width, 1u);
    EXPECT_FALSE(large.resident);
    /* the rest of the plan as it was */
    EXPECT_EQ(large.params.itopk_size, 32u);
    EXPECT_EQ(large.params.max_iterations, 0u);
}

TEST(SearchPlan, TheSmallBatchWidthFitsTheBufferAndAStep)
{
    SearchParams p;
    p.itopk_size = 4;
    EXPECT_EQ(gpu_batch_params(p, 1, 32, false).params.search_width, 4u); /* never above itopk_size */
    p.itopk_size = 64;
    EXPECT_EQ(gpu_batch_params(p, 1, 1024, false).params.search_width, kGpuMaxStepCandidates / 1024);
    EXPECT_EQ(gpu_batch_params(p, 1, 0, false).params.search_width, 1u); /* no graph: as a large batch */
}

TEST(SearchPlan, AnExplicitWidthIsUsedAsSet)
{
    SearchParams p;
    p.itopk_size = 64;
    p.search_width = 3;
    EXPECT_EQ(gpu_batch_params(p, 1, 32, false).params.search_width, 3u);
    EXPECT_EQ(gpu_batch_params(p, 1000, 32, false).params.search_width, 3u);
}

TEST(SearchPlan, AFilteredBatchIsNeverResident)
{
    SearchParams p;
    GpuBatchParams b = gpu_batch_params(p, 1, 32, true);
    EXPECT_FALSE(b.resident);
    EXPECT_EQ(b.params.search_width, kGpuSmallBatchWidth); /* it widens all the same */
}

TEST(SearchPlan, CtaBuffersArePowersOfTwoFrom32To128)
{
    EXPECT_EQ(gpu_cta_itopk(1), 32u);
    EXPECT_EQ(gpu_cta_itopk(32), 32u);
    EXPECT_EQ(gpu_cta_itopk(33), 64u);
    EXPECT_EQ(gpu_cta_itopk(100), 128u);
    EXPECT_EQ(gpu_cta_itopk(512), 128u);
}

/* 128 float32 dimensions at degree 32: a parent reads 16 KB. */
constexpr uint64_t kShortParent = 32 * 128 * 4;
/* 1,024 float32 dimensions at degree 32: 128 KB. */
constexpr uint64_t kLongParent = 32 * 1024 * 4;

TEST(SearchPlan, SmallGpuBatchesGetSeveralCtasPerQuery)
{
    GpuSearchShape lone = gpu_search_shape(1, 32, 10, 8, 0, kShortParent);
    EXPECT_EQ(lone.ctas, 16u);
    EXPECT_EQ(lone.width, 4u); /* an eighth of a CTA's 32 keys */
    GpuSearchShape seventeen = gpu_search_shape(17, 64, 10, 8, 0, kShortParent);
    EXPECT_EQ(seventeen.ctas, 8u);
    EXPECT_EQ(seventeen.width, 8u);
    /* long rows: at most 512 KB of vectors a step */
    EXPECT_EQ(gpu_search_shape(1, 64, 10, 8, 0, kLongParent).width, 4u);
    EXPECT_EQ(gpu_search_shape(1, 64, 10, 8, 0, 1ull << 30).width, 1u);
}

TEST(SearchPlan, LargeGpuBatchesAndLargeBuffersGetOneCta)
{
    for (GpuSearchShape s : {gpu_search_shape(kGpuSmallBatch + 1, 32, 10, 8, 0, kShortParent),
                             gpu_search_shape(1, kGpuCtaItopkMax + 1, 10, 8, 0, kShortParent),
                             gpu_search_shape(1, 32, 10, 8, 1, kShortParent),
                             gpu_search_shape(kGpuMaxGridQueries + 1, 32, 10, 8, 4, kShortParent)}) {
        EXPECT_EQ(s.ctas, 1u);
        EXPECT_EQ(s.width, 8u); /* the walk's own */
    }
}

TEST(SearchPlan, RequestedCtasHoldTheBufferAndFitTheMerge)
{
    /* 8 CTAs of 128 keys hold itopk 512; the caller's width as given */
    GpuSearchShape eight = gpu_search_shape(100, 512, 10, 3, 8, kShortParent);
    EXPECT_EQ(eight.ctas, 8u);
    EXPECT_EQ(eight.width, 3u);
    /* raised to 4 to hold 512 keys; hand-ins of 128 keys allow 32 */
    EXPECT_EQ(gpu_search_shape(100, 512, 512, 1, 2, kShortParent).ctas, 4u);
    /* lowered so that 64-key hand-ins fit 4,096 keys */
    EXPECT_EQ(gpu_search_shape(100, 64, 64, 1, 100, kShortParent).ctas, kGpuMaxHandedIn / 64);
}

TEST(SearchPlan, IterationsAsSetElseFromTheBufferAndTheWidth)
{
    EXPECT_EQ(max_iterations_for(64, 1, 0), 2u * 64 + 32);
    EXPECT_EQ(max_iterations_for(64, 2, 0), 2u * 32 + 32);
    EXPECT_EQ(max_iterations_for(64, 0, 0), 2u * 64 + 32); /* an automatic width counts as 1 */
    EXPECT_EQ(max_iterations_for(64, 4, 9), 9u);
}

TEST(SearchPlan, ItRunsOnTheWorkerOnlyWhenOneServesIt)
{
    SearchPlan backend = resolve_search_plan(SearchSettings{}, IndexSearchChoice{64, 12});
    resolve_search_site(backend, false, nullptr, 0, 512);
    EXPECT_EQ(backend.site, SearchSite::Backend);
    EXPECT_EQ(backend.first_round_k, 0u); /* no worker rounds */

    SearchPlan worker = resolve_search_plan(SearchSettings{}, IndexSearchChoice{64, 12});
    resolve_search_site(worker, true, nullptr, 0, 512);
    EXPECT_EQ(worker.site, SearchSite::Worker);
    EXPECT_EQ(worker.first_round_k, 64u); /* no scan before: itopk_size */
    /* the rest of the plan as resolved */
    EXPECT_EQ(worker.params.itopk_size, 64u);
    EXPECT_EQ(worker.k, 64u);
}

TEST(SearchPlan, AnItopkOverTheWorkersLimitHasNoWorkerRounds)
{
    SearchSettings s;
    s.itopk_size = 513;
    SearchPlan plan = resolve_search_plan(s, IndexSearchChoice{});
    resolve_search_site(plan, true, nullptr, 0, 512);
    EXPECT_EQ(plan.site, SearchSite::Worker); /* cagra_search still asks the worker for 512 */
    EXPECT_EQ(plan.first_round_k, 0u);        /* an index scan runs in the backend */
    s.itopk_size = 512;
    plan = resolve_search_plan(s, IndexSearchChoice{});
    resolve_search_site(plan, true, nullptr, 0, 512);
    EXPECT_EQ(plan.first_round_k, 512u);
}

TEST(SearchPlan, RoundsCostTheirKAndAFixedPartUpToTheLimit)
{
    EXPECT_EQ(scan_rounds_cost(64, 10, 512), 64u + kRoundFixedCost);
    EXPECT_EQ(scan_rounds_cost(64, 100, 512), 64u + 128 + 2 * kRoundFixedCost);
    /* past the limit the rounds stop at it */
    EXPECT_EQ(scan_rounds_cost(512, 5000, 512), 512u + kRoundFixedCost);
    EXPECT_EQ(scan_rounds_cost(256, 5000, 512), 256u + 512 + 2 * kRoundFixedCost);
}

TEST(SearchPlan, TheFirstRoundIsTheCheapestForTheLastScans)
{
    auto first_round = [](uint32_t itopk, std::vector<uint32_t> recent) {
        SearchSettings s;
        s.itopk_size = itopk;
        SearchPlan plan = resolve_search_plan(s, IndexSearchChoice{});
        resolve_search_site(plan, true, recent.data(), recent.size(), 512);
        return plan.first_round_k;
    };
    /* scans that took fewer rows than itopk_size: one round of itopk_size */
    EXPECT_EQ(first_round(64, {10, 10, 10}), 64u);
    /* about 100 rows each: one round of 128 beats 64 then 128, and 256 */
    EXPECT_EQ(first_round(64, {100, 100, 100}), 128u);
    /* a quarter of the scans past 128 still picks 128 over 256 */
    std::vector<uint32_t> quarter(12, 100);
    quarter.insert(quarter.end(), 4, 200);
    EXPECT_EQ(first_round(64, quarter), 128u);
    /* powers of two above a non-power itopk_size, up to the limit */
    EXPECT_EQ(first_round(100, {300, 300}), 512u);
    EXPECT_EQ(first_round(100, {90, 90}), 100u);
    /* slots of no scan (0) count for nothing */
    EXPECT_EQ(first_round(64, {0, 0, 100, 0}), 128u);
    EXPECT_EQ(first_round(64, {0, 0, 0, 0}), 64u);
}

TEST(SearchPlan, WhereItRunsDoesNotSeparateEqualSearches)
{
    /* the worker batches requests of equal plans: the backend's choices of
     * site and first round are made before it is asked */
    SearchPlan a = resolve_search_plan(SearchSettings{}, IndexSearchChoice{64, 12});
    SearchPlan b = a;
    resolve_search_site(a, true, nullptr, 0, 512);
    std::vector<uint32_t> recent(16, 100);
    resolve_search_site(b, true, recent.data(), recent.size(), 512);
    EXPECT_NE(a.first_round_k, b.first_round_k);
    EXPECT_EQ(a, b);
}
