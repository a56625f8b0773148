/*
 * test_params.cpp — every bad parameter and bad input is rejected with its
 * own message, code and hint.
 */
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>

#include "build.h"
#include "search.h"

using namespace cagra;

namespace {

void expect_error(const std::function<void()> &fn, ErrorCode code, const std::string &message,
                  const std::string &hint_part = "")
{
    try {
        fn();
        ADD_FAILURE() << "no error; expected: " << message;
    } catch (const Error &e) {
        EXPECT_EQ(e.code(), code) << message;
        EXPECT_EQ(std::string(e.what()), message);
        if (!hint_part.empty())
            EXPECT_NE(e.hint().find(hint_part), std::string::npos) << e.hint();
    }
}

BuildParams with(std::function<void(BuildParams &)> f)
{
    BuildParams p;
    f(p);
    return p;
}

std::vector<float> ones(uint64_t n, uint32_t dim)
{
    return std::vector<float>(n * dim, 1.0f);
}

} // namespace

TEST(Params, BuildParameters)
{
    auto data = ones(100, 4);
    DatasetView v{data.data(), 100, 4};
    auto build = [&](BuildParams p) { return [=] { build_graph(v, Metric::L2, p); }; };
    const auto P = ErrorCode::InvalidParameter;
    expect_error(build(with([](BuildParams &p) { p.graph_degree = 1; })), P, "graph_degree must be at least 2, got 1",
                 "between 2 and 1024");
    expect_error(build(with([](BuildParams &p) { p.graph_degree = 0; })), P, "graph_degree must be at least 2, got 0");
    expect_error(build(with([](BuildParams &p) {
                     p.graph_degree = 2000;
                     p.intermediate_degree = 4000;
                 })),
                 P, "graph_degree must be at most 1024, got 2000");
    expect_error(build(with([](BuildParams &p) { p.intermediate_degree = 2048; })), P,
                 "intermediate_graph_degree must be at most 1024, got 2048");
    expect_error(build(with([](BuildParams &p) {
                     p.graph_degree = 64;
                     p.intermediate_degree = 32;
                 })),
                 P, "graph_degree (64) must not exceed intermediate_graph_degree (32)",
                 "Raise intermediate_graph_degree");
    expect_error(build(with([](BuildParams &p) { p.nn_descent_max_iterations = 0; })), P,
                 "nn_descent_max_iterations must be at least 1");
    expect_error(build(with([](BuildParams &p) { p.nn_descent_termination = -1; })), P,
                 "nn_descent_termination must be in [0, 1), got -1.000000");
    expect_error(build(with([](BuildParams &p) { p.nn_descent_termination = std::nanf(""); })), P,
                 "nn_descent_termination must be in [0, 1), got nan");
    expect_error(build(with([](BuildParams &p) { p.threads = 0; })), P, "build threads must be at least 1");
    expect_error([&] { build_graph(v, (Metric)7, BuildParams{}); }, P, "unknown metric 7");
}

TEST(Params, Data)
{
    const auto D = ErrorCode::InvalidData;
    auto data = ones(10, 4);
    expect_error(
        [&] {
            build_graph(DatasetView{data.data(), 10, 0}, Metric::L2, BuildParams{});
        },
        D, "vector dimension must be at least 1");
    std::vector<float> big(16001, 1.0f);
    expect_error(
        [&] {
            build_graph(DatasetView{big.data(), 1, 16001}, Metric::L2, BuildParams{});
        },
        D, "vectors of 16001 dimensions exceed the limit of 16000", "at most 16000");
    expect_error(
        [&] {
            build_graph(DatasetView{data.data(), 0, 4}, Metric::L2, BuildParams{});
        },
        D, "cannot build a graph over 0 vectors");
    expect_error(
        [&] {
            build_graph(DatasetView{nullptr, 3, 4}, Metric::L2, BuildParams{});
        },
        D, "no vector data given");
    data[6 * 4 + 2] = std::numeric_limits<float>::quiet_NaN();
    expect_error(
        [&] {
            build_graph(DatasetView{data.data(), 10, 4}, Metric::L2, BuildParams{});
        },
        D, "vector 6 holds NaN at position 2", "NaN or infinite");
    data[6 * 4 + 2] = 1.0f;
    data[9 * 4 + 3] = -std::numeric_limits<float>::infinity();
    expect_error(
        [&] {
            build_graph(DatasetView{data.data(), 10, 4}, Metric::L2, BuildParams{});
        },
        D, "vector 9 holds infinity at position 3");
    /* 16000 dimensions are accepted. */
    std::vector<float> edge(3 * 16000);
    for (size_t i = 0; i < edge.size(); i++)
        edge[i] = (float)(i % 13);
    BuildParams p;
    p.graph_degree = 2;
    p.intermediate_degree = 2;
    EXPECT_EQ(build_graph(DatasetView{edge.data(), 3, 16000}, Metric::L2, p).graph.size(), 3u);
}

