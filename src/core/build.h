/*
 * build.h — building a CAGRA graph on the CPU: a kNN graph by NN-descent,
 * then rank-based pruning, reverse edges and the merge to graph_degree.
 */
#pragma once

#include <atomic>

#include "types.h"

namespace cagra {

enum class BuildPhase : uint32_t { Validating = 0, KnnGraph = 1, Pruning = 2, Done = 3 };

/* Shared with the thread that started the build: the caller polls the
 * counters for progress reports (done/total restart in each phase) and sets
 * `cancel` to stop the build, which then throws Error(ErrorCode::Cancelled)
 * within about 100 ms, from every phase. */
struct BuildProgress {
    std::atomic<uint32_t> phase{0};
    std::atomic<uint64_t> done{0};
    std::atomic<uint64_t> total{0};
    std::atomic<bool> cancel{false};
};

/* The kNN graph: n rows of k (id, distance), each row sorted by distance. */
struct KnnGraph {
    uint32_t k = 0;
    std::vector<uint32_t> ids;
    std::vector<float> distances;
    uint64_t size() const { return k ? ids.size() / k : 0; }
};

struct BuiltGraph {
    Graph graph;
    /* Fixed entry points for searches: the node nearest the data's mean,
     * then farthest-point picks, about 2 sqrt(n), at most 384; any prefix
     * is a well-spread subset.  With long edges the picks are made among
     * long-edge nodes. */
    std::vector<uint32_t> entry_nodes;
    /* Whether the build added long edges (navigation_miss_rate of the plain
     * graph above kLongEdgeMissRate), and that miss rate. */
    bool long_edges = false;
    double probe_miss_rate = 0;
};

/* Throws Error(InvalidParameter / InvalidData) with a message a user can act on. */
void validate_build_params(const BuildParams &params);
void validate_dataset(const DatasetView &data, uint32_t max_dim = kMaxDim);

/* The whole build (docs/core.md): data prepared for the metric; uses
 * params.threads threads; deterministic for a fixed seed with one thread.
 * Rows hold kInvalidNode padding only when n <= graph_degree. */
BuiltGraph build_graph(const DatasetView &data, Metric metric, const BuildParams &params,
                       BuildProgress *progress = nullptr);

/* Steps of build_graph, public for tests and for the GPU library. */
KnnGraph nn_descent(const DatasetView &data, Metric metric, const BuildParams &params,
                    BuildProgress *progress = nullptr);
Graph optimize_graph(const KnnGraph &knn, uint32_t graph_degree, uint32_t threads, BuildProgress *progress = nullptr);

/* Make every node reachable from entry_nodes[0] (a kNN-based graph of
 * well-separated clusters falls apart into components): for each node not
 * reached, search the reached part for its nearest node and turn one of
 * that node's last edges into a link to it.  Returns the links added. */
uint64_t connect_graph(Graph &graph, const DatasetView &data, Metric metric, const std::vector<uint32_t> &entry_nodes,
                       BuildProgress *progress = nullptr);

/* Navigation probe: the fraction of `probes` seeded nodes that a default
 * GPU search (gpu_search_params(SearchParams{}): width 1, from the entry
 * index of entry_nodes) for the
 * node's own vector does not return first.  Near 0 on data whose entries
 * reach every region; high where the graph's edges are all local and the
 * entries do not cover the clusters (issue 12). */
double navigation_miss_rate(const Graph &graph, const DatasetView &data, Metric metric,
                            const std::vector<uint32_t> &entry_nodes, uint32_t probes, uint64_t seed, uint32_t threads);

/* The navigation probe of a build (CPU and GPU): kNavigationProbes seeded
 * nodes searched for their own vectors with the default search; above
 * kLongEdgeMissRate misses the build adds long edges.  With 1,024 probes the
 * rate's noise (about 0.3% near 1%) decided data near the old threshold of
 * 1% either way (a 60,000-row curve: 0.68% or 1.37% by its entries, 0.92%
 * over 8,192 probes, and no long edges left 1 query in 60 without its
 * answer); over 8,192 probes c100k misses 0.29% and text384 0.17%, which
 * navigate without them. */
constexpr uint32_t kNavigationProbes = 8192;
constexpr double kLongEdgeMissRate = 0.005;

/*
 * Leave-one-out recall: recall@10 of a default GPU search (width 1, as the
 * probe above) at each of `itopk_sizes` for `samples` seeded nodes, each
 * searched for by its own vector in the graph without it (its id read as
 * padding in every row and left out of the entries), against its 10
 * nearest other nodes by brute force, or by a search of kMaxItopk
 * candidates at the CPU's width when rows x dimensions x samples is above
 * brute_force_elements.  A node's vector stands for a query
 * of the data's own distribution that is not a node, as users' queries
 * are; searching for a node that is still there would meet its neighbours
 * one edge away.
 */
/* About 5 CPU-seconds of brute force (a minute at 10,000,000 x 768 x 128). */
constexpr double kBruteForceElements = 3e10;
std::vector<double> leave_one_out_recall(const Graph &graph, const DatasetView &data, Metric metric,
                                         const std::vector<uint32_t> &entry_nodes,
                                         const std::vector<uint32_t> &itopk_sizes, uint32_t samples, uint64_t seed,
                                         uint32_t threads, double brute_force_elements = kBruteForceElements);

/* The search buffer an index needs by default (docs/tuning.md): the smallest
 * of kItopkChoices whose leave_one_out_recall over kItopkSamples nodes
 * reaches kItopkTargetRecall, the last choice when none does; the core's
 * default itopk_size for graphs of at most kItopkMinNodes nodes (exact
 * enough there) without measuring. */
constexpr double kItopkTargetRecall = 0.95;
constexpr uint32_t kItopkSamples = 128;
constexpr uint64_t kItopkMinNodes = 2000;
constexpr uint32_t kItopkChoices[] = {32, 48, 64, 96, 128, 192, 256, 384, 512};
/* With it, the entry probes of CPU searches (docs/tuning.md): the fewest of
 * kProbeChoices whose leave-one-out recall, searching from the entry index
 * at the chosen itopk_size, is within kProbeRecallSlack of the last
 * choice's.  Sample nodes that are entries are left out of that (the entry
 * phase itself would find them). */
constexpr uint32_t kProbeChoices[] = {4, SearchParams{}.entry_probes};
constexpr double kProbeRecallSlack = 0.005;
struct ItopkChoice {
    uint32_t itopk_size = 0;
    double recall = 0;     /* leave-one-out recall@10 at itopk_size; 0 when not measured */
    bool measured = false;
    bool exact_reference = true; /* against brute force; false: against a search of kMaxItopk */
    uint32_t entry_probes = 0;   /* 0 when not measured (the core's default then) */
    double probes_recall = 0, default_probes_recall = 0; /* from the entry index, at entry_probes and at the default */
};
ItopkChoice choose_itopk(const Graph &graph, const DatasetView &data, Metric metric,
                         const std::vector<uint32_t> &entry_nodes, uint64_t seed, uint32_t threads);

/* The long edges' shape, one for the CPU build and the GPU's
 * (gpu/long_edges.cu): each level samples 1/2^kLongEdgeLevelBits of the
 * one below, at most kLongEdgeLevels levels; a sampled row keeps its first
 * long_edge_keep(degree) edges (its closest pruned ones, so a walk that
 * arrives by a long edge can still go on locally); the fixed entries come
 * from the smallest level of at least kLongEdgePoolMin nodes. */
constexpr uint32_t kLongEdgeLevelBits = 3;
constexpr uint32_t kLongEdgeLevels = 4;
constexpr uint64_t kLongEdgePoolMin = 1024;
constexpr uint32_t long_edge_keep(uint32_t degree)
{
    return degree / 8 > 1 ? degree / 8 : 1;
}

/* Long edges (docs/core.md): nested random samples of the nodes (1/8, 1/64,
 * ... of them, up to 4 levels), the CAGRA graph of each sample built from
 * 3 * intermediate_degree candidates, spliced into the last 7/8 of each
 * sampled node's row.  Returns the nodes of the smallest level that has at
 * least 1,024 (or the first level): the pool for the fixed entries.  Empty
 * (and the graph untouched) when n is too small for a sample. */
std::vector<uint32_t> add_long_edges(Graph &graph, const DatasetView &data, Metric metric, const BuildParams &params,
                                     BuildProgress *progress = nullptr);

/* Exact kNN by brute force (small builds, the long edges' smaller levels,
 * tests); stops between blocks of rows when `progress` asks to cancel. */
KnnGraph brute_force_knn(const DatasetView &data, Metric metric, uint32_t k, uint32_t threads,
                         const BuildProgress *progress = nullptr);

} // namespace cagra
