/*
 * connect.h — every node of a graph made reachable from its first entry node
 * (connect.cpp).  A step of build_graph (build.h).
 */
#pragma once

#include <vector>

#include "progress.h"
#include "types.h"

namespace cagra {

/* Make every node reachable from entry_nodes[0] (a kNN-based graph of
 * well-separated clusters falls apart into components): for each node not
 * reached, search the reached part for its nearest node and turn one of
 * that node's last edges into a link to it.  Returns the links added. */
uint64_t connect_graph(Graph &graph, const DatasetView &data, Metric metric, const std::vector<uint32_t> &entry_nodes,
                       BuildProgress *progress = nullptr);

} // namespace cagra
