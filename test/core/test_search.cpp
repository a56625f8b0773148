/*
 * test_search.cpp — search recall on a clustered 20,000 x 64 set with the
 * default parameters, filters, continued searches and small graphs.
 */
#include <gtest/gtest.h>

#include <set>

#include "build.h"
#include "search.h"
#include "test_util.h"

using namespace cagra;
using cagra_test::clustered;

namespace {

/* One shared 20,000 x 64 index (built once for the whole suite). */
using Fixture = cagra_test::ClusteredIndex;

const Fixture &fixture()
{
    static Fixture f(42);
    return f;
}

} // namespace

TEST(Search, RecallAt10WithDefaultParameters)
{
    const Fixture &f = fixture();
    auto truth = cagra_test::exact_knn(f.base, f.queries, f.dim, 10);
    InMemoryGraph g = f.graph();
    SearchParams params;
    double total = 0;
    for (size_t q = 0; q < truth.size(); q++) {
        auto res = search(g, f.query(q), 10, params, f.built.entry_nodes);
        ASSERT_EQ(res.size(), 10u);
        for (size_t i = 1; i < res.size(); i++)
            ASSERT_LE(res[i - 1].distance, res[i].distance);
        for (const auto &r : res)
            ASSERT_FLOAT_EQ(r.distance, l2_squared(f.query(q), &f.base[r.id * f.dim], f.dim));
        total += cagra_test::recall(res, truth[q]);
    }
    double recall = total / truth.size();
    EXPECT_GE(recall, 0.95);
    RecordProperty("recall_at_10", std::to_string(recall));
}

TEST(Search, LargerItopkGivesHigherRecall)
{
    const Fixture &f = fixture();
    auto truth = cagra_test::exact_knn(f.base, f.queries, f.dim, 10);
    InMemoryGraph g = f.graph();
    double small = 0, large = 0;
    SearchParams ps, pl;
    ps.itopk_size = 16;
    pl.itopk_size = 256;
    for (size_t q = 0; q < truth.size(); q++) {
        small += cagra_test::recall(search(g, f.query(q), 10, ps, f.built.entry_nodes), truth[q]);
        large += cagra_test::recall(search(g, f.query(q), 10, pl, f.built.entry_nodes), truth[q]);
    }
    EXPECT_GE(large / truth.size(), 0.99);
    EXPECT_GE(large, small);
}

TEST(Search, WiderSearch)
{
    const Fixture &f = fixture();
    auto truth = cagra_test::exact_knn(f.base, f.queries, f.dim, 10);
    InMemoryGraph g = f.graph();
    SearchParams p;
    p.search_width = 4;
    double total = 0;
    for (size_t q = 0; q < truth.size(); q++)
        total += cagra_test::recall(search(g, f.query(q), 10, p, f.built.entry_nodes), truth[q]);
    EXPECT_GE(total / truth.size(), 0.95);
}

TEST(Search, IterationCapStillGivesSortedResults)
{
    const Fixture &f = fixture();
    InMemoryGraph g = f.graph();
    SearchParams p;
    p.max_iterations = 1;
    for (size_t q = 0; q < 20; q++) {
        Searcher<InMemoryGraph> s(g, f.query(q), p, f.built.entry_nodes);
        Neighbor out[10];
        ASSERT_EQ(s.next(10, out), 10u);
        for (int i = 1; i < 10; i++)
            ASSERT_LE(out[i - 1].distance, out[i].distance);
        /* One iteration plus the expansion of each returned node. */
        EXPECT_LE(s.iteration_count(), 1u);
    }
}

