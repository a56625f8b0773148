/*
 * test_inner_product_graph.cpp — the inner-product graph built as L2 over
 * augmented vectors (inner_product_graph.h): the augmented distance ranks
 * nodes as the inner product does, a graph of one- or two-dimensional data
 * of unequal norms can be walked to every node a filtered search accepts,
 * inserts plan in the same space, and recall at 64 to 768 dimensions.
 */
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>

#include "build.h"
#include "inner_product_graph.h"
#include "test_util.h"
#include "update.h"

using namespace cagra;

namespace {

/* n vectors of dim, each a uniform direction times a norm uniform in
 * [0.1, 10]: inner product's nearest are the longest in a direction. */
std::vector<float> unequal_norms(uint64_t n, uint32_t dim, uint64_t seed)
{
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::uniform_real_distribution<float> norm(0.1f, 10.0f);
    std::vector<float> out(n * dim);
    for (uint64_t i = 0; i < n; i++) {
        float *x = &out[i * dim];
        for (uint32_t j = 0; j < dim; j++)
            x[j] = normal(rng);
        const float scale = norm(rng) / std::sqrt(std::max(inner_product(x, x, dim), 1e-12f));
        for (uint32_t j = 0; j < dim; j++)
            x[j] *= scale;
    }
    return out;
}

/* Every accepted node a continued search returns, in order, up to `limit`. */
template <class Accessor, class Accept>
std::vector<uint32_t> all_returned(const Accessor &g, const float *query, const std::vector<uint32_t> &entries,
                                   Accept accept, uint32_t limit)
{
    Searcher<Accessor> s(g, query, SearchParams{}, entries);
    std::vector<uint32_t> out;
    Neighbor batch[16];
    for (uint32_t got; out.size() < limit && (got = s.next(16, accept, batch)) > 0;)
        for (uint32_t i = 0; i < got && out.size() < limit; i++)
            out.push_back(batch[i].id);
    return out;
}

/* The share of the exact filtered answer (first `limit` accepted nodes) a
 * continued search returns, over `queries` random query vectors. */
double filtered_completeness(const std::vector<float> &base, uint32_t dim, const BuiltGraph &built, uint32_t queries,
                             uint32_t every, uint32_t limit)
{
    const uint64_t n = base.size() / dim;
    InMemoryGraph g(built.graph, DatasetView{base.data(), n, dim}, Metric::InnerProduct);
    auto accept = [every](uint32_t id) { return id % every == 0; };
    const std::vector<float> qs = unequal_norms(queries, dim, 99);
    auto truth = cagra_test::exact_knn(base, qs, dim, limit, Metric::InnerProduct, accept);
    uint64_t found = 0, wanted = 0;
    for (uint32_t q = 0; q < queries; q++) {
        std::vector<uint32_t> got = all_returned(g, &qs[q * dim], built.entry_nodes, accept, limit);
        for (uint32_t id : truth[q])
            found += std::count(got.begin(), got.end(), id);
        wanted += truth[q].size();
    }
    return (double)found / (double)wanted;
}

} // namespace

TEST(InnerProductGraph, AugmentedDistanceRanksAsInnerProduct)
{
    const uint32_t dim = 8;
    const std::vector<float> base = unequal_norms(200, dim, 1);
    const double m = largest_norm(DatasetView{base.data(), 200, dim}, 2);
    std::vector<float> q(dim + 1, 0.0f), x(dim + 1);
    const std::vector<float> raw_q = unequal_norms(1, dim, 2);
    std::copy(raw_q.begin(), raw_q.end(), q.begin());
    const double qq = inner_product(q.data(), q.data(), dim);
    for (uint64_t i = 0; i < 200; i++) {
        augment_vector(&base[i * dim], dim, m, x.data());
        /* every augmented vector has norm M ... */
        EXPECT_NEAR(std::sqrt((double)inner_product(x.data(), x.data(), dim + 1)), m, 1e-4 * m);
        /* ... so [q, 0] is at M^2 + |q|^2 - 2 q.x */
        const double expected = m * m + qq - 2.0 * inner_product(q.data(), &base[i * dim], dim);
        EXPECT_NEAR(l2_squared(q.data(), x.data(), dim + 1), expected, 1e-4 * (m * m + qq));
    }
    /* a vector longer than M (inserted later) gets 0, not NaN */
    std::vector<float> longer(dim, 0.0f);
    longer[0] = (float)(2 * m);
    augment_vector(longer.data(), dim, m, x.data());
    EXPECT_EQ(x[dim], 0.0f);
}

