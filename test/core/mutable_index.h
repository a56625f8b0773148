/*
 * mutable_index.h — an index held in memory that can take inserts, deletes
 * and repairs: the in-memory counterpart of the PostgreSQL pages, used by
 * the tests and the benchmark.  It plans with update.h and applies the
 * plans to its own graph, as the extension applies them to pages.
 */
#pragma once

#include "build.h"
#include "update.h"

namespace cagra {

class MutableIndex {
public:
    /* Build from raw vectors (prepared here for the metric). */
    MutableIndex(const float *raw, uint64_t n, uint32_t dim, Metric metric, const BuildParams &params,
                 BuildProgress *progress = nullptr);

    uint32_t size() const { return (uint32_t)graph_.size(); }
    uint32_t live_count() const { return size() - removed_count_; }
    uint32_t dim() const { return dim_; }
    Metric metric() const { return metric_; }
    const Graph &graph() const { return graph_; }
    const std::vector<uint32_t> &entry_nodes() const { return entries_; }
    const float *vector(uint32_t id) const { return &vectors_[(uint64_t)id * dim_]; }
    InMemoryGraph accessor() const;

    /* Insert a raw vector; returns its id (== size() before the call). */
    uint32_t insert(const float *raw, const SearchParams &params);
    /* Tombstone: still traversed, never returned. */
    void remove(uint32_t id);
    bool removed(uint32_t id) const { return removed_[id] != 0; }
    /* Rewrite the rows that point at removed nodes; returns how many. */
    size_t repair(const SearchParams &params);

    /* The k best live nodes for a raw query. */
    std::vector<Neighbor> search(const float *raw_query, uint32_t k, const SearchParams &params) const;

private:
    uint32_t dim_;
    Metric metric_;
    Graph graph_;
    std::vector<uint32_t> entries_;
    std::vector<float> vectors_;
    std::vector<uint8_t> removed_;
    uint32_t removed_count_ = 0;
};

} // namespace cagra
