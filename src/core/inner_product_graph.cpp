/*
 * inner_product_graph.cpp — the largest norm and the augmented copy of a
 * build's vectors (inner_product_graph.h).
 */
#include "inner_product_graph.h"

#include <algorithm>

#include "parallel.h"

namespace cagra {

double largest_norm(const DatasetView &data, uint32_t threads)
{
    threads = std::max(threads, 1u);
    std::vector<double> per_thread(threads, 0.0);
    detail::parallel_for(data.n, 4096, threads, nullptr, [&](uint64_t begin, uint64_t end, uint32_t t) {
        double largest = per_thread[t];
        for (uint64_t i = begin; i < end; i++)
            largest = std::max(largest, squared_norm(data.row(i), data.dim));
        per_thread[t] = largest;
    });
    return std::sqrt(*std::max_element(per_thread.begin(), per_thread.end()));
}

std::vector<float> augmented_copy(const DatasetView &data, uint32_t threads)
{
    const double max_norm = largest_norm(data, threads);
    const uint32_t width = data.dim + 1;
    std::vector<float> out(data.n * width);
    detail::parallel_for(data.n, 4096, std::max(threads, 1u), nullptr, [&](uint64_t begin, uint64_t end, uint32_t) {
        for (uint64_t i = begin; i < end; i++)
            augment_vector(data.row(i), data.dim, max_norm, &out[i * width]);
    });
    return out;
}

} // namespace cagra
