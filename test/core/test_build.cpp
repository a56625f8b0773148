/*
 * test_build.cpp — graph construction: invariants of every row, the small
 * n <= degree cases, kNN-graph recall against brute force, determinism,
 * progress and cancel.
 */
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <set>
#include <thread>

#include "build.h"
#include "test_util.h"

using namespace cagra;
using cagra_test::clustered;

namespace {

/* Every row full (padding only while n <= degree), no self edge, no
 * duplicate, ids in range. */
void expect_valid_graph(const Graph &g, uint64_t n, uint32_t degree)
{
    ASSERT_EQ(g.degree, degree);
    ASSERT_EQ(g.size(), n);
    for (uint64_t i = 0; i < n; i++) {
        std::set<uint32_t> seen;
        uint32_t padding = 0;
        for (uint32_t j = 0; j < degree; j++) {
            uint32_t e = g.row(i)[j];
            if (e == kInvalidNode) {
                padding++;
                continue;
            }
            ASSERT_LT(e, n) << "row " << i;
            ASSERT_NE(e, i) << "self edge in row " << i;
            ASSERT_TRUE(seen.insert(e).second) << "duplicate " << e << " in row " << i;
        }
        if (n > degree)
            ASSERT_EQ(padding, 0u) << "row " << i << " not full";
        else
            ASSERT_EQ(padding, degree - (n - 1)) << "row " << i;
    }
}

BuiltGraph build(const std::vector<float> &data, uint32_t dim, BuildParams p, Metric m = Metric::L2)
{
    return build_graph(DatasetView{data.data(), data.size() / dim, dim}, m, p);
}

} // namespace

TEST(Build, InvariantsOnClusteredData)
{
    const uint32_t dim = 24;
    auto data = clustered(5000, dim, 1);
    BuildParams p;
    p.threads = 2;
    BuiltGraph b = build(data, dim, p);
    expect_valid_graph(b.graph, 5000, p.graph_degree);
    ASSERT_FALSE(b.entry_nodes.empty());
    for (uint32_t e : b.entry_nodes)
        EXPECT_LT(e, 5000u);
}

TEST(Build, EveryNodeReachableFromTheFirstEntry)
{
    /* 256 separated clusters of ~80 points, more than the kNN degree of 64:
     * the kNN graph alone falls apart; connect_graph must link them in. */
    const uint32_t dim = 8;
    const uint64_t n = 20000;
    auto data = clustered(n, dim, 8);
    BuildParams p;
    p.threads = 2;
    BuiltGraph b = build(data, dim, p);
    std::vector<uint8_t> seen(n, 0);
    std::vector<uint32_t> queue{b.entry_nodes[0]};
    seen[b.entry_nodes[0]] = 1;
    for (size_t i = 0; i < queue.size(); i++)
        for (uint32_t j = 0; j < b.graph.degree; j++) {
            uint32_t w = b.graph.row(queue[i])[j];
            if (!seen[w]) {
                seen[w] = 1;
                queue.push_back(w);
            }
        }
    EXPECT_EQ(queue.size(), n);
    expect_valid_graph(b.graph, n, p.graph_degree);

    /* Without the links the kNN-based graph is indeed not connected. */
    DatasetView view{data.data(), n, dim};
    Graph bare = optimize_graph(nn_descent(view, Metric::L2, p), p.graph_degree, 2);
    EXPECT_GT(connect_graph(bare, view, Metric::L2, {b.entry_nodes[0]}), 0u);
}

TEST(Build, InvariantsForEveryMetricAndOddDegrees)
{
    const uint32_t dim = 17;
    auto data = clustered(3000, dim, 2);
    for (Metric m : {Metric::L2, Metric::InnerProduct, Metric::Cosine}) {
        std::vector<float> prepared(data.size());
        for (size_t i = 0; i < data.size(); i += dim)
            prepare_vector(m, &data[i], &prepared[i], dim);
        BuildParams p;
        p.graph_degree = 13;
        p.intermediate_degree = 27;
        p.threads = 2;
        expect_valid_graph(build(prepared, dim, p, m).graph, 3000, 13);
    }
}

TEST(Build, SmallInputs)
{
    const uint32_t dim = 5;
    BuildParams p;
    p.graph_degree = 8;
    p.intermediate_degree = 16;
    for (uint64_t n : {1ull, 2ull, 3ull, 8ull, 9ull, 10ull, 16ull, 17ull, 40ull, 300ull}) {
        auto data = clustered(n, dim, n);
        BuiltGraph b = build(data, dim, p);
        expect_valid_graph(b.graph, n, 8);
        ASSERT_FALSE(b.entry_nodes.empty());
    }
    /* n = 1: one row of padding. */
    auto one = clustered(1, dim, 3);
    BuiltGraph b = build(one, dim, p);
    for (uint32_t j = 0; j < 8; j++)
        EXPECT_EQ(b.graph.row(0)[j], kInvalidNode);
    EXPECT_EQ(b.entry_nodes, std::vector<uint32_t>{0});
}