TEST(Search, AddedEntriesReachNodesNoEdgeLeadsTo)
{
    /* Each query's nearest node with every edge into it removed: the walk
     * no longer finds it, and as an added entry it comes first. */
    const Fixture &f = fixture();
    SearchParams p;
    uint32_t found_cut = 0, found_added = 0;
    for (size_t q = 0; q < 20; q++) {
        uint32_t nearest = cagra_test::exact_knn(f.base, std::vector<float>(f.query(q), f.query(q) + f.dim),
                                                 f.dim, 1)[0][0];
        Graph cut = f.built.graph;
        for (uint32_t &e : cut.edges)
            if (e == nearest)
                e = kInvalidNode;
        InMemoryGraph g(cut, DatasetView{f.base.data(), f.n, f.dim}, Metric::L2);
        std::vector<uint32_t> entries;
        for (uint32_t e : f.built.entry_nodes)
            if (e != nearest)
                entries.push_back(e);
        Neighbor out[10];
        Searcher<InMemoryGraph> plain(g, f.query(q), p, entries);
        ASSERT_EQ(plain.next(10, out), 10u);
        for (const Neighbor &r : out)
            found_cut += r.id == nearest;
        Searcher<InMemoryGraph> seeded(g, f.query(q), p, entries);
        seeded.add_entries(&nearest, 1);
        ASSERT_EQ(seeded.next(10, out), 10u);
        found_added += out[0].id == nearest;
        for (int i = 1; i < 10; i++)
            ASSERT_LE(out[i - 1].distance, out[i].distance);
    }
    EXPECT_EQ(found_cut, 0u);
    EXPECT_EQ(found_added, 20u);
}

TEST(Search, RandomEntriesOnly)
{
    /* Without fixed entries a search starts only where the random entries
     * land: on 256 separated clusters it often misses the query's cluster,
     * but it still returns k sorted results. */
    const Fixture &f = fixture();
    InMemoryGraph g = f.graph();
    SearchParams p;
    for (size_t q = 0; q < 20; q++) {
        auto res = search(g, f.query(q), 10, p, {});
        ASSERT_EQ(res.size(), 10u);
        for (size_t i = 1; i < res.size(); i++)
            ASSERT_LE(res[i - 1].distance, res[i].distance);
    }
}

TEST(Search, FilterTraversesButNeverReturns)
{
    const Fixture &f = fixture();
    InMemoryGraph g = f.graph();
    auto even = [](uint32_t id) { return id % 2 == 0; };
    auto truth = cagra_test::exact_knn(f.base, f.queries, f.dim, 10, Metric::L2, even);
    SearchParams p;
    double total = 0;
    for (size_t q = 0; q < 100; q++) {
        Searcher<InMemoryGraph> s(g, f.query(q), p, f.built.entry_nodes);
        std::vector<Neighbor> out(10);
        out.resize(s.next(10, even, out.data()));
        ASSERT_EQ(out.size(), 10u);
        for (const auto &r : out)
            ASSERT_EQ(r.id % 2, 0u);
        total += cagra_test::recall(out, truth[q]);
    }
    EXPECT_GE(total / 100, 0.90);
}

TEST(Search, SelectiveFilterStillFindsResults)
{
    /* 1 node in 500 passes (40 of 20,000, mostly in other clusters than
     * the query's): far more than itopk candidates are rejected and the
     * traversal must go on into other clusters.  Strict order drops an
     * accepted node found after a farther one was returned, so recall is
     * lower than without a filter. */
    const Fixture &f = fixture();
    InMemoryGraph g = f.graph();
    auto rare = [](uint32_t id) { return id % 500 == 7; };
    auto truth = cagra_test::exact_knn(f.base, f.queries, f.dim, 5, Metric::L2, rare);
    SearchParams p;
    double total = 0;
    for (size_t q = 0; q < 20; q++) {
        Searcher<InMemoryGraph> s(g, f.query(q), p, f.built.entry_nodes);
        std::vector<Neighbor> out(5);
        out.resize(s.next(5, rare, out.data()));
        ASSERT_EQ(out.size(), 5u);
        for (const auto &r : out)
            ASSERT_EQ(r.id % 500, 7u);
        total += cagra_test::recall(out, truth[q]);
    }
    EXPECT_GE(total / 20, 0.5);
}

TEST(Search, ContinuedSearchHasNoDuplicatesAndNonDecreasingDistances)
{
    const Fixture &f = fixture();
    InMemoryGraph g = f.graph();
    SearchParams p;
    p.itopk_size = 32;
    for (size_t q = 0; q < 20; q++) {
        Searcher<InMemoryGraph> s(g, f.query(q), p, f.built.entry_nodes);
        std::set<uint32_t> seen;
        float last = -1;
        size_t total = 0;
        Neighbor out[25];
        /* 40 calls of 25: far beyond the first itopk_size candidates. */
        for (int call = 0; call < 40; call++) {
            uint32_t got = s.next(25, out);
            ASSERT_EQ(got, 25u) << "query " << q << " call " << call;
            for (uint32_t i = 0; i < got; i++) {
                ASSERT_TRUE(seen.insert(out[i].id).second) << "duplicate " << out[i].id;
                ASSERT_GE(out[i].distance, last);
                last = out[i].distance;
            }
            total += got;
        }
        EXPECT_EQ(total, 1000u);
    }
}

