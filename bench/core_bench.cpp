/*
 * core_bench.cpp — CPU benchmark of the core library on a texmex-format data
 * set (base.fvecs, query.fvecs, gt.ivecs, e.g. from shared/bench/gen.py):
 * build time and peak memory, then recall@10 and queries/s on one thread
 * over an itopk sweep; in the same run hnswlib (when built with it) with
 * M=16, ef_construction=64 (--hnsw-m, --hnsw-efc) over an ef sweep, and
 * exact search.
 *
 * usage: core_bench DIR [--threads N] [--degree D] [--intermediate I]
 *                       [--width W] [--also-probes P] [--repeat R] [--iterations N] [--termination T]
 *                       [--no-hnswlib] [--hnsw-m M] [--hnsw-efc E] [--hnsw-huge-pages]
 *                       [--small-pages] [--storage float16]
 *                       [--diagnose] [--quick] [--entries E] [--baseline]
 *
 * --also-probes P: a second itopk sweep at entry_probes P, on the same
 * graph and entry index.
 * --width W: search_width of every search (0, the default: automatic, as the
 * core resolves it: 2 from the entry index, 1 from the plain entry list).
 * --baseline: also the itopk sweep at width 1 (what the GPU searches with
 * and what the CPU searched with before the automatic width), on the same
 * graph.  --random R: random entries of the main sweep (default 32).
 * cagra's vectors are on huge pages (huge_pages.h) as in the worker's CPU
 * copy; --hnsw-huge-pages advises hnswlib's level-0 array (vectors and
 * links) for huge pages too, which hnswlib itself does not do;
 * --small-pages adds the itopk sweep over a copy of the vectors in a plain
 * std::vector (4 KiB pages, as before huge_pages.h), on the same graph.
 * --storage float16: adds the itopk sweep over a float16 copy of the
 * vectors (converted once after the build, on huge pages, as a float16
 * index stores them), on the same graph and entry index; queries stay
 * float32.
 * --repeat R: every point of every sweep (cagra's and hnswlib's) runs once
 * a round, R rounds, and shows its best round.
 *
 * --diagnose: figures about the graph (docs/core.md, issue 12): recall of the
 * kNN graph, in-degrees, strongly connected components, entry coverage and
 * search outcomes; with DIR/base_labels.ivecs and DIR/query_labels.ivecs
 * (gen.py --labels) also edges that leave their cluster and queries whose
 * cluster the search reaches.  --quick: a short itopk sweep, no hnswlib.
 * --entries E: search from the first E of the build's fixed entries only.
 */
#include <sys/mman.h>
#include <sys/resource.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <deque>
#include <map>
#include <memory>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "build.h"
#include "distance.h"
#include "huge_pages.h"
#include "search.h"

#ifdef CAGRA_BENCH_HNSWLIB
#include <hnswlib/hnswlib.h>
#endif

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0)
{
    return std::chrono::duration<double>(Clock::now() - t0).count();
}

/* CPU seconds of this process: on a shared machine the wall clock also
 * counts time spent waiting for a core. */
double cpu_seconds()
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

double peak_rss_mib()
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss / 1024.0;
}

/* texmex .fvecs / .ivecs: each row is int32 dim then dim 4-byte values. */
template <class T, class Rows = std::vector<T>>
Rows read_vecs(const std::string &path, uint32_t &dim, uint64_t &n)
{
    std::ifstream f(path, std::ios::binary);
    if (!f)
        throw std::runtime_error("cannot open " + path);
    f.seekg(0, std::ios::end);
    uint64_t bytes = (uint64_t)f.tellg();
    f.seekg(0);
    int32_t d = 0;
    f.read((char *)&d, 4);
    if (d <= 0)
        throw std::runtime_error("bad dimension in " + path);
    dim = (uint32_t)d;
    n = bytes / (4 + 4ull * dim);
    Rows out(n * dim);
    f.seekg(0);
    for (uint64_t i = 0; i < n; i++) {
        f.read((char *)&d, 4);
        f.read((char *)&out[i * dim], 4ull * dim);
    }
    return out;
}

/* MiB of [p, p + bytes) on transparent huge pages (AnonHugePages of the
 * mappings it overlaps in /proc/self/smaps). */
double huge_page_mib(const void *p, size_t bytes)
{
    std::ifstream f("/proc/self/smaps");
    std::string line;
    const uintptr_t a = (uintptr_t)p, b = a + bytes;
    bool in = false;
    double kib = 0;
    while (std::getline(f, line)) {
        unsigned long lo, hi;
        if (std::sscanf(line.c_str(), "%lx-%lx ", &lo, &hi) == 2 && line.find(':') > 8) {
            in = lo < b && hi > a; /* a mapping's header line: "lo-hi perms ..." */
            continue;
        }
        if (in && line.rfind("AnonHugePages:", 0) == 0)
            kib += std::atof(line.c_str() + 14);
    }
    return kib / 1024;
}

