/*
 * inner_product_graph.h — the graph of an inner-product index is an L2
 * graph over augmented vectors (docs/core.md).
 *
 * Inner product is no metric: with -x.y as the distance, every vector's
 * nearest neighbours are the longest vectors in its direction, so a kNN
 * graph's edges all lead to them (in one or two dimensions, to the few
 * largest values) and a search cannot walk back to the rest.  Each vector x
 * gains one coordinate, sqrt(M^2 - |x|^2) with M the largest norm, so that
 * every augmented vector has norm M; the query [q, 0] is then at squared
 * distance M^2 + |q|^2 - 2 q.x from the augmented x, which ranks nodes
 * exactly as -q.x does.  Builds (CPU and GPU), their pruning and connection,
 * and inserts choose edges by L2 in that space; searches stay inner-product
 * searches of the stored vectors.
 */
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <unordered_map>
#include <vector>

#include "distance.h"
#include "format.h"
#include "search.h"
#include "types.h"

namespace cagra {

/* Whether a graph of `metric` is built and updated over augmented vectors. */
constexpr bool graph_is_augmented(Metric metric)
{
    return metric == Metric::InnerProduct;
}

/* The largest norm of data's rows. */
double largest_norm(const DatasetView &data, uint32_t threads);

/* The extra coordinate of a vector of squared norm `xx`: sqrt(max_norm^2 -
 * xx), 0 for a vector at least max_norm long (one inserted after the build
 * that is longer than every vector before it). */
inline double extra_coordinate(double xx, double max_norm)
{
    const double room = max_norm * max_norm - xx;
    return room > 0 ? std::sqrt(room) : 0.0;
}

/* x (dim floats) then its extra coordinate into out (dim + 1 floats). */
inline void augment_vector(const float *x, uint32_t dim, double max_norm, float *out)
{
    const double extra = extra_coordinate(squared_norm(x, dim), max_norm);
    if (out != x)
        std::copy(x, x + dim, out);
    out[dim] = (float)std::min(extra, (double)std::numeric_limits<float>::max());
}

/* data's rows augmented (n x (dim + 1)) with max_norm = largest_norm(data):
 * what a build that cannot take the extra coordinate apart (the GPU
 * library's) is handed, with Metric::L2. */
std::vector<float> augmented_copy(const DatasetView &data, uint32_t threads);

/*
 * An accessor (search.h) that shows an inner-product accessor's graph in the
 * augmented space, for plan_insert and plan_repair: dim() + 1 floats a
 * vector, L2 distances, queries augmented by the caller (augment_vector with
 * the same max_norm).  Distances go through Base::distances (-q.x, with
 * whatever Base records or caches on the way: the extension's accessor
 * notes each node's flags for the insert's filter) and add the nodes'
 * squared norms, read once a node through Base::vector().
 */
template <class Base>
class AugmentedAccessor {
public:
    AugmentedAccessor(const Base &base, double max_norm) : base_(base), max_norm_(max_norm), scratch_(base.dim())
    {
        squared_norms_.reserve(4096);
    }
    uint32_t size() const { return base_.size(); }
    uint32_t degree() const { return base_.degree(); }
    uint32_t dim() const { return base_.dim() + 1; }
    Metric metric() const { return Metric::L2; }
    const uint32_t *neighbors(uint32_t id, uint32_t *scratch) const { return base_.neighbors(id, scratch); }
    void prefetch_neighbors(uint32_t id) const
    {
        if constexpr (detail::has_prefetch_neighbors<Base>::value)
            base_.prefetch_neighbors(id);
    }
    const float *vector(uint32_t id, float *scratch) const
    {
        augment_vector(base_.vector(id, scratch), base_.dim(), max_norm_, scratch);
        return scratch;
    }
    /* |q - x|^2 + (q_extra - x_extra)^2 = |q|^2 + |x|^2 - 2 q.x + (q_extra - x_extra)^2 */
    void distances(const float *query, const uint32_t *ids, uint32_t count, float *out) const
    {
        const uint32_t d = base_.dim();
        base_.distances(query, ids, count, out);
        const double qq = squared_norm(query, d);
        for (uint32_t i = 0; i < count; i++) {
            const double xx = node_squared_norm(ids[i]);
            const double extra_gap = query[d] - extra_coordinate(xx, max_norm_);
            out[i] = (float)std::max(qq + xx + 2.0 * out[i] + extra_gap * extra_gap, 0.0);
        }
    }

private:
    double node_squared_norm(uint32_t id) const
    {
        auto it = squared_norms_.find(id);
        if (it != squared_norms_.end())
            return it->second;
        const double xx = squared_norm(base_.vector(id, scratch_.data()), base_.dim());
        squared_norms_.emplace(id, xx);
        return xx;
    }

    const Base &base_;
    double max_norm_;
    /* an accessor serves one thread */
    mutable std::vector<float> scratch_;
    mutable std::unordered_map<uint32_t, double> squared_norms_;
};

} // namespace cagra