TEST(Search, ContinuedSearchFirstResultsMatchOneShot)
{
    const Fixture &f = fixture();
    InMemoryGraph g = f.graph();
    SearchParams p;
    for (size_t q = 0; q < 20; q++) {
        auto once = search(g, f.query(q), 10, p, f.built.entry_nodes);
        Searcher<InMemoryGraph> s(g, f.query(q), p, f.built.entry_nodes);
        Neighbor a[4], b[6];
        ASSERT_EQ(s.next(4, a), 4u);
        ASSERT_EQ(s.next(6, b), 6u);
        for (int i = 0; i < 4; i++)
            EXPECT_EQ(a[i].id, once[i].id);
        for (int i = 0; i < 6; i++)
            EXPECT_EQ(b[i].id, once[4 + i].id);
    }
}

TEST(Search, ContinuedSearchExhaustsSmallGraph)
{
    const uint32_t dim = 8;
    auto base = clustered(700, dim, 9);
    BuildParams bp;
    bp.graph_degree = 16;
    bp.intermediate_degree = 32;
    BuiltGraph built = build_graph(DatasetView{base.data(), 700, dim}, Metric::L2, bp);
    InMemoryGraph g(built.graph, DatasetView{base.data(), 700, dim}, Metric::L2);
    SearchParams p;
    p.itopk_size = 16;
    Searcher<InMemoryGraph> s(g, base.data(), p, built.entry_nodes);
    std::set<uint32_t> seen;
    Neighbor out[64];
    float last = -1;
    for (;;) {
        uint32_t got = s.next(64, out);
        for (uint32_t i = 0; i < got; i++) {
            ASSERT_TRUE(seen.insert(out[i].id).second);
            ASSERT_GE(out[i].distance, last);
            last = out[i].distance;
        }
        if (got < 64)
            break;
    }
    EXPECT_EQ(s.next(10, out), 0u);
    /* Strict order may drop a few nodes found late; nearly all are returned. */
    EXPECT_GE(seen.size(), 690u);
    EXPECT_TRUE(seen.count(0)); /* the query is node 0 itself */
}

TEST(Search, TinyGraphsWithPadding)
{
    const uint32_t dim = 3;
    for (uint64_t n : {1ull, 2ull, 5ull}) {
        auto base = clustered(n, dim, n + 100);
        BuildParams bp;
        bp.graph_degree = 8;
        bp.intermediate_degree = 8;
        BuiltGraph built = build_graph(DatasetView{base.data(), n, dim}, Metric::L2, bp);
        InMemoryGraph g(built.graph, DatasetView{base.data(), n, dim}, Metric::L2);
        SearchParams p;
        p.itopk_size = 8;
        auto res = search(g, base.data(), 8, p, built.entry_nodes);
        ASSERT_EQ(res.size(), n);
        EXPECT_EQ(res[0].id, 0u);
        EXPECT_EQ(res[0].distance, 0.0f);
    }
}

TEST(Search, InnerProductAndCosine)
{
    const uint32_t dim = 32;
    auto raw = clustered(5050, dim, 11);
    auto queries = cagra_test::take_tail(raw, 50, dim);
    for (Metric m : {Metric::InnerProduct, Metric::Cosine}) {
        std::vector<float> base(raw.size()), qs(queries.size());
        for (size_t i = 0; i < raw.size(); i += dim)
            prepare_vector(m, &raw[i], &base[i], dim);
        for (size_t i = 0; i < queries.size(); i += dim)
            prepare_vector(m, &queries[i], &qs[i], dim);
        BuildParams bp;
        bp.threads = 2;
        BuiltGraph built = build_graph(DatasetView{base.data(), 5000, dim}, m, bp);
        InMemoryGraph g(built.graph, DatasetView{base.data(), 5000, dim}, m);
        auto truth = cagra_test::exact_knn(base, qs, dim, 10, m);
        SearchParams p;
        p.itopk_size = 128;
        double total = 0;
        for (size_t q = 0; q < 50; q++)
            total += cagra_test::recall(search(g, &qs[q * dim], 10, p, built.entry_nodes), truth[q]);
        EXPECT_GE(total / 50, m == Metric::Cosine ? 0.95 : 0.85) << metric_name(m);
    }
}