double recall_at_10(const std::vector<uint32_t> &found, const std::vector<int32_t> &gt, uint32_t gt_dim, uint64_t nq)
{
    uint64_t hit = 0;
    for (uint64_t q = 0; q < nq; q++)
        for (uint32_t i = 0; i < 10; i++)
            for (uint32_t j = 0; j < 10; j++)
                if (found[q * 10 + i] == (uint32_t)gt[q * gt_dim + j]) {
                    hit++;
                    break;
                }
    return (double)hit / (nq * 10.0);
}

struct Options {
    std::string dir;
    uint32_t threads = 2;
    uint32_t degree = 32;
    uint32_t intermediate = 64;
    int also_probes = -1; /* --also-probes; -1: none */
    uint32_t width = 0; /* 0: automatic */
    uint32_t repeat = 2;
    uint32_t iterations = 0; /* 0: the library default */
    float termination = -1;  /* < 0: the library default */
    bool hnswlib = true;
    uint32_t hnsw_m = 16;         /* hnswlib M */
    uint32_t hnsw_efc = 64;       /* hnswlib ef_construction */
    bool hnsw_huge_pages = false; /* --hnsw-huge-pages */
    bool small_pages = false;     /* --small-pages */
    bool float16 = false;         /* --storage float16 */
    bool diagnose = false;
    bool quick = false;
    uint32_t entries = 0; /* 0: every fixed entry the build picked */
    bool baseline = false;
    uint32_t random = cagra::SearchParams{}.random_entries; /* --random R */
};

Options parse(int argc, char **argv)
{
    Options o;
    for (int i = 1; i < argc; i++) {
        std::string a = argv[i];
        auto value = [&]() -> uint32_t {
            if (i + 1 >= argc)
                throw std::runtime_error(a + " needs a value");
            return (uint32_t)std::stoul(argv[++i]);
        };
        if (a == "--threads")
            o.threads = value();
        else if (a == "--degree")
            o.degree = value();
        else if (a == "--intermediate")
            o.intermediate = value();
        else if (a == "--width")
            o.width = value();
        else if (a == "--also-probes")
            o.also_probes = (int)value();
        else if (a == "--iterations")
            o.iterations = value();
        else if (a == "--termination")
            o.termination = std::stof(argv[++i]);
        else if (a == "--repeat")
            o.repeat = std::max(1u, value());
        else if (a == "--no-hnswlib")
            o.hnswlib = false;
        else if (a == "--hnsw-m")
            o.hnsw_m = std::max(2u, value());
        else if (a == "--hnsw-efc")
            o.hnsw_efc = std::max(1u, value());
        else if (a == "--small-pages")
            o.small_pages = true;
        else if (a == "--storage") {
            const std::string storage = i + 1 < argc ? argv[++i] : "";
            if (storage != "float16" && storage != "float32")
                throw std::runtime_error("--storage takes float32 or float16");
            o.float16 = storage == "float16";
        } else if (a == "--hnsw-huge-pages")
            o.hnsw_huge_pages = true;
        else if (a == "--diagnose")
            o.diagnose = true;
        else if (a == "--entries")
            o.entries = value();
        else if (a == "--random")
            o.random = value();
        else if (a == "--baseline")
            o.baseline = true;
        else if (a == "--quick")
            o.quick = true, o.hnswlib = false;
        else if (o.dir.empty() && a[0] != '-')
            o.dir = a;
        else
            throw std::runtime_error("unknown argument " + a);
    }
    if (o.dir.empty())
        throw std::runtime_error("usage: core_bench DIR [--threads N] [--degree D] [--intermediate I] [--width W] [--also-probes P] "
                                 "[--repeat R] [--iterations N] [--termination T] [--no-hnswlib] "
                                 "[--hnsw-m M] [--hnsw-efc E] [--hnsw-huge-pages] [--small-pages] [--storage float16] "
                                 "[--diagnose] "
                                 "[--quick] [--entries E] [--baseline] [--random R]");
    return o;
}

struct Qps {
    double wall = 0; /* queries per wall-clock second */
    double cpu = 0;  /* queries per CPU second */
};

