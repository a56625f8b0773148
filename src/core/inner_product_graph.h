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

/* x (dim floats) then its extra coordinate, sqrt(max_norm^2 - |x|^2), into
 * out (dim + 1 floats); 0 for a vector at least max_norm long (one inserted
 * after the build that is longer than every vector before it). */
inline void augment_vector(const float *x, uint32_t dim, double max_norm, float *out)
{
    const double extra = max_norm * max_norm - squared_norm(x, dim);
    if (out != x)
        std::copy(x, x + dim, out);
    out[dim] = extra > 0 ? (float)std::min(std::sqrt(extra), (double)std::numeric_limits<float>::max()) : 0.0f;
}

/* data's rows augmented (n x (dim + 1)) with max_norm = largest_norm(data):
 * what a build that cannot take the extra coordinate apart (the GPU
 * library's) is handed, with Metric::L2. */
std::vector<float> augmented_copy(const DatasetView &data, uint32_t threads);

/*
 * An accessor (search.h) that shows Base's graph in the augmented space,
 * for plan_insert and plan_repair on an inner-product graph: dim() + 1
 * floats a vector, L2 distances, queries augmented by the caller
 * (augment_vector with the same max_norm).  Base's vectors are read one at
 * a time through Base::vector(), in any storage format.
 */
template <class Base>
class AugmentedAccessor {
public:
    AugmentedAccessor(const Base &base, double max_norm) : base_(base), max_norm_(max_norm), scratch_(base.dim() + 1) {}
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
    void distances(const float *query, const uint32_t *ids, uint32_t count, float *out) const
    {
        for (uint32_t i = 0; i < count; i++)
            out[i] = l2_squared(query, vector(ids[i], scratch_.data()), dim());
    }

private:
    const Base &base_;
    double max_norm_;
    mutable std::vector<float> scratch_; /* distances' vector; an accessor serves one thread */
};

} // namespace cagra
