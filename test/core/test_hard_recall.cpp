/*
 * test_hard_recall.cpp — recall on a hard set (issue 12): 50,000 x 256 of
 * intrinsic dimension 96 in 512 clusters of about 100 rows, fewer rows than
 * the kNN lists hold, so every kNN edge stays inside its cluster and the
 * fixed entries (at most 384) cannot cover the clusters.  Before the long
 * edges the default build and search reached recall@10 0.77 here.
 */
#include <gtest/gtest.h>

#include "build.h"
#include "entry_index.h"
#include "search.h"
#include "test_util.h"

using namespace cagra;

namespace {

struct HardSet {
    static constexpr uint32_t dim = 256;
    static constexpr uint64_t n = 50000;
    static constexpr uint64_t nq = 300;
    std::vector<float> base;
    std::vector<float> queries;
    std::vector<std::vector<uint32_t>> truth;
    BuiltGraph built;
    HardSet() : base(cagra_test::clustered(n + nq, dim, 1212, 96, 512))
    {
        queries = cagra_test::take_tail(base, nq, dim);
        truth = cagra_test::exact_knn(base, queries, dim, 10);
        BuildParams p; /* defaults, but the test machine's two cores */
        p.threads = 2;
        built = build_graph(DatasetView{base.data(), n, dim}, Metric::L2, p);
    }
};

const HardSet &hard()
{
    static HardSet h;
    return h;
}

/* sp: by default the defaults (itopk 64, 32 random entries, 8 probes) */
template <class Entries>
double recall_at_10(const HardSet &h, const InMemoryGraph &g, const Entries &entries,
                    const SearchParams &sp = SearchParams{})
{
    double sum = 0;
    for (uint64_t q = 0; q < h.nq; q++)
        sum += cagra_test::recall(search(g, &h.queries[q * h.dim], 10, sp, entries), h.truth[q]);
    return sum / h.nq;
}

} // namespace

TEST(HardRecall, DefaultsReach095OnSmallClustersOfHighIntrinsicDimension)
{
    const HardSet &h = hard();
    InMemoryGraph g(h.built.graph, DatasetView{h.base.data(), h.n, h.dim}, Metric::L2);
    /* As the extension searches: through the entry index of the entries. */
    double indexed = recall_at_10(h, g, derive_entry_index(g, h.built.entry_nodes));
    double plain = recall_at_10(h, g, h.built.entry_nodes);
    RecordProperty("recall_indexed", std::to_string(indexed));
    RecordProperty("recall_plain", std::to_string(plain));
    RecordProperty("probe_miss_rate", std::to_string(h.built.probe_miss_rate));
    EXPECT_GE(indexed, 0.95);
    EXPECT_GE(plain, 0.95);
}

TEST(HardRecall, LongEdgesOnlyWhereTheProbeMisses)
{
    const HardSet &h = hard();
    /* The plain graph misses many of its own nodes here, so the build must
     * have added long edges; the rows stay valid. */
    EXPECT_GT(h.built.probe_miss_rate, kLongEdgeMissRate);
    EXPECT_TRUE(h.built.long_edges);
    const Graph &gr = h.built.graph;
    ASSERT_EQ(gr.size(), h.n);
    for (uint64_t v = 0; v < h.n; v++) {
        const uint32_t *row = gr.row(v);
        for (uint32_t j = 0; j < gr.degree; j++) {
            ASSERT_LT(row[j], h.n) << "row " << v;
            ASSERT_NE(row[j], v) << "self edge in row " << v;
            for (uint32_t i = 0; i < j; i++)
                ASSERT_NE(row[i], row[j]) << "duplicate in row " << v;
        }
    }
    /* Few large clusters (entries cover them, kNN lists reach across each
     * one): the plain graph is kept. */
    std::vector<float> easy = cagra_test::clustered(20000, 64, 42, 24, 32);
    BuildParams p;
    p.threads = 2;
    BuiltGraph plain = build_graph(DatasetView{easy.data(), 20000, 64}, Metric::L2, p);
    EXPECT_LE(plain.probe_miss_rate, kLongEdgeMissRate);
    EXPECT_FALSE(plain.long_edges);
}

namespace {

/* Recall@10 of the held-out queries searched as the leave-one-out estimate
 * searches (the GPU's width 1, from the entry list). */
double query_recall_at(const HardSet &h, const Graph &graph, const std::vector<uint32_t> &entries, uint32_t itopk)
{
    InMemoryGraph g(graph, DatasetView{h.base.data(), h.n, h.dim}, Metric::L2);
    SearchParams sp;
    sp.itopk_size = itopk;
    return recall_at_10(h, g, entries, gpu_search_params(sp));
}

} // namespace

/* The build-time estimate of the search buffer (docs/tuning.md): a node
 * searched for in the graph without it stands for a query.  Its recall
 * follows the held-out queries' at every buffer size (a few hundredths
 * below), on the default graph and on a weak one (degree 4); on the weak one
 * the default buffer falls short, and choose_itopk picks a larger one whose
 * query recall reaches about the target. */