/* An inner-product accessor that notes the nodes it measured, as the
 * extension's does for the insert's filter of live nodes. */
class NotingGraph : public InMemoryGraph {
public:
    using InMemoryGraph::InMemoryGraph;
    void distances(const float *query, const uint32_t *ids, uint32_t count, float *out) const
    {
        measured.insert(measured.end(), ids, ids + count);
        InMemoryGraph::distances(query, ids, count, out);
    }
    mutable std::vector<uint32_t> measured;
};

/* AugmentedAccessor's distances are those of the augmented vectors, and
 * they are measured through the base accessor (which records or caches on
 * the way), including a vector longer than M. */
TEST(InnerProductGraph, AccessorMeasuresAugmentedDistancesThroughItsBase)
{
    const uint32_t dim = 16;
    const uint64_t n = 500;
    std::vector<float> base = unequal_norms(n, dim, 3);
    const double m = largest_norm(DatasetView{base.data(), n, dim}, 1);
    for (uint32_t j = 0; j < dim; j++)
        base[7 * dim + j] *= 3.0f; /* node 7 beyond M */
    BuildParams bp;
    const BuiltGraph built = build_graph(DatasetView{base.data(), n, dim}, Metric::InnerProduct, bp);
    NotingGraph g(built.graph, DatasetView{base.data(), n, dim}, Metric::InnerProduct);
    AugmentedAccessor<NotingGraph> augmented(g, m);
    std::vector<float> q(dim + 1), x(dim + 1);
    augment_vector(&base[11 * dim], dim, m, q.data());
    std::vector<uint32_t> ids(n);
    for (uint32_t i = 0; i < n; i++)
        ids[i] = i;
    std::vector<float> got(n);
    augmented.distances(q.data(), ids.data(), (uint32_t)n, got.data());
    EXPECT_EQ(g.measured, ids);
    for (uint32_t i = 0; i < n; i++) {
        augment_vector(&base[i * dim], dim, m, x.data());
        EXPECT_NEAR(got[i], l2_squared(q.data(), x.data(), dim + 1), 1e-4 * (4 * m * m)) << "node " << i;
    }
}

/* In one and two dimensions inner product's own kNN graph sends every edge
 * to the few largest values: a filtered search continued to the end then
 * passed over most accepted nodes.  The augmented graph reaches them all,
 * in order. */
TEST(InnerProductGraph, LowDimensionalFilteredSearchReachesEveryAcceptedNode)
{
    for (uint32_t dim : {1u, 2u}) {
        for (uint64_t n : {1500ull, 6000ull}) {
            const std::vector<float> base = unequal_norms(n, dim, 7 + dim);
            BuildParams bp;
            bp.threads = 2;
            const BuiltGraph built = build_graph(DatasetView{base.data(), n, dim}, Metric::InnerProduct, bp);
            /* 1 node in 25 accepted, the first 40 of them wanted */
            EXPECT_GE(filtered_completeness(base, dim, built, 20, 25, 40), 0.99) << dim << " dims, n " << n;
        }
    }
}

/* Inserts into an inner-product graph plan over the augmented space
 * (AugmentedAccessor): grown six-fold, the inserted vectors up to 1.5 times
 * longer than every built one, the graph still serves filtered searches
 * (planned with inner product itself: 0.66 in one dimension). */
TEST(InnerProductGraph, InsertsPlanInTheAugmentedSpace)
{
    for (uint32_t dim : {1u, 2u}) {
        const uint64_t built_n = 1000, n = 6000;
        std::vector<float> base = unequal_norms(n, dim, 21);
        for (uint64_t i = built_n * dim; i < n * dim; i++)
            base[i] *= 1.5f;
        BuildParams bp;
        bp.threads = 2;
        BuiltGraph built = build_graph(DatasetView{base.data(), built_n, dim}, Metric::InnerProduct, bp);
        double m = largest_norm(DatasetView{base.data(), built_n, dim}, 1);
        std::vector<float> query(dim + 1);
        for (uint64_t id = built_n; id < n; id++) {
            InMemoryGraph g(built.graph, DatasetView{base.data(), id, dim}, Metric::InnerProduct);
            AugmentedAccessor<InMemoryGraph> augmented(g, m);
            augment_vector(&base[id * dim], dim, m, query.data());
            apply_insert(built.graph,
                         plan_insert(augmented, query.data(), (uint32_t)id, SearchParams{}, built.entry_nodes));
            m = std::max(m, std::sqrt((double)inner_product(&base[id * dim], &base[id * dim], dim)));
        }
        EXPECT_GE(filtered_completeness(base, dim, built, 20, 25, 40), 0.99) << dim << " dims";
    }
}