/* An in-memory copy in float16 (as a float16 index stores its vectors)
 * searches the same graph to the same neighbours as the float32 copy, up to
 * the rounding: distances are those to the stored halves, within float16's
 * error of the float32 ones, the results overlap almost entirely and the
 * recall is the same within 0.005. */
TEST(Search, Float16CopyFindsTheFloat32Neighbours)
{
    const Fixture &f = fixture();
    auto truth = cagra_test::exact_knn(f.base, f.queries, f.dim, 10);
    const VectorFormat half{ElementType::Float16, f.dim, Metric::L2};
    std::vector<uint16_t> halves(f.n * f.dim);
    for (uint64_t i = 0; i < f.n; i++)
        half.store(&f.base[i * f.dim], &halves[i * f.dim]);
    InMemoryGraph g32 = f.graph();
    InMemoryGraph g16(f.built.graph, halves.data(), half);
    EXPECT_EQ(g16.dim(), f.dim);
    EXPECT_EQ(g16.size(), f.n);
    std::vector<float> scratch(f.dim), widened(f.dim);
    half.load(&halves[7 * f.dim], widened.data());
    const float *v = g16.vector(7, scratch.data());
    for (uint32_t j = 0; j < f.dim; j++)
        ASSERT_EQ(v[j], widened[j]);

    SearchParams params;
    params.itopk_size = 32;
    double recall32 = 0, recall16 = 0;
    size_t shared = 0;
    for (size_t q = 0; q < truth.size(); q++) {
        auto r32 = search(g32, f.query(q), 10, params, f.built.entry_nodes);
        auto r16 = search(g16, f.query(q), 10, params, f.built.entry_nodes);
        ASSERT_EQ(r16.size(), 10u);
        const double qnorm = vector_norm(f.query(q), f.dim);
        for (const auto &r : r16) {
            ASSERT_EQ(r.distance, half.distance(f.query(q), &halves[r.id * f.dim]));
            /* | ||q - h||^2 - ||q - x||^2 | <= e (2 ||q - x|| + e), e = ||x - h|| <= 2^-11 ||x|| */
            const float exact = l2_squared(f.query(q), &f.base[r.id * f.dim], f.dim);
            const double e = kHalfUnitRoundoff * vector_norm(&f.base[r.id * f.dim], f.dim);
            EXPECT_NEAR(r.distance, exact, 2 * e * (2 * std::sqrt((double)exact) + e) + 1e-4 * (qnorm * qnorm + 1));
            for (const auto &s : r32)
                shared += s.id == r.id;
        }
        recall32 += cagra_test::recall(r32, truth[q]);
        recall16 += cagra_test::recall(r16, truth[q]);
    }
    const double n = (double)truth.size();
    EXPECT_GE(shared / (10 * n), 0.98);
    EXPECT_NEAR(recall16 / n, recall32 / n, 0.005);
}

/* Both forms of the visited set (a bitmap up to kDenseVisitedLimit nodes,
 * a hash table beyond) answer alike, across resets of one object. */
TEST(Search, VisitedSetBothForms)
{
    detail::VisitedSet v;
    for (uint32_t universe : {1000u, detail::VisitedSet::kDenseVisitedLimit + 1, 100u, 1000u}) {
        v.reset(16, universe);
        EXPECT_EQ(v.dense(), universe <= detail::VisitedSet::kDenseVisitedLimit);
        std::set<uint32_t> seen;
        detail::Rng rng(universe);
        for (uint32_t i = 0; i < 3000; i++) {
            uint32_t id = (uint32_t)rng.below(universe);
            EXPECT_EQ(v.insert(id), seen.insert(id).second);
        }
        EXPECT_EQ(v.count(), seen.size());
        if (v.dense())
            EXPECT_FALSE(v.insert(kInvalidNode)); /* padding is never fresh */
    }
}