TEST(HardRecall, LeaveOneOutRecallFollowsTheQueriesAndChoosesTheBuffer)
{
    const HardSet &h = hard();
    const DatasetView view{h.base.data(), h.n, h.dim};
    BuildParams weak_params;
    weak_params.threads = 2;
    weak_params.graph_degree = 4;
    weak_params.intermediate_degree = 8;
    const BuiltGraph weak = build_graph(view, Metric::L2, weak_params);
    const std::vector<uint32_t> sizes = {16, 64, 256};
    for (const BuiltGraph *b : {&h.built, &weak}) {
        SCOPED_TRACE(b == &weak ? "degree 4" : "defaults");
        std::vector<double> loo = leave_one_out_recall(b->graph, view, Metric::L2, b->entry_nodes, sizes,
                                                       kItopkSamples, 42, 2);
        for (size_t i = 0; i < sizes.size(); i++) {
            const double q = query_recall_at(h, b->graph, b->entry_nodes, sizes[i]);
            RecordProperty("loo_" + std::to_string(b->graph.degree) + "_" + std::to_string(sizes[i]),
                           std::to_string(loo[i]) + " queries " + std::to_string(q));
            /* mostly a little below the queries' (the graph without a node
             * lost its edges too); 128 samples are a noisy measure */
            EXPECT_LE(loo[i], q + 0.06) << "itopk " << sizes[i];
            EXPECT_GE(loo[i], q - 0.08) << "itopk " << sizes[i];
        }
    }
    /* past the brute-force budget (as at millions of rows) the reference is
     * the widest search: the same figure on the default graph, about 0.02
     * higher on the degree-4 one (its widest search misses a few) */
    for (const BuiltGraph *b : {&h.built, &weak}) {
        std::vector<double> exact = leave_one_out_recall(b->graph, view, Metric::L2, b->entry_nodes, {64},
                                                         kItopkSamples, 42, 2);
        std::vector<double> searched = leave_one_out_recall(b->graph, view, Metric::L2, b->entry_nodes, {64},
                                                            kItopkSamples, 42, 2, 0.0);
        RecordProperty("searched_reference_" + std::to_string(b->graph.degree),
                       std::to_string(exact[0]) + " / " + std::to_string(searched[0]));
        EXPECT_NEAR(searched[0], exact[0], 0.04);
    }
    const ItopkChoice defaults = choose_itopk(h.built.graph, view, Metric::L2, h.built.entry_nodes, 42, 2);
    EXPECT_TRUE(defaults.measured);
    EXPECT_LE(defaults.itopk_size, SearchParams{}.itopk_size);
    EXPECT_GE(defaults.recall, kItopkTargetRecall);
    EXPECT_GE(query_recall_at(h, h.built.graph, h.built.entry_nodes, defaults.itopk_size), kItopkTargetRecall);

    const ItopkChoice c = choose_itopk(weak.graph, view, Metric::L2, weak.entry_nodes, 42, 2);
    RecordProperty("weak_choice", std::to_string(c.itopk_size) + " at " + std::to_string(c.recall));
    EXPECT_LT(query_recall_at(h, weak.graph, weak.entry_nodes, SearchParams{}.itopk_size), kItopkTargetRecall);
    EXPECT_GT(c.itopk_size, SearchParams{}.itopk_size);
    EXPECT_GE(query_recall_at(h, weak.graph, weak.entry_nodes, c.itopk_size), kItopkTargetRecall - 0.03);

    /* small graphs keep the default unmeasured */
    const ItopkChoice small = choose_itopk(h.built.graph, DatasetView{h.base.data(), kItopkMinNodes, h.dim},
                                           Metric::L2, {0}, 42, 2);
    EXPECT_FALSE(small.measured);
    EXPECT_EQ(small.itopk_size, SearchParams{}.itopk_size);
}

/* The build's choice of entry probes (docs/tuning.md): one of
 * kProbeChoices, measured from the entry index at the chosen buffer, and
 * held-out queries searched with it (as the extension searches, from the
 * entry index) find about what they find with the default 12.  On this set
 * 4 probes do. */
TEST(HardRecall, EntryProbesChosenAtBuildKeepTheQueriesRecall)
{
    const HardSet &h = hard();
    const DatasetView view{h.base.data(), h.n, h.dim};
    const ItopkChoice c = choose_itopk(h.built.graph, view, Metric::L2, h.built.entry_nodes, 42, 2);
    ASSERT_TRUE(c.measured);
    EXPECT_TRUE(c.entry_probes == kProbeChoices[0] || c.entry_probes == std::end(kProbeChoices)[-1]);
    EXPECT_GE(c.probes_recall, c.default_probes_recall - kProbeRecallSlack);
    InMemoryGraph g(h.built.graph, view, Metric::L2);
    const EntryIndex index = derive_entry_index(g, h.built.entry_nodes);
    SearchParams chosen, twelve;
    chosen.itopk_size = twelve.itopk_size = c.itopk_size;
    chosen.entry_probes = c.entry_probes;
    const double got = recall_at_10(h, g, index, chosen), want = recall_at_10(h, g, index, twelve);
    RecordProperty("probes", std::to_string(c.entry_probes) + ": queries " + std::to_string(got) + " against " +
                                 std::to_string(want) + " at 12; estimate " + std::to_string(c.probes_recall) +
                                 " against " + std::to_string(c.default_probes_recall));
    EXPECT_EQ(c.entry_probes, 4u);
    EXPECT_GE(got, want - 0.01);

    /* not measured on small graphs: the core's default */
    const ItopkChoice small = choose_itopk(h.built.graph, DatasetView{h.base.data(), kItopkMinNodes, h.dim},
                                           Metric::L2, {0}, 42, 2);
    EXPECT_EQ(small.entry_probes, 0u);
}
