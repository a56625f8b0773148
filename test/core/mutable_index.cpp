/*
 * mutable_index.cpp — MutableIndex: build, insert, tombstone, repair and
 * search of an index held in memory.
 */
#include "mutable_index.h"

#include <cmath>

namespace cagra {

MutableIndex::MutableIndex(const float *raw, uint64_t n, uint32_t dim, Metric metric, const BuildParams &params,
                           BuildProgress *progress)
    : dim_(dim), metric_(metric)
{
    DatasetView view{raw, n, dim};
    validate_dataset(view);
    vectors_.resize(n * dim);
    for (uint64_t i = 0; i < n; i++)
        prepare_vector(metric, raw + i * dim, &vectors_[i * dim], dim);
    BuiltGraph built = build_graph(DatasetView{vectors_.data(), n, dim}, metric, params, progress);
    graph_ = std::move(built.graph);
    entries_ = std::move(built.entry_nodes);
    removed_.assign(n, 0);
}

InMemoryGraph MutableIndex::accessor() const
{
    return InMemoryGraph(graph_, DatasetView{vectors_.data(), graph_.size(), dim_}, metric_);
}

uint32_t MutableIndex::insert(const float *raw, const SearchParams &params)
{
    for (uint32_t j = 0; j < dim_; j++)
        if (!std::isfinite(raw[j]))
            throw Error(ErrorCode::InvalidData, "vector holds NaN or infinity at position " + std::to_string(j),
                        "Vectors with NaN or infinite components cannot be indexed.");
    std::vector<float> vec(dim_);
    prepare_vector(metric_, raw, vec.data(), dim_);
    const uint32_t id = size();
    InsertPlan plan = plan_insert(accessor(), vec.data(), id, params, entries_);
    vectors_.insert(vectors_.end(), vec.begin(), vec.end());
    removed_.push_back(0);
    apply_insert(graph_, plan);
    return id;
}

void MutableIndex::remove(uint32_t id)
{
    if (id >= size())
        throw Error(ErrorCode::InvalidParameter, "node " + std::to_string(id) + " does not exist");
    if (!removed_[id]) {
        removed_[id] = 1;
        removed_count_++;
    }
}

size_t MutableIndex::repair(const SearchParams &params)
{
    auto is_removed = [this](uint32_t id) { return removed_[id] != 0; };
    auto rewrites = plan_repair(accessor(), is_removed, params, entries_);
    apply_repair(graph_, rewrites);
    /* as vacuum does: the links that the rewrites made necessary */
    auto near = plan_near_ways_in(accessor(), is_removed);
    apply_repair(graph_, near);
    auto links = plan_reconnect(accessor(), is_removed, params, entries_);
    apply_repair(graph_, links);
    return rewrites.size() + near.size() + links.size();
}

std::vector<Neighbor> MutableIndex::search(const float *raw_query, uint32_t k, const SearchParams &params) const
{
    validate_search_params(params, k);
    std::vector<float> q(dim_);
    prepare_vector(metric_, raw_query, q.data(), dim_);
    InMemoryGraph g = accessor();
    Searcher<InMemoryGraph> s(g, q.data(), params, entries_);
    std::vector<Neighbor> out(k);
    out.resize(s.next(
        k, [this](uint32_t id) { return removed_[id] == 0; }, out.data()));
    return out;
}

} // namespace cagra