TEST(Build, DuplicateVectors)
{
    const uint32_t dim = 8;
    std::vector<float> data(3000 * dim, 0.5f); /* all the same point */
    for (size_t i = 2000 * dim; i < data.size(); i++)
        data[i] = (float)(i % 7);
    BuildParams p;
    p.threads = 2;
    expect_valid_graph(build(data, dim, p).graph, 3000, 32);
}

TEST(Build, HugeComponentsWhoseDistancesOverflow)
{
    /* Finite inputs whose squared distances overflow to infinity. */
    const uint32_t dim = 4;
    auto data = clustered(3000, dim, 9);
    for (auto &x : data)
        x *= 1e19f;
    BuildParams p;
    p.threads = 2;
    expect_valid_graph(build(data, dim, p).graph, 3000, 32);
    /* Inner products of such vectors overflow, with mixed signs even to NaN;
     * 1000 rows take the brute-force path. */
    expect_valid_graph(build(data, dim, p, Metric::InnerProduct).graph, 3000, 32);
    std::vector<float> small(data.begin(), data.begin() + 1000 * dim);
    expect_valid_graph(build(small, dim, p, Metric::InnerProduct).graph, 1000, 32);
}

TEST(Build, NnDescentRecallAgainstBruteForce)
{
    const uint32_t dim = 32;
    auto data = clustered(6000, dim, 4);
    DatasetView view{data.data(), 6000, dim};
    BuildParams p;
    p.threads = 2;
    KnnGraph approx = nn_descent(view, Metric::L2, p);
    KnnGraph exact = brute_force_knn(view, Metric::L2, p.intermediate_degree, 2);
    ASSERT_EQ(approx.k, 64u);
    ASSERT_EQ(approx.size(), 6000u);
    uint64_t hits = 0;
    for (uint64_t i = 0; i < 6000; i++) {
        std::set<uint32_t> truth(&exact.ids[i * 64], &exact.ids[i * 64] + 64);
        for (uint32_t j = 0; j < 64; j++) {
            hits += truth.count(approx.ids[i * 64 + j]);
            if (j > 0)
                ASSERT_LE(approx.distances[i * 64 + j - 1], approx.distances[i * 64 + j]) << "row " << i;
        }
    }
    double recall = (double)hits / (6000.0 * 64);
    EXPECT_GE(recall, 0.90);
    RecordProperty("knn_recall", std::to_string(recall));
}

TEST(Build, BruteForceKnnIsExact)
{
    /* Against a sort of every distance, over more rows than one block (64)
     * and one column tile, with 3 threads. */
    const uint32_t dim = 20, n = 1500, k = 40;
    auto data = clustered(n, dim, 3);
    DatasetView view{data.data(), n, dim};
    KnnGraph got = brute_force_knn(view, Metric::L2, k, 3);
    ASSERT_EQ(got.k, k);
    uint64_t same = 0;
    for (uint32_t i = 0; i < n; i++) {
        std::vector<std::pair<double, uint32_t>> all;
        for (uint32_t j = 0; j < n; j++)
            if (j != i) {
                double s = 0;
                for (uint32_t t = 0; t < dim; t++) {
                    const double x = (double)data[(size_t)i * dim + t] - data[(size_t)j * dim + t];
                    s += x * x;
                }
                all.push_back({s, j});
            }
        std::sort(all.begin(), all.end());
        std::set<uint32_t> truth;
        for (uint32_t j = 0; j < k; j++)
            truth.insert(all[j].second);
        for (uint32_t j = 0; j < k; j++) {
            same += truth.count(got.ids[(size_t)i * k + j]);
            EXPECT_NEAR(got.distances[(size_t)i * k + j], all[j].first, 1e-3 * (1.0 + all[j].first)) << "row " << i;
            if (j > 0)
                ASSERT_LE(got.distances[(size_t)i * k + j - 1], got.distances[(size_t)i * k + j]) << "row " << i;
        }
    }
    /* float rounding may swap the last of near ties, nothing more */
    EXPECT_GE((double)same / ((double)n * k), 0.999);
}