TEST(Params, SearchParameters)
{
    const auto P = ErrorCode::InvalidParameter;
    auto check = [](SearchParams p, uint32_t k) { return [=] { validate_search_params(p, k); }; };
    SearchParams p;
    p.itopk_size = 0;
    expect_error(check(p, 0), P, "itopk_size must be at least 1", "64 is a good start");
    p.itopk_size = 2000;
    expect_error(check(p, 0), P, "itopk_size must be at most 1024, got 2000");
    p = SearchParams{};
    /* 0 is automatic, and an automatic width never exceeds itopk_size */
    p.search_width = kAutoSearchWidth;
    p.itopk_size = 1;
    EXPECT_NO_THROW(validate_search_params(p, 1));
    p.search_width = 65;
    p.itopk_size = 128;
    expect_error(check(p, 0), P, "search_width must be at most 64, got 65");
    p = SearchParams{};
    p.itopk_size = 4;
    p.search_width = 8;
    expect_error(check(p, 0), P, "search_width (8) must not exceed itopk_size (4)");
    p = SearchParams{};
    p.random_entries = 5000;
    expect_error(check(p, 0), P, "random_entries must be at most 1024, got 5000");
    expect_error(check(SearchParams{}, 65), P, "k (65) must not exceed itopk_size (64)", "Raise itopk_size");
    EXPECT_NO_THROW(validate_search_params(SearchParams{}, 64));

    /* search() and Searcher check them too. */
    std::vector<float> data = {0, 0, 1, 1, 2, 2};
    BuildParams bp;
    bp.graph_degree = 2;
    bp.intermediate_degree = 2;
    BuiltGraph b = build_graph(DatasetView{data.data(), 3, 2}, Metric::L2, bp);
    InMemoryGraph g(b.graph, DatasetView{data.data(), 3, 2}, Metric::L2);
    expect_error([&] { search(g, data.data(), 100, SearchParams{}, b.entry_nodes); }, P,
                 "k (100) must not exceed itopk_size (64)");
    SearchParams zero;
    zero.itopk_size = 0;
    expect_error([&] { Searcher<InMemoryGraph> s(g, data.data(), zero, b.entry_nodes); }, P,
                 "itopk_size must be at least 1");
}

TEST(Params, AutoMaxIterations)
{
    SearchParams p; /* an automatic width not yet resolved counts as 1 */
    EXPECT_EQ(auto_max_iterations(p), 2u * 64 + 32);
    EXPECT_EQ(auto_max_iterations(cpu_search_params(p, true)), 2u * 32 + 32); /* width 2 */
    p.search_width = 4;
    EXPECT_EQ(auto_max_iterations(p), 2u * 16 + 32);
}