/* Runs fn(q) for every query, `repeat` times; returns the best rates. */
template <class Fn>
Qps best_qps(uint64_t nq, uint32_t repeat, Fn &&fn)
{
    Qps best;
    for (uint32_t r = 0; r < repeat; r++) {
        auto t0 = Clock::now();
        double c0 = cpu_seconds();
        for (uint64_t q = 0; q < nq; q++)
            fn(q);
        best.wall = std::max(best.wall, nq / seconds_since(t0));
        best.cpu = std::max(best.cpu, nq / (cpu_seconds() - c0));
    }
    return best;
}

/* Strongly connected components (Kosaraju, iterative): count and largest. */
std::pair<uint64_t, uint64_t> scc_stats(const cagra::Graph &g)
{
    const uint64_t n = g.size();
    const uint32_t deg = g.degree;
    std::vector<uint32_t> order;
    order.reserve(n);
    std::vector<uint8_t> seen(n, 0);
    std::vector<std::pair<uint32_t, uint32_t>> stack;
    for (uint64_t s = 0; s < n; s++) {
        if (seen[s])
            continue;
        seen[s] = 1;
        stack.push_back({(uint32_t)s, 0});
        while (!stack.empty()) {
            auto &[v, j] = stack.back();
            if (j < deg) {
                uint32_t w = g.row(v)[j++];
                if (w != cagra::kInvalidNode && !seen[w]) {
                    seen[w] = 1;
                    stack.push_back({w, 0});
                }
            } else {
                order.push_back(v);
                stack.pop_back();
            }
        }
    }
    /* Reverse graph in CSR form. */
    std::vector<uint64_t> start(n + 1, 0);
    for (uint32_t w : g.edges)
        if (w != cagra::kInvalidNode)
            start[w + 1]++;
    for (uint64_t i = 0; i < n; i++)
        start[i + 1] += start[i];
    std::vector<uint32_t> rev(start[n]);
    std::vector<uint64_t> fill(start.begin(), start.end() - 1);
    for (uint64_t v = 0; v < n; v++)
        for (uint32_t j = 0; j < deg; j++) {
            uint32_t w = g.row(v)[j];
            if (w != cagra::kInvalidNode)
                rev[fill[w]++] = (uint32_t)v;
        }
    std::vector<uint8_t> done(n, 0);
    uint64_t comps = 0, largest = 0;
    std::vector<uint32_t> st;
    for (uint64_t i = n; i-- > 0;) {
        uint32_t s = order[i];
        if (done[s])
            continue;
        comps++;
        uint64_t size = 0;
        done[s] = 1;
        st.push_back(s);
        while (!st.empty()) {
            uint32_t v = st.back();
            st.pop_back();
            size++;
            for (uint64_t e = start[v]; e < start[v + 1]; e++)
                if (!done[rev[e]]) {
                    done[rev[e]] = 1;
                    st.push_back(rev[e]);
                }
        }
        largest = std::max(largest, size);
    }
    return {comps, largest};
}

