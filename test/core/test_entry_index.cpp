/*
 * test_entry_index.cpp — the entry index (entry_index.h): its structure,
 * that it is a function of (entry list, vectors), and that searches started
 * from it keep the recall of the plain entry list at a lower cost.
 */
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "build.h"
#include "entry_index.h"
#include "search.h"
#include "test_util.h"

using namespace cagra;
using cagra_test::clustered;

namespace {

/* One shared 20,000 x 64 index (built once for the whole suite). */
using Fixture = cagra_test::ClusteredIndex;

const Fixture &fixture()
{
    static Fixture f(7);
    return f;
}

std::vector<uint32_t> group(const EntryIndex &ix, uint32_t t)
{
    return std::vector<uint32_t>(ix.members.begin() + ix.group_begin[t], ix.members.begin() + ix.group_begin[t + 1]);
}

} // namespace

TEST(EntryIndex, EveryEntryIsAPivotOrInOneOrTwoGroups)
{
    const Fixture &f = fixture();
    InMemoryGraph g = f.graph();
    ASSERT_GE(f.built.entry_nodes.size(), 200u); /* 2 sqrt(20000), rounded up to 8s */
    EntryIndex ix = derive_entry_index(g, f.built.entry_nodes);
    const std::set<uint32_t> entries(f.built.entry_nodes.begin(), f.built.entry_nodes.end());
    EXPECT_EQ(ix.entry_count, entries.size());
    /* the traversal starts at the first entry (the build's central node),
     * which is then left out of the pivots */
    EXPECT_EQ(ix.pivots.size(), (size_t)std::ceil(2 * std::sqrt((double)entries.size())) - 1);
    EXPECT_EQ(std::count(ix.pivots.begin(), ix.pivots.end(), f.built.entry_nodes[0]), 0);
    EXPECT_GE(std::count(ix.members.begin(), ix.members.end(), f.built.entry_nodes[0]), 1);
    ASSERT_EQ(ix.group_begin.size(), ix.pivots.size() + 1);
    EXPECT_EQ(ix.group_begin.front(), 0u);
    EXPECT_EQ(ix.group_begin.back(), ix.members.size());
    const std::set<uint32_t> pivots(ix.pivots.begin(), ix.pivots.end());
    EXPECT_EQ(pivots.size(), ix.pivots.size());
    std::map<uint32_t, int> seen;
    for (uint32_t t = 0; t < ix.pivots.size(); t++) {
        ASSERT_LE(ix.group_begin[t], ix.group_begin[t + 1]);
        auto members = group(ix, t);
        EXPECT_EQ(std::set<uint32_t>(members.begin(), members.end()).size(), members.size()) << "group " << t;
        for (uint32_t m : members) {
            EXPECT_TRUE(entries.count(m));
            EXPECT_FALSE(pivots.count(m));
            seen[m]++;
        }
    }
    for (uint32_t e : entries)
        if (!pivots.count(e)) {
            EXPECT_GE(seen[e], 1) << e;
            EXPECT_LE(seen[e], 2) << e;
        }
    /* Each member sits in the group of its nearest pivot. */
    for (uint32_t t = 0; t < ix.pivots.size(); t++)
        for (uint32_t m : group(ix, t)) {
            const float *v = &f.base[(size_t)m * f.dim];
            float own = l2_squared(v, &f.base[(size_t)ix.pivots[t] * f.dim], f.dim);
            uint32_t closer = 0;
            for (uint32_t p : ix.pivots)
                closer += l2_squared(v, &f.base[(size_t)p * f.dim], f.dim) < own;
            EXPECT_LE(closer, 1u) << "member " << m << " of group " << t;
        }
}

TEST(EntryIndex, IsAFunctionOfTheEntryListAndVectors)
{
    const Fixture &f = fixture();
    InMemoryGraph g = f.graph();
    EntryIndex a = derive_entry_index(g, f.built.entry_nodes);
    EntryIndex b = derive_entry_index(g, f.built.entry_nodes);
    EXPECT_EQ(a.pivots, b.pivots);
    EXPECT_EQ(a.group_begin, b.group_begin);
    EXPECT_EQ(a.members, b.members);
    /* Out-of-range and repeated ids are skipped, nothing else changes. */
    std::vector<uint32_t> noisy = f.built.entry_nodes;
    noisy.push_back(noisy[3]);
    noisy.push_back((uint32_t)f.n);
    noisy.push_back(kInvalidNode);
    EntryIndex c = derive_entry_index(g, noisy);
    EXPECT_EQ(a.pivots, c.pivots);
    EXPECT_EQ(a.members, c.members);
    EXPECT_EQ(a.entry_count, c.entry_count);
}

