/*
 * nn_descent.h — the kNN graph of a build (nn_descent.cpp): NN-descent, or brute
 * force for small sets.  A step of build_graph (build.h), public for tests
 * and benchmarks.
 */
#pragma once

#include <vector>

#include "progress.h"
#include "types.h"

namespace cagra {

/* The kNN graph: n rows of k (id, distance), each row sorted by distance. */
struct KnnGraph {
    uint32_t k = 0;
    std::vector<uint32_t> ids;
    std::vector<float> distances;
    uint64_t size() const { return k ? ids.size() / k : 0; }
};

KnnGraph nn_descent(const DatasetView &data, Metric metric, const BuildParams &params,
                    BuildProgress *progress = nullptr);

/* Exact kNN by brute force (small builds, the long edges' smaller levels,
 * tests); stops between blocks of rows when `progress` asks to cancel. */
KnnGraph brute_force_knn(const DatasetView &data, Metric metric, uint32_t k, uint32_t threads,
                         const BuildProgress *progress = nullptr);

} // namespace cagra