/* Recall@10 of inner-product searches at 64 to 768 dimensions, on
 * clustered data of unequal norms (norms vary with the cluster centres):
 * 1,024 clusters in 64 dimensions, smaller than the kNN lists. */
TEST(InnerProductGraph, RecallAt64To768Dimensions)
{
    for (uint32_t dim : {64u, 256u, 768u}) {
        auto base = cagra_test::clustered(10100, dim, 31 + dim, 64, 1024);
        auto queries = cagra_test::take_tail(base, 100, dim);
        BuildParams bp;
        bp.threads = 2;
        const BuiltGraph built = build_graph(DatasetView{base.data(), 10000, dim}, Metric::InnerProduct, bp);
        InMemoryGraph g(built.graph, DatasetView{base.data(), 10000, dim}, Metric::InnerProduct);
        auto truth = cagra_test::exact_knn(base, queries, dim, 10, Metric::InnerProduct);
        SearchParams p;
        p.itopk_size = 32;
        double total = 0;
        for (size_t q = 0; q < 100; q++)
            total += cagra_test::recall(search(g, &queries[q * dim], 10, p, built.entry_nodes), truth[q]);
        const double recall = total / 100;
        RecordProperty("recall_" + std::to_string(dim), std::to_string(recall));
        std::printf("inner product, %u dims: recall@10 %.4f (itopk 32)\n", dim, recall);
        EXPECT_GE(recall, 0.9) << dim << " dims";
    }
}

/* The widest vectors an index takes: the graph's have one coordinate more. */
TEST(InnerProductGraph, BuildsAtTheDimensionLimit)
{
    const std::vector<float> base = unequal_norms(40, kMaxDim, 5);
    BuildParams bp;
    bp.graph_degree = 8;
    bp.intermediate_degree = 16;
    const BuiltGraph built = build_graph(DatasetView{base.data(), 40, kMaxDim}, Metric::InnerProduct, bp);
    EXPECT_EQ(built.graph.size(), 40u);
}

/* A measurement, not a check (docs/benchmarks.md, "Inner product"): for
 * clustered sets of 20,000 rows and 500 queries at 64, 256 and 768
 * dimensions, the build time, the search buffer the build measures, and
 * recall@10 and milliseconds per query of one search thread at itopk 32, 48,
 * 64 and the measured one.  Run by hand with --gtest_also_run_disabled_tests. */
TEST(InnerProductGraph, DISABLED_RecallAndTimeOnClusteredSets)
{
    const uint64_t n = 20000, nq = 500;
    auto seconds_since = [](std::chrono::steady_clock::time_point start) {
        return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    };
    struct Set {
        const char *name;
        uint32_t intrinsic, clusters;
    };
    for (uint32_t dim : {64u, 256u, 768u}) {
        for (const Set &set : {Set{"64/1024", 64, 1024}, Set{"24/256", 24, 256}}) {
            auto base = cagra_test::clustered(n + nq, dim, 31 + dim, set.intrinsic, set.clusters);
            auto queries = cagra_test::take_tail(base, nq, dim);
            const DatasetView data{base.data(), n, dim};
            auto truth = cagra_test::exact_knn(base, queries, dim, 10, Metric::InnerProduct);
            BuildParams bp;
            bp.threads = 2;
            auto start = std::chrono::steady_clock::now();
            const BuiltGraph built = build_graph(data, Metric::InnerProduct, bp);
            const double build_s = seconds_since(start);
            const ItopkChoice choice =
                choose_itopk(built.graph, data, Metric::InnerProduct, built.entry_nodes, bp.seed, bp.threads);
            std::printf("%u dims, set %s (intrinsic/clusters): build %.1f s, long edges %s, measured itopk %u\n", dim,
                        set.name, build_s, built.long_edges ? "yes" : "no", choice.itopk_size);
            InMemoryGraph g(built.graph, data, Metric::InnerProduct);
            for (uint32_t itopk : {32u, 48u, 64u, choice.itopk_size}) {
                SearchParams p;
                p.itopk_size = itopk;
                double total = 0;
                start = std::chrono::steady_clock::now();
                for (uint64_t q = 0; q < nq; q++)
                    total += cagra_test::recall(search(g, &queries[q * dim], 10, p, built.entry_nodes), truth[q]);
                std::printf("  itopk %3u: recall@10 %.4f, %.3f ms/query\n", itopk, total / nq,
                            1000 * seconds_since(start) / nq);
            }
            std::fflush(stdout);
        }
    }
}