TEST(EntryIndex, ShortListsAreAllPivots)
{
    const Fixture &f = fixture();
    InMemoryGraph g = f.graph();
    std::vector<uint32_t> few(f.built.entry_nodes.begin(), f.built.entry_nodes.begin() + 20);
    EntryIndex ix = derive_entry_index(g, few);
    EXPECT_EQ(ix.pivots, few);
    EXPECT_TRUE(ix.members.empty());
    EntryIndex none = derive_entry_index(g, {});
    EXPECT_TRUE(none.empty());
    /* A search from an empty index still runs on its random entries. */
    SearchParams p;
    auto res = search(g, f.query(0), 10, p, none);
    EXPECT_EQ(res.size(), 10u);
}

TEST(EntryIndex, AllProbesSearchLikeThePlainList)
{
    const Fixture &f = fixture();
    InMemoryGraph g = f.graph();
    EntryIndex ix = derive_entry_index(g, f.built.entry_nodes);
    SearchParams p;
    p.itopk_size = 16;
    p.entry_probes = 0;
    p.search_width = 1; /* the same width from both (automatic: 2 from the index) */
    for (size_t q = 0; q < 50; q++) {
        Searcher<InMemoryGraph> a(g, f.query(q), p, f.built.entry_nodes);
        Searcher<InMemoryGraph> b(g, f.query(q), p, ix);
        Neighbor ra[10], rb[10];
        ASSERT_EQ(a.next(10, ra), 10u);
        ASSERT_EQ(b.next(10, rb), 10u);
        for (int i = 0; i < 10; i++) {
            EXPECT_EQ(ra[i].id, rb[i].id) << "query " << q;
            EXPECT_EQ(ra[i].distance, rb[i].distance);
        }
    }
}

TEST(EntryIndex, FewProbesKeepRecallAtFewerDistances)
{
    const Fixture &f = fixture();
    auto truth = cagra_test::exact_knn(f.base, f.queries, f.dim, 10);
    InMemoryGraph g = f.graph();
    EntryIndex ix = derive_entry_index(g, f.built.entry_nodes);
    SearchParams p;     /* the defaults: entry_probes 8 */
    p.search_width = 1; /* the same width from both (automatic: 2 from the index) */
    double plain = 0, indexed = 0;
    uint64_t plain_d = 0, indexed_d = 0;
    for (size_t q = 0; q < truth.size(); q++) {
        Neighbor out[10];
        Searcher<InMemoryGraph> a(g, f.query(q), p, f.built.entry_nodes);
        a.next(10, out);
        plain += cagra_test::recall(std::vector<Neighbor>(out, out + 10), truth[q]);
        plain_d += a.distance_count();
        Searcher<InMemoryGraph> b(g, f.query(q), p, ix);
        b.next(10, out);
        indexed += cagra_test::recall(std::vector<Neighbor>(out, out + 10), truth[q]);
        indexed_d += b.distance_count();
    }
    plain /= truth.size();
    indexed /= truth.size();
    EXPECT_GE(indexed, 0.95);
    EXPECT_GE(indexed, plain - 0.01);
    EXPECT_LT(indexed_d, plain_d);
    RecordProperty("recall_plain", std::to_string(plain));
    RecordProperty("recall_indexed", std::to_string(indexed));
}

/* The groups are local now (the central entry is no pivot), so a probe
 * measures a few entries: two of them still find the query's cluster. */
TEST(EntryIndex, TwoProbesStillFindTheQuerysCluster)
{
    const Fixture &f = fixture();
    auto truth = cagra_test::exact_knn(f.base, f.queries, f.dim, 10);
    InMemoryGraph g = f.graph();
    EntryIndex ix = derive_entry_index(g, f.built.entry_nodes);
    SearchParams p;
    p.itopk_size = 32;
    p.entry_probes = 2;
    p.random_entries = 0;
    double total = 0;
    for (size_t q = 0; q < truth.size(); q++)
        total += cagra_test::recall(search(g, f.query(q), 10, p, ix), truth[q]);
    EXPECT_GE(total / truth.size(), 0.90);
}

TEST(EntryIndex, SearchIsDeterministicAndContinues)
{
    const Fixture &f = fixture();
    InMemoryGraph g = f.graph();
    EntryIndex ix = derive_entry_index(g, f.built.entry_nodes);
    SearchParams p;
    p.entry_probes = 2;
    auto a = search(g, f.query(5), 10, p, ix);
    auto b = search(g, f.query(5), 10, p, ix);
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); i++)
        EXPECT_EQ(a[i].id, b[i].id);
    /* Continued: no repeats, non-decreasing distances. */
    Searcher<InMemoryGraph> s(g, f.query(5), p, ix);
    std::set<uint32_t> ids;
    float last = -1;
    for (int round = 0; round < 5; round++) {
        Neighbor out[20];
        uint32_t got = s.next(20, out);
        ASSERT_EQ(got, 20u);
        for (uint32_t i = 0; i < got; i++) {
            EXPECT_TRUE(ids.insert(out[i].id).second);
            EXPECT_GE(out[i].distance, last);
            last = out[i].distance;
        }
    }
}