/* The figures of --diagnose (see the header comment). */
void diagnose(const std::string &dir, const cagra::DatasetView &view, const cagra::BuildParams &bp,
              const cagra::BuiltGraph &built, const cagra::EntryIndex &entry_index, const std::vector<float> &queries,
              uint64_t nq, const std::vector<int32_t> &gt, uint32_t gdim)
{
    const uint64_t n = view.n;
    const uint32_t dim = view.dim;
    const cagra::Graph &g = built.graph;
    std::vector<int32_t> label, qlabel;
    {
        std::ifstream f1(dir + "/base_labels.ivecs"), f2(dir + "/query_labels.ivecs");
        if (f1 && f2) {
            uint32_t d1, d2;
            uint64_t n1, n2;
            label = read_vecs<int32_t>(dir + "/base_labels.ivecs", d1, n1);
            qlabel = read_vecs<int32_t>(dir + "/query_labels.ivecs", d2, n2);
            if (d1 != 1 || d2 != 1 || n1 != n || n2 != nq)
                label.clear(), qlabel.clear();
        }
    }
    const bool labelled = !label.empty();
    std::printf("\n--- diagnosis (%s) ---\n", labelled ? "with cluster labels" : "no labels");

    /* In-degrees. */
    std::vector<uint32_t> indeg(n, 0);
    for (uint32_t w : g.edges)
        if (w != cagra::kInvalidNode)
            indeg[w]++;
    std::map<uint32_t, uint64_t> hist;
    for (uint32_t d : indeg)
        hist[d == 0 ? 0 : d == 1 ? 1 : d <= 4 ? 4 : d <= 8 ? 8 : d <= 16 ? 16 : d <= 32 ? 32 : d <= 64 ? 64 : 65]++;
    std::printf("in-degree (final graph): max %u;", *std::max_element(indeg.begin(), indeg.end()));
    for (auto [b, c] : hist)
        std::printf(" %s%u: %.4f", b == 65 ? ">" : "<=", b == 65 ? 64 : b, (double)c / n);
    std::printf("\n");
    auto [comps, largest] = scc_stats(g);
    std::printf("strongly connected components: %lu, largest %lu of %lu nodes\n", (unsigned long)comps,
                (unsigned long)largest, (unsigned long)n);

    if (labelled) {
        uint64_t clusters = 0;
        for (int32_t l : label)
            clusters = std::max<uint64_t>(clusters, (uint64_t)l + 1);
        uint64_t cross = 0, nodes_cross = 0, total = 0;
        for (uint64_t v = 0; v < n; v++) {
            bool any = false;
            for (uint32_t j = 0; j < g.degree; j++) {
                uint32_t w = g.row(v)[j];
                if (w == cagra::kInvalidNode)
                    continue;
                total++;
                if (label[w] != label[v])
                    cross++, any = true;
            }
            nodes_cross += any;
        }
        std::printf("final graph: %.5f of edges leave their cluster (%lu edges); %.4f of nodes have one\n",
                    (double)cross / total, (unsigned long)cross, (double)nodes_cross / n);
        std::vector<uint8_t> covered(clusters, 0);
        for (uint32_t e : built.entry_nodes)
            covered[label[e]] = 1;
        uint64_t cov = 0, qcov = 0;
        for (uint8_t c : covered)
            cov += c;
        for (uint64_t q = 0; q < nq; q++)
            qcov += covered[qlabel[q]];
        std::printf("entries: %zu fixed entries cover %lu of %lu clusters; %.3f of queries have an entry in "
                    "their cluster\n",
                    built.entry_nodes.size(), (unsigned long)cov, (unsigned long)clusters, (double)qcov / nq);
    }

    /* The kNN graph itself (built again, on the caller's order). */
    {
        auto t0 = Clock::now();
        cagra::KnnGraph knn = cagra::nn_descent(view, cagra::Metric::L2, bp);
        double secs = seconds_since(t0);
        const uint32_t k = knn.k;
        const uint64_t samples = std::min<uint64_t>(n, 300);
        cagra::detail::Rng rng(12345);
        uint64_t hit = 0, hit10 = 0, cross = 0, cross_exact = 0;
        std::vector<std::pair<float, uint32_t>> all(n);
        for (uint64_t s = 0; s < samples; s++) {
            uint64_t v = rng.below(n);
            for (uint64_t i = 0; i < n; i++)
                all[i] = {i == v ? 1e30f : cagra::l2_squared(view.row(v), view.row(i), dim), (uint32_t)i};
            std::partial_sort(all.begin(), all.begin() + k, all.end());
            for (uint32_t j = 0; j < k; j++) {
                uint32_t w = knn.ids[v * k + j];
                for (uint32_t t = 0; t < k; t++)
                    if (all[t].second == w) {
                        hit++;
                        hit10 += t < 10 && j < 10;
                        break;
                    }
                if (labelled) {
                    cross += label[w] != label[v];
                    cross_exact += label[all[j].second] != label[v];
                }
            }
        }
        std::printf("kNN graph (nn_descent again, %.1f s, k %u): recall@k %.4f, recall@10 of the first 10 %.4f", secs,
                    k, (double)hit / (samples * k), (double)hit10 / (samples * 10));
        if (labelled)
            std::printf("; edges leaving the cluster: %.4f (exact kNN: %.4f)", (double)cross / (samples * k),
                        (double)cross_exact / (samples * k));
        std::printf("\n");
    }

    /* Search outcomes at the default itopk. */
    cagra::InMemoryGraph graph(g, view, cagra::Metric::L2);
    const cagra::SearchParams defaults;
    auto run = [&](const char *what, cagra::SearchParams sp, int mode) {
        uint64_t hit = 0, reached = 0, dists = 0;
        cagra::Neighbor out[10];
        for (uint64_t q = 0; q < nq; q++) {
            const float *qv = &queries[q * dim];
            uint32_t got;
            uint64_t dc;
            if (mode == 0) {
                cagra::Searcher<cagra::InMemoryGraph> s(graph, qv, sp, entry_index);
                got = s.next(10, out);
                dc = s.distance_count();
            } else {
                /* 1: from the true nearest neighbour's node; 2: from the
                 * first node of the query's cluster (oracle entry). */
                uint32_t e = (uint32_t)gt[q * gdim];
                if (mode == 2)
                    e = (uint32_t)(std::find(label.begin(), label.end(), qlabel[q]) - label.begin());
                cagra::Searcher<cagra::InMemoryGraph> s(graph, qv, sp, std::vector<uint32_t>{e});
                got = s.next(10, out);
                dc = s.distance_count();
            }
            dists += dc;
            bool in_cluster = false;
            for (uint32_t i = 0; i < got; i++) {
                for (uint32_t j = 0; j < 10; j++)
                    if (out[i].id == (uint32_t)gt[q * gdim + j]) {
                        hit++;
                        break;
                    }
                if (labelled && label[out[i].id] == qlabel[q])
                    in_cluster = true;
            }
            reached += in_cluster;
        }
        std::printf("  %-44s recall@10 %.4f", what, (double)hit / (nq * 10.0));
        if (labelled)
            std::printf("  cluster reached %.3f", (double)reached / nq);
        std::printf("  dists/query %.0f\n", (double)dists / nq);
    };
    const cagra::SearchParams auto_params = cagra::cpu_search_params(defaults, true);
    std::printf("search at itopk %u:\n", defaults.itopk_size);
    std::string what_defaults = "defaults (entry index, width " + std::to_string(auto_params.search_width) + ", " +
                                std::to_string(auto_params.random_entries) + " random)";
    run(what_defaults.c_str(), defaults, 0);
    for (uint32_t r : {0u, 128u, 512u, 1024u}) {
        cagra::SearchParams sp = defaults;
        sp.random_entries = r;
        std::string what = "entry index, " + std::to_string(r) + " random entries";
        run(what.c_str(), sp, 0);
    }
    {
        cagra::SearchParams sp = defaults;
        sp.entry_probes = 0;
        run("all fixed entries, 32 random", sp, 0);
        sp.random_entries = 0;
        run("from the true nearest neighbour only", sp, 1);
        if (labelled)
            run("from one node of the query's cluster only", sp, 2);
    }
}

} // namespace

