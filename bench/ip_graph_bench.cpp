/*
 * ip_graph_bench.cpp — inner-product graphs on the CPU (docs/benchmarks.md,
 * "Inner product"): for synthetic clustered sets (test/core/test_util.h's
 * generator, whose norms vary with the cluster centres) of 64, 256 and 768
 * dimensions, the build time, the search buffer the build measures
 * (choose_itopk), and recall@10 and milliseconds per query of one search
 * thread at itopk 32, 48, 64 and the measured one.
 *
 * usage: ip_graph_bench [ROWS] [QUERIES]   (default 20,000 and 500; 2 build threads)
 */
#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "../test/core/test_util.h"

using namespace cagra;

namespace {

double seconds_since(std::chrono::steady_clock::time_point start)
{
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

} // namespace

int main(int argc, char **argv)
{
    const uint64_t n = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 20000;
    const uint64_t nq = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 500;
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