/* The automatic search_width (types.h): a CPU search from an entry index
 * expands 2 parents an iteration, from a plain entry list 1; the GPU's
 * resolution is 1.  An explicit width stays. */
TEST(EntryIndex, AutomaticWidthOnTheCpu)
{
    const Fixture &f = fixture();
    InMemoryGraph g = f.graph();
    EntryIndex ix = derive_entry_index(g, f.built.entry_nodes);
    const SearchParams p; /* the defaults: automatic */
    EXPECT_EQ(p.search_width, kAutoSearchWidth);

    SearchParams wide = p, narrow = p;
    wide.search_width = 2;
    narrow.search_width = 1;
    EXPECT_EQ(cpu_search_params(p, true), wide);
    EXPECT_EQ(cpu_search_params(p, false), narrow);
    EXPECT_EQ(gpu_search_params(p), narrow);
    SearchParams one = p;
    one.itopk_size = 1;
    EXPECT_EQ(cpu_search_params(one, true).search_width, 1u); /* never above itopk_size */
    EXPECT_NO_THROW(validate_search_params(one, 1));
    SearchParams mine = p;
    mine.search_width = 3;
    EXPECT_EQ(cpu_search_params(mine, true), mine);
    EXPECT_EQ(cpu_search_params(mine, false), mine);
    EXPECT_EQ(gpu_search_params(mine), mine);

    /* The Searcher resolves it so: from the index it runs exactly as width
     * 2 (the same results, distances and expansion rounds), from the list
     * exactly as width 1. */
    uint64_t auto_rounds = 0, narrow_rounds = 0;
    for (size_t q = 0; q < 50; q++) {
        Searcher<InMemoryGraph> a(g, f.query(q), p, ix);
        Searcher<InMemoryGraph> b(g, f.query(q), wide, ix);
        EXPECT_EQ(a.params().search_width, 2u);
        EXPECT_EQ(a.params().random_entries, 32u);
        Neighbor ra[10], rb[10];
        ASSERT_EQ(a.next(10, ra), 10u);
        ASSERT_EQ(b.next(10, rb), 10u);
        for (int i = 0; i < 10; i++)
            EXPECT_EQ(ra[i].id, rb[i].id) << "query " << q;
        EXPECT_EQ(a.distance_count(), b.distance_count());
        EXPECT_EQ(a.iteration_count(), b.iteration_count());
        auto_rounds += a.iteration_count();

        Searcher<InMemoryGraph> c(g, f.query(q), p, f.built.entry_nodes);
        Searcher<InMemoryGraph> d(g, f.query(q), narrow, f.built.entry_nodes);
        EXPECT_EQ(c.params().search_width, 1u);
        ASSERT_EQ(c.next(10, ra), 10u);
        ASSERT_EQ(d.next(10, rb), 10u);
        for (int i = 0; i < 10; i++)
            EXPECT_EQ(ra[i].id, rb[i].id) << "query " << q;
        EXPECT_EQ(c.distance_count(), d.distance_count());
        narrow_rounds += c.iteration_count();
    }
    /* two parents a round: the walk takes far fewer rounds */
    EXPECT_LT(auto_rounds * 3, narrow_rounds * 2);
}

/* From an entry index the random entries are measured once the walk has
 * converged, so they still rescue a walk that started in the wrong place:
 * from a single entry (one pivot) on 256 separated clusters, the walk
 * often stays in that entry's region, and the random entries measured
 * after it find more of the true neighbours than no random entries. */
TEST(EntryIndex, RandomEntriesAfterTheWalkStillRescueIt)
{
    const Fixture &f = fixture();
    auto truth = cagra_test::exact_knn(f.base, f.queries, f.dim, 10);
    InMemoryGraph g = f.graph();
    EntryIndex one = derive_entry_index(g, {f.built.entry_nodes[0]});
    SearchParams with, without;
    with.itopk_size = without.itopk_size = 16;
    without.random_entries = 0;
    double rescued = 0, alone = 0;
    uint64_t with_d = 0, without_d = 0;
    for (size_t q = 0; q < truth.size(); q++) {
        Neighbor out[10];
        Searcher<InMemoryGraph> a(g, f.query(q), with, one);
        EXPECT_EQ(a.distance_count(), 1u); /* only the pivot at the start */
        ASSERT_EQ(a.next(10, out), 10u);
        rescued += cagra_test::recall(std::vector<Neighbor>(out, out + 10), truth[q]);
        with_d += a.distance_count();
        Searcher<InMemoryGraph> b(g, f.query(q), without, one);
        ASSERT_EQ(b.next(10, out), 10u);
        alone += cagra_test::recall(std::vector<Neighbor>(out, out + 10), truth[q]);
        without_d += b.distance_count();
    }
    RecordProperty("recall_without_random", std::to_string(alone / truth.size()));
    RecordProperty("recall_random_after_walk", std::to_string(rescued / truth.size()));
    EXPECT_GT(rescued, alone);
    EXPECT_GT(with_d, without_d);
}
