/*
 * optimize.h — the kNN graph pruned by rank, with reverse edges, merged to the
 * graph's degree (optimize.cpp).  A step of build_graph (build.h).
 */
#pragma once

#include "nn_descent.h"
#include "progress.h"
#include "types.h"

namespace cagra {

Graph optimize_graph(const KnnGraph &knn, uint32_t graph_degree, uint32_t threads, BuildProgress *progress = nullptr);

} // namespace cagra