int main(int argc, char **argv)
{
    try {
        Options o = parse(argc, argv);
        uint32_t dim, qdim, gdim;
        uint64_t n, nq, ng;
        /* The vectors on huge pages, as the worker's CPU copy holds them
         * (huge_pages.h); hnswlib copies them into its own memory. */
        auto base = read_vecs<float, cagra::HugePageVector<float>>(o.dir + "/base.fvecs", dim, n);
        auto queries = read_vecs<float>(o.dir + "/query.fvecs", qdim, nq);
        auto gt = read_vecs<int32_t>(o.dir + "/gt.ivecs", gdim, ng);
        if (qdim != dim || ng != nq || gdim < 10)
            throw std::runtime_error("query or ground-truth files do not match the base");
        std::printf("data: %s  n=%lu dim=%u queries=%lu  kernels=%s  hardware threads=%u\n", o.dir.c_str(),
                    (unsigned long)n, dim, (unsigned long)nq, cagra::distance_kernel_name(),
                    std::thread::hardware_concurrency());
        double rss_data = peak_rss_mib();
        std::printf("vectors: %.0f of %.0f MiB on huge pages\n", huge_page_mib(base.data(), base.size() * 4),
                    base.size() * 4 / 1048576.0);

        /* --- cagra --- */
        cagra::BuildParams bp;
        bp.graph_degree = o.degree;
        bp.intermediate_degree = o.intermediate;
        bp.threads = o.threads;
        if (o.iterations)
            bp.nn_descent_max_iterations = o.iterations;
        if (o.termination >= 0)
            bp.nn_descent_termination = o.termination;
        cagra::DatasetView view{base.data(), n, dim};
        auto t0 = Clock::now();
        double c0 = cpu_seconds();
        cagra::BuiltGraph built = cagra::build_graph(view, cagra::Metric::L2, bp);
        if (o.entries && built.entry_nodes.size() > o.entries)
            built.entry_nodes.resize(o.entries); /* a prefix: still spread (farthest-point order) */
        double build_s = seconds_since(t0), build_cpu = cpu_seconds() - c0;
        double rss_cagra = peak_rss_mib();
        std::printf("\ncagra: build %.2f s wall, %.2f s CPU (%u threads, graph_degree %u, intermediate %u), "
                    "peak RSS %.0f MiB (data alone %.0f MiB)\n",
                    build_s, build_cpu, o.threads, o.degree, o.intermediate, rss_cagra, rss_data);
        std::printf("navigation probe: %.4f of the plain graph's probes missed; long edges %s\n", built.probe_miss_rate,
                    built.long_edges ? "added" : "not added");
        {
            /* the build-time estimate of the search buffer (docs/tuning.md) */
            t0 = Clock::now();
            cagra::ItopkChoice c = cagra::choose_itopk(built.graph, view, cagra::Metric::L2, built.entry_nodes, 42,
                                                       o.threads);
            const std::vector<uint32_t> sizes = {16, 32, 64, 128, 256};
            std::vector<double> loo = cagra::leave_one_out_recall(built.graph, view, cagra::Metric::L2,
                                                                  built.entry_nodes, sizes, cagra::kItopkSamples, 42,
                                                                  o.threads);
            std::printf("itopk estimate: %u (leave-one-out recall@10 %.4f, %.2f s); leave-one-out recall at itopk",
                        c.itopk_size, c.recall, seconds_since(t0));
            for (size_t i = 0; i < sizes.size(); i++)
                std::printf(" %u: %.4f", sizes[i], loo[i]);
            std::printf("\nentry probes estimate: %u (from the entry index at itopk %u: %.4f, at %u probes %.4f)\n",
                        c.entry_probes, c.itopk_size, c.probes_recall, cagra::SearchParams{}.entry_probes,
                        c.default_probes_recall);
        }
        cagra::InMemoryGraph graph(built.graph, view, cagra::Metric::L2);
        t0 = Clock::now();
        cagra::EntryIndex entry_index = cagra::derive_entry_index(graph, built.entry_nodes);
        std::printf("entry index: %u entries, %zu pivots, %.3f ms to derive\n", entry_index.entry_count,
                    entry_index.pivots.size(), seconds_since(t0) * 1e3);
        if (o.diagnose)
            diagnose(o.dir, view, bp, built, entry_index, queries, nq, gt, gdim);

        /* Every sweep point, cagra's and hnswlib's, runs once a round and the
         * rounds repeat (--repeat), each point keeping its best: on a shared
         * machine a burst of load then slows one round of many points, not
         * every run of one point or of one library. */
        struct Point {
            std::function<uint64_t(std::vector<uint32_t> &found)> search_all; /* every query once; the work done */
            std::function<void(double recall, const Qps &qps, double work_per_query)> print;
            Qps best;
            double recall = 0;
            double work = 0;
        };
        struct Table {
            std::string heading;
            std::vector<Point> points;
        };
        std::vector<Table> tables;
        char line[256];
        std::snprintf(line, sizeof line, "%-8s %-6s %-7s %-7s %-10s %-12s %-12s %-14s\n", "itopk", "width", "probes",
                      "random", "recall@10", "QPS(wall)", "QPS(CPU)", "dists/query");
        const std::string cagra_columns = line;
        tables.push_back({"\n" + cagra_columns, {}});
        /* probes < 0: the plain entry list (every entry measured). */
        auto add_cagra = [&](const cagra::InMemoryGraph &g, uint32_t itopk, int probes, uint32_t random_entries,
                             uint32_t width) {
            cagra::SearchParams sp;
            sp.random_entries = random_entries;
            sp.itopk_size = itopk;
            sp.search_width = std::min(width, itopk);
            if (probes >= 0)
                sp.entry_probes = (uint32_t)probes;
            Point p;
            p.search_all = [&g, &queries, &built, &entry_index, sp, probes, nq, dim](std::vector<uint32_t> &found) {
                uint64_t dists = 0;
                cagra::Neighbor out[10];
                for (uint64_t q = 0; q < nq; q++) {
                    auto collect = [&](auto &s) {
                        uint32_t got = s.next(10, out);
                        for (uint32_t i = 0; i < 10; i++)
                            found[q * 10 + i] = i < got ? out[i].id : cagra::kInvalidNode;
                        dists += s.distance_count();
                    };
                    if (probes < 0) {
                        cagra::Searcher<cagra::InMemoryGraph> s(g, &queries[q * dim], sp, built.entry_nodes);
                        collect(s);
                    } else {
                        cagra::Searcher<cagra::InMemoryGraph> s(g, &queries[q * dim], sp, entry_index);
                        collect(s);
                    }
                }
                return dists;
            };
            /* the width and random entries the searches ran with */
            const cagra::SearchParams used = cagra::cpu_search_params(sp, probes >= 0);
            const std::string pr = probes < 0 ? "list" : probes == 0 ? "all" : std::to_string(probes);
            p.print = [itopk, used, pr](double recall, const Qps &qps, double dists) {
                std::printf("%-8u %-6u %-7s %-7u %-10.4f %-12.0f %-12.0f %-14.0f\n", itopk, used.search_width,
                            pr.c_str(), used.random_entries, recall, qps.wall, qps.cpu, dists);
            };
            tables.back().points.push_back(std::move(p));
        };
        const std::vector<uint32_t> sweep = {10u, 16u, 24u, 32u, 48u, 64u, 96u, 128u, 192u, 256u, 384u, 512u};
        /* The low-recall end first: at the smallest itopk, the plain entry
         * list, then the entry index with all and with fewer probes, and
         * without random entries; then the itopk sweep with the defaults. */
        const cagra::SearchParams defaults;
        const uint32_t w = o.width;
        if (o.quick) {
            for (uint32_t itopk : {16u, 32u, 64u, 128u, 256u})
                add_cagra(graph, itopk, (int)defaults.entry_probes, o.random, w);
        } else {
            add_cagra(graph, 10, -1, o.random, w);
            for (int probes : {0, 4, 2, 1})
                add_cagra(graph, 10, probes, o.random, w);
            add_cagra(graph, 10, 1, 0, w);
            for (uint32_t itopk : sweep)
                add_cagra(graph, itopk, (int)defaults.entry_probes, o.random, w);
        }
        if (o.also_probes >= 0) {
            tables.push_back({"the sweep at " + std::to_string(o.also_probes) + " entry probes\n", {}});
            for (uint32_t itopk : sweep)
                add_cagra(graph, itopk, o.also_probes, o.random, w);
        }
        if (o.baseline) {
            tables.push_back({"baseline: width 1\n", {}});
            for (uint32_t itopk : sweep)
                add_cagra(graph, itopk, (int)defaults.entry_probes, o.random, 1);
        }
        /* --small-pages: the vectors as a plain std::vector holds them */
        std::vector<float> small_page_vectors;
        std::unique_ptr<cagra::InMemoryGraph> small_page_graph;
        if (o.small_pages) {
            small_page_vectors.assign(base.begin(), base.end());
            small_page_graph = std::make_unique<cagra::InMemoryGraph>(
                built.graph, cagra::DatasetView{small_page_vectors.data(), n, dim}, cagra::Metric::L2);
            std::snprintf(line, sizeof line,
                          "small pages: the vectors in a std::vector, %.0f of %.0f MiB on huge pages\n",
                          huge_page_mib(small_page_vectors.data(), small_page_vectors.size() * 4),
                          small_page_vectors.size() * 4 / 1048576.0);
            tables.push_back({line + cagra_columns, {}});
            for (uint32_t itopk : sweep)
                add_cagra(*small_page_graph, itopk, (int)defaults.entry_probes, o.random, w);
        }
        /* --storage float16: the vectors as a float16 index stores them */
        const cagra::VectorFormat half_format{cagra::ElementType::Float16, dim, cagra::Metric::L2};
        cagra::HugePageVector<uint16_t> half_vectors;
        std::unique_ptr<cagra::InMemoryGraph> half_graph;
        if (o.float16) {
            t0 = Clock::now();
            half_vectors.resize(n * dim);
            for (uint64_t i = 0; i < n; i++) {
                if (half_format.first_unstorable(&base[i * dim]) != dim)
                    throw std::runtime_error("vector " + std::to_string(i) + " does not fit float16");
                half_format.store(&base[i * dim], &half_vectors[i * dim]);
            }
            const double convert_ms = seconds_since(t0) * 1e3;
            half_graph = std::make_unique<cagra::InMemoryGraph>(built.graph, half_vectors.data(), half_format);
            std::snprintf(line, sizeof line,
                          "float16 storage: the vectors converted in %.0f ms, %.0f of %.0f MiB on huge pages\n",
                          convert_ms, huge_page_mib(half_vectors.data(), half_vectors.size() * 2),
                          half_vectors.size() * 2 / 1048576.0);
            tables.push_back({line + cagra_columns, {}});
            for (uint32_t itopk : sweep)
                add_cagra(*half_graph, itopk, (int)defaults.entry_probes, o.random, w);
        }

#ifdef CAGRA_BENCH_HNSWLIB
        hnswlib::L2Space space(dim);
        std::unique_ptr<hnswlib::HierarchicalNSW<float>> hnsw;
        if (o.hnswlib && !o.quick) {
            hnsw = std::make_unique<hnswlib::HierarchicalNSW<float>>(&space, n, o.hnsw_m, o.hnsw_efc, 100);
            if (o.hnsw_huge_pages) {
                /* malloc'ed, not touched yet: advise its 2 MiB-aligned part */
                const uintptr_t page = 2u << 20, at = (uintptr_t)hnsw->data_level0_memory_;
                const uintptr_t begin = (at + page - 1) & ~(page - 1);
                const uintptr_t end = (at + n * hnsw->size_data_per_element_) & ~(page - 1);
                if (end > begin)
                    madvise((void *)begin, end - begin, MADV_HUGEPAGE);
            }
            t0 = Clock::now();
            c0 = cpu_seconds();
            std::vector<std::thread> pool;
            std::atomic<uint64_t> next{0};
            hnsw->addPoint(base.data(), 0);
            for (uint32_t t = 0; t < o.threads; t++)
                pool.emplace_back([&] {
                    for (uint64_t i; (i = next.fetch_add(1) + 1) < n;)
                        hnsw->addPoint(&base[i * dim], i);
                });
            for (auto &th : pool)
                th.join();
            double hbuild = seconds_since(t0), hcpu = cpu_seconds() - c0;
            std::printf("\nhnswlib: build %.2f s wall, %.2f s CPU (%u threads, M=%u, ef_construction=%u), "
                        "peak RSS %.0f MiB; level-0 array %.0f of %.0f MiB on huge pages\n",
                        hbuild, hcpu, o.threads, o.hnsw_m, o.hnsw_efc, peak_rss_mib(),
                        huge_page_mib(hnsw->data_level0_memory_, n * hnsw->size_data_per_element_),
                        n * hnsw->size_data_per_element_ / 1048576.0);
            /* hnswlib counts every listed neighbour, visited or not: an
             * upper bound of its distances. */
            std::snprintf(line, sizeof line, "\nhnswlib\n%-8s %-10s %-12s %-12s %-14s\n", "ef", "recall@10",
                          "QPS(wall)", "QPS(CPU)", "nbrs/query");
            tables.push_back({line, {}});
            for (uint32_t ef : sweep) {
                Point p;
                hnswlib::HierarchicalNSW<float> &index = *hnsw;
                p.search_all = [&index, &queries, ef, nq, dim](std::vector<uint32_t> &found) {
                    index.setEf(ef);
                    index.metric_distance_computations = 0;
                    for (uint64_t q = 0; q < nq; q++) {
                        auto res = index.searchKnnCloserFirst(&queries[q * dim], 10);
                        for (uint32_t i = 0; i < 10; i++)
                            found[q * 10 + i] = i < res.size() ? (uint32_t)res[i].second : cagra::kInvalidNode;
                    }
                    return (uint64_t)index.metric_distance_computations.load();
                };
                p.print = [ef](double recall, const Qps &qps, double listed) {
                    std::printf("%-8u %-10.4f %-12.0f %-12.0f %-14.0f\n", ef, recall, qps.wall, qps.cpu, listed);
                };
                tables.back().points.push_back(std::move(p));
            }
        }
#else
        if (!o.quick)
            std::printf("\nhnswlib: not compared (headers not found at build time)\n");
#endif

        std::vector<uint32_t> found(nq * 10);
        for (uint32_t r = 0; r < o.repeat; r++)
            for (Table &t : tables)
                for (Point &p : t.points) {
                    auto start = Clock::now();
                    double cpu_start = cpu_seconds();
                    uint64_t work = p.search_all(found);
                    p.best.wall = std::max(p.best.wall, nq / seconds_since(start));
                    p.best.cpu = std::max(p.best.cpu, nq / (cpu_seconds() - cpu_start));
                    if (r == 0) {
                        p.recall = recall_at_10(found, gt, gdim, nq);
                        p.work = (double)work / nq;
                    }
                }
        for (const Table &t : tables) {
            std::printf("%s", t.heading.c_str());
            for (const Point &p : t.points)
                p.print(p.recall, p.best, p.work);
        }
        if (o.quick)
            return 0;

        /* --- exact search on a subset of the queries --- */
        uint64_t exact_nq = std::min<uint64_t>(nq, 100);
        std::vector<std::pair<float, uint32_t>> all(n);
        Qps eqps = best_qps(exact_nq, 1, [&](uint64_t q) {
            for (uint64_t i = 0; i < n; i++)
                all[i] = {cagra::l2_squared(&queries[q * dim], &base[i * dim], dim), (uint32_t)i};
            std::partial_sort(all.begin(), all.begin() + 10, all.end());
            for (uint32_t i = 0; i < 10; i++)
                found[q * 10 + i] = all[i].second;
        });
        std::printf("\nexact (brute force, 1 thread, %lu queries): recall@10 %.4f, QPS %.1f wall, %.1f CPU\n",
                    (unsigned long)exact_nq, recall_at_10(found, gt, gdim, exact_nq), eqps.wall, eqps.cpu);
        return 0;
    } catch (const std::exception &e) {
        std::fprintf(stderr, "core_bench: %s\n", e.what());
        return 1;
    }
}
