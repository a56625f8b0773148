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
     * is a well-spread subset. */
    std::vector<uint32_t> entry_nodes;
};

/* Throws Error(InvalidParameter / InvalidData) with a message a user can act on. */
void validate_build_params(const BuildParams &params);
void validate_dataset(const DatasetView &data);

/* The whole build (docs/core.md): data prepared for the metric; uses
 * params.threads threads; deterministic for a fixed seed with one thread.
 * Rows hold kInvalidNode padding only when n <= graph_degree. */
BuiltGraph build_graph(const DatasetView &data, Metric metric, const BuildParams &params,
                       BuildProgress *progress = nullptr);

/* Steps of build_graph, public for tests and for the GPU library. */
KnnGraph nn_descent(const DatasetView &data, Metric metric, const BuildParams &params,
                    BuildProgress *progress = nullptr);
Graph optimize_graph(const KnnGraph &knn, uint32_t graph_degree, uint32_t threads,
                     BuildProgress *progress = nullptr);

/* Make every node reachable from entry_nodes[0] (a kNN-based graph of
 * well-separated clusters falls apart into components): for each node not
 * reached, search the reached part for its nearest node and turn one of
 * that node's last edges into a link to it.  Returns the links added. */
uint64_t connect_graph(Graph &graph, const DatasetView &data, Metric metric, const std::vector<uint32_t> &entry_nodes,
                       BuildProgress *progress = nullptr);

/* Exact kNN by brute force (tests and ground truth). */
KnnGraph brute_force_knn(const DatasetView &data, Metric metric, uint32_t k, uint32_t threads);

} // namespace cagra