TEST(Params, FilteredSearchWidensWithThePassRate)
{
    SearchParams p; /* itopk 64, width automatic: counted as 1 */
    /* everything passes: the caller's parameters; exact only for small graphs */
    FilteredSearchPlan all = plan_filtered_search(p, 32, 1000000, 1000000, 512);
    EXPECT_EQ(all.params.itopk_size, 64u);
    EXPECT_EQ(all.params.max_iterations, auto_max_iterations(p));
    EXPECT_FALSE(all.exact);
    EXPECT_TRUE(plan_filtered_search(p, 32, 5000, 5000, 512).exact); /* 5,000 <= 32 * 160 */
    /* half: twice the candidates and iterations */
    FilteredSearchPlan half = plan_filtered_search(p, 32, 500000, 1000000, 512);
    EXPECT_EQ(half.params.itopk_size, 128u);
    EXPECT_EQ(half.params.max_iterations, 2u * 128 + 32);
    EXPECT_FALSE(half.exact);
    /* 10%: the buffer stops at max_itopk, the iterations do not */
    FilteredSearchPlan tenth = plan_filtered_search(p, 32, 100000, 1000000, 512);
    EXPECT_EQ(tenth.params.itopk_size, 512u);
    EXPECT_EQ(tenth.params.max_iterations, 2u * 640 + 32);
    EXPECT_FALSE(tenth.exact);
    EXPECT_EQ(plan_filtered_search(p, 32, 100000, 1000000, 1024).params.itopk_size, 640u);
    /* 1%: fewer passing nodes than the traversal would measure */
    FilteredSearchPlan rare = plan_filtered_search(p, 32, 10000, 1000000, 512);
    EXPECT_EQ(rare.params.max_iterations, 2u * 6400 + 32);
    EXPECT_TRUE(rare.exact);
    /* one node, or none */
    FilteredSearchPlan one = plan_filtered_search(p, 32, 1, 1000000, 512);
    EXPECT_EQ(one.params.max_iterations, 2u * 1000000 + 32);
    EXPECT_TRUE(one.exact);
    EXPECT_TRUE(plan_filtered_search(p, 32, 0, 1000000, 512).exact);
    /* the caller's own iteration count stays, and bounds the exact case */
    SearchParams fixed = p;
    fixed.max_iterations = 100;
    FilteredSearchPlan f = plan_filtered_search(fixed, 32, 10000, 1000000, 512);
    EXPECT_EQ(f.params.max_iterations, 100u);
    EXPECT_FALSE(f.exact);
    EXPECT_TRUE(plan_filtered_search(fixed, 32, 3200, 1000000, 512).exact);
    /* wider searches measure more per iteration */
    SearchParams wide = p;
    wide.search_width = 4;
    FilteredSearchPlan w = plan_filtered_search(wide, 32, 100000, 1000000, 512);
    EXPECT_EQ(w.params.max_iterations, 2u * 640 / 4 + 32);
    EXPECT_FALSE(w.exact); /* 100,000 > 4 * 32 * 352 */
    /* at the CPU's automatic width from an entry index: 2 */
    FilteredSearchPlan cpu = plan_filtered_search(cpu_search_params(p, true), 32, 100000, 1000000, 512);
    EXPECT_EQ(cpu.params.search_width, 2u);
    EXPECT_EQ(cpu.params.max_iterations, 2u * 640 / 2 + 32);
    EXPECT_FALSE(cpu.exact); /* 100,000 > 2 * 32 * 672 */
    EXPECT_TRUE(plan_filtered_search(cpu_search_params(p, true), 32, 10000, 1000000, 512).exact);
    /* a graph smaller than itopk_size: the caller's buffer */
    EXPECT_EQ(plan_filtered_search(p, 32, 10, 40, 512).params.itopk_size, 64u);
}

TEST(Params, GraphAndDataMismatch)
{
    std::vector<float> data(8, 1.0f);
    Graph g;
    g.degree = 2;
    g.edges = {1, 2, 0, 2};
    expect_error(
        [&] {
            InMemoryGraph a(g, DatasetView{data.data(), 4, 2}, Metric::L2);
        },
        ErrorCode::InvalidData, "graph of 2 rows does not match 4 vectors");
}
