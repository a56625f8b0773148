/*
 * test_util.h — shared helpers of the core tests: a clustered data set like
 * shared/bench/gen.py (clusters in a low-dimensional subspace plus noise),
 * exact neighbours by brute force, recall, and a built 20,000 x 64 index.
 */
#pragma once

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "build.h"
#include "distance.h"
#include "search.h"
#include "types.h"

namespace cagra_test {

/* n vectors of dim: `clusters` Gaussian clusters (centres N(0, 4^2) per
 * axis) in a random `intrinsic`-dim subspace, spread 0.5..2, plus isotropic
 * noise 0.05 -- bench/gen.py's distribution (gen.py --intrinsic --clusters),
 * not its numbers.  An intrinsic dimension of 64 or more with clusters
 * smaller than the kNN lists makes the hard sets of issue 12. */
inline std::vector<float> clustered(uint64_t n, uint32_t dim, uint64_t seed, uint32_t intrinsic, uint32_t clusters)
{
    std::mt19937_64 rng(seed);
    std::normal_distribution<double> normal(0.0, 1.0);
    std::uniform_real_distribution<double> spread(0.5, 2.0);
    const uint32_t k = std::min<uint32_t>(dim, intrinsic);
    std::vector<double> centers((size_t)clusters * k);
    for (auto &c : centers)
        c = normal(rng) * 4.0;
    /* Orthonormal basis (k x dim) by Gram-Schmidt. */
    std::vector<double> basis(k * dim);
    for (uint32_t i = 0; i < k; i++) {
        double *b = &basis[i * dim];
        for (uint32_t j = 0; j < dim; j++)
            b[j] = normal(rng);
        for (uint32_t p = 0; p < i; p++) {
            const double *q = &basis[p * dim];
            double dot = 0;
            for (uint32_t j = 0; j < dim; j++)
                dot += b[j] * q[j];
            for (uint32_t j = 0; j < dim; j++)
                b[j] -= dot * q[j];
        }
        double norm = 0;
        for (uint32_t j = 0; j < dim; j++)
            norm += b[j] * b[j];
        norm = std::sqrt(norm);
        for (uint32_t j = 0; j < dim; j++)
            b[j] /= norm;
    }
    std::vector<float> out(n * dim);
    std::vector<double> z(k);
    std::vector<double> v(dim);
    for (uint64_t r = 0; r < n; r++) {
        const double *c = &centers[(rng() % clusters) * k];
        double s = spread(rng);
        for (uint32_t i = 0; i < k; i++)
            z[i] = c[i] + normal(rng) * s;
        /* Noise first, in the same order as before the parameters existed
         * (the default sets are unchanged), then the subspace part. */
        for (uint32_t j = 0; j < dim; j++)
            v[j] = normal(rng) * 0.05;
        for (uint32_t i = 0; i < k; i++) {
            const double *b = &basis[i * dim];
            for (uint32_t j = 0; j < dim; j++)
                v[j] += z[i] * b[j];
        }
        for (uint32_t j = 0; j < dim; j++)
            out[r * dim + j] = (float)v[j];
    }
    return out;
}

/* The default sets of the tests: 256 clusters in min(dim, 24) dimensions. */
inline std::vector<float> clustered(uint64_t n, uint32_t dim, uint64_t seed)
{
    return clustered(n, dim, seed, 24, 256);
}

/* Cut the last `rows` rows off `all` and return them (queries drawn from
 * the same clusters as the base). */
inline std::vector<float> take_tail(std::vector<float> &all, uint64_t rows, uint32_t dim)
{
    std::vector<float> tail(all.end() - rows * dim, all.end());
    all.resize(all.size() - rows * dim);
    return tail;
}

/* Exact k nearest ids of each query among the base rows accepted by `keep`. */
template <class Keep>
std::vector<std::vector<uint32_t>> exact_knn(const std::vector<float> &base, const std::vector<float> &queries,
                                             uint32_t dim, uint32_t k, cagra::Metric metric, Keep &&keep)
{
    const uint64_t n = base.size() / dim, nq = queries.size() / dim;
    std::vector<std::vector<uint32_t>> out(nq);
    std::vector<std::pair<float, uint32_t>> all;
    for (uint64_t q = 0; q < nq; q++) {
        all.clear();
        for (uint64_t i = 0; i < n; i++)
            if (keep((uint32_t)i))
                all.push_back({cagra::distance(metric, &queries[q * dim], &base[i * dim], dim), (uint32_t)i});
        std::partial_sort(all.begin(), all.begin() + std::min<size_t>(k, all.size()), all.end());
        for (uint32_t j = 0; j < k && j < all.size(); j++)
            out[q].push_back(all[j].second);
    }
    return out;
}

inline std::vector<std::vector<uint32_t>> exact_knn(const std::vector<float> &base, const std::vector<float> &queries,
                                                    uint32_t dim, uint32_t k, cagra::Metric metric = cagra::Metric::L2)
{
    return exact_knn(base, queries, dim, k, metric, [](uint32_t) { return true; });
}

/* Fraction of the true k nearest found among the results. */
inline double recall(const std::vector<cagra::Neighbor> &got, const std::vector<uint32_t> &truth)
{
    size_t hit = 0;
    for (uint32_t t : truth)
        for (const auto &g : got)
            if (g.id == t) {
                hit++;
                break;
            }
    return truth.empty() ? 1.0 : (double)hit / truth.size();
}

/* A 20,000 x 64 clustered set with 200 held-out queries and its graph
 * (default build, 2 threads): build one per test file, once. */
struct ClusteredIndex {
    static constexpr uint32_t dim = 64;
    static constexpr uint64_t n = 20000;
    std::vector<float> base;
    std::vector<float> queries;
    cagra::BuiltGraph built;
    explicit ClusteredIndex(uint64_t seed) : base(clustered(n + 200, dim, seed))
    {
        queries = take_tail(base, 200, dim);
        cagra::BuildParams p;
        p.threads = 2;
        built = cagra::build_graph(cagra::DatasetView{base.data(), n, dim}, cagra::Metric::L2, p);
    }
    cagra::InMemoryGraph graph() const
    {
        return cagra::InMemoryGraph(built.graph, cagra::DatasetView{base.data(), n, dim}, cagra::Metric::L2);
    }
    const float *query(size_t q) const { return &queries[q * dim]; }
};

} // namespace cagra_test