TEST(Build, DeterministicWithOneThread)
{
    const uint32_t dim = 16;
    auto data = clustered(4000, dim, 5);
    BuildParams p;
    p.threads = 1;
    p.seed = 1234;
    BuiltGraph a = build(data, dim, p), b = build(data, dim, p);
    EXPECT_EQ(a.graph.edges, b.graph.edges);
    EXPECT_EQ(a.entry_nodes, b.entry_nodes);
    p.seed = 99;
    BuiltGraph c = build(data, dim, p);
    EXPECT_NE(a.graph.edges, c.graph.edges);
}

TEST(Build, ProgressReachesDone)
{
    const uint32_t dim = 16;
    auto data = clustered(3000, dim, 6);
    BuildProgress progress;
    BuildParams p;
    build_graph(DatasetView{data.data(), 3000, dim}, Metric::L2, p, &progress);
    EXPECT_EQ(progress.phase.load(), (uint32_t)BuildPhase::Done);
    EXPECT_EQ(progress.done.load(), progress.total.load());
}

/* The kNN phase counts the table's rows: its total is n, and the rows
 * whose lists settled climb to most of them before pruning starts (the
 * counts once ran against an iteration budget convergence left unused). */
TEST(Build, KnnProgressCountsSettledRows)
{
    const uint32_t dim = 32;
    const uint64_t n = 20000;
    auto data = clustered(n, dim, 5);
    BuildParams p;
    p.threads = 2;
    BuildProgress progress;
    /* whatever a poller sees meanwhile (it depends on the scheduler) lies
     * between 0 and the rows; at the end every row has settled */
    std::atomic<bool> finished{false};
    std::atomic<bool> out_of_range{false};
    std::thread poller([&] {
        while (!finished.load()) {
            const uint64_t total = progress.total.load(), done = progress.done.load();
            if (total > n || done > total)
                out_of_range.store(true);
            std::this_thread::sleep_for(std::chrono::microseconds(100));
        }
    });
    nn_descent(DatasetView{data.data(), n, dim}, Metric::L2, p, &progress);
    finished.store(true);
    poller.join();
    EXPECT_FALSE(out_of_range.load());
    EXPECT_EQ(progress.total.load(), n);
    EXPECT_EQ(progress.done.load(), n);
}

/* Cancel before the start, in the middle of NN-descent and during pruning:
 * each time the build throws Error(Cancelled) within 500 ms (the whole
 * build takes seconds; CI runs the tests side by side on two cores).  The
 * middle of NN-descent is 50 ms into its phase, which lasts seconds: its
 * progress count moves once an iteration, and a canceller waiting for it
 * to pass a mark could miss the last iteration's window on a loaded host. */
TEST(Build, CancelStopsPromptly)
{
    const uint32_t dim = 64;
    const uint64_t n = 40000;
    auto data = clustered(n, dim, 7);
    BuildParams p;
    p.threads = 2;
    struct When {
        BuildPhase phase;
        std::chrono::milliseconds into; /* after the phase is first seen */
    };
    using std::chrono::milliseconds;
    for (When when : {When{BuildPhase::Validating, milliseconds(0)}, When{BuildPhase::KnnGraph, milliseconds(50)},
                      When{BuildPhase::Pruning, milliseconds(0)}}) {
        BuildProgress progress;
        std::atomic<bool> finished{false};
        std::chrono::steady_clock::time_point cancelled_at;
        if (when.phase == BuildPhase::Validating) {
            progress.cancel.store(true);
            cancelled_at = std::chrono::steady_clock::now();
        }
        std::thread canceller([&] {
            std::chrono::steady_clock::time_point seen{};
            while (!finished.load() && !progress.cancel.load()) {
                const auto now = std::chrono::steady_clock::now();
                if (progress.phase.load() == (uint32_t)when.phase) {
                    if (seen == std::chrono::steady_clock::time_point{})
                        seen = now;
                    if (now - seen >= when.into) {
                        cancelled_at = now;
                        progress.cancel.store(true);
                    }
                }
                std::this_thread::sleep_for(std::chrono::microseconds(200));
            }
        });
        try {
            build_graph(DatasetView{data.data(), n, dim}, Metric::L2, p, &progress);
            finished.store(true);
            canceller.join();
            ADD_FAILURE() << "build was not cancelled in phase " << (uint32_t)when.phase;
        } catch (const Error &e) {
            auto stopped = std::chrono::steady_clock::now();
            finished.store(true);
            canceller.join();
            EXPECT_EQ(e.code(), ErrorCode::Cancelled);
            EXPECT_STREQ(e.what(), "graph build cancelled");
            EXPECT_EQ(progress.phase.load(), (uint32_t)when.phase);
            auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(stopped - cancelled_at).count();
            EXPECT_LT(ms, 500) << "phase " << (uint32_t)when.phase;
        }
    }
}
