/*
 * metric.cuh — what each metric computes on the device, the one place the
 * library's kernels ask.  A distance is a sum over the features of one term
 * per feature (a squared difference, an absolute difference or a product),
 * turned into the metric's value: L2 and L1 are the sum, inner product its
 * negation, cosine 1 minus it (unit vectors).  The build's local join takes
 * dots from a Gram matrix instead, from which L2 (with the squared norms),
 * inner product and cosine follow; L1 does not (a Gram matrix holds no
 * absolute differences).
 */
#pragma once

#include "cagra_gpu.h"

namespace cagra_gpu {

enum class MetricSum { SquaredDifferences, AbsoluteDifferences, Products };

__host__ __device__ inline MetricSum metric_sum(cagra_gpu_metric metric)
{
    switch (metric) {
    case CAGRA_GPU_L2:
        return MetricSum::SquaredDifferences;
    case CAGRA_GPU_L1:
        return MetricSum::AbsoluteDifferences;
    default:
        return MetricSum::Products;
    }
}

/* Whether the metric's distance follows from the dot and the squared
 * norms (distance_from_dot): every metric but L1. */
__host__ __device__ inline bool metric_has_dot_form(cagra_gpu_metric metric)
{
    return metric_sum(metric) != MetricSum::AbsoluteDifferences;
}

/* acc plus one feature's term. */
template <MetricSum S>
__device__ inline float add_term(float x, float y, float acc)
{
    if constexpr (S == MetricSum::SquaredDifferences) {
        const float d = x - y;
        return fmaf(d, d, acc);
    } else if constexpr (S == MetricSum::AbsoluteDifferences) {
        return acc + fabsf(x - y);
    } else {
        return fmaf(x, y, acc);
    }
}

/* acc plus the terms of N features, in order: one switch for all N. */
template <int N>
__device__ inline float add_terms(MetricSum sum, const float (&x)[N], const float (&y)[N], float acc)
{
    switch (sum) {
    case MetricSum::SquaredDifferences:
#pragma unroll
        for (int i = 0; i < N; i++)
            acc = add_term<MetricSum::SquaredDifferences>(x[i], y[i], acc);
        return acc;
    case MetricSum::AbsoluteDifferences:
#pragma unroll
        for (int i = 0; i < N; i++)
            acc = add_term<MetricSum::AbsoluteDifferences>(x[i], y[i], acc);
        return acc;
    default:
#pragma unroll
        for (int i = 0; i < N; i++)
            acc = add_term<MetricSum::Products>(x[i], y[i], acc);
        return acc;
    }
}

/* The metric's distance from the sum of its terms over two vectors. */
__device__ inline float distance_from_sum(cagra_gpu_metric metric, float sum)
{
    switch (metric) {
    case CAGRA_GPU_INNER_PRODUCT:
        return -sum;
    case CAGRA_GPU_COSINE:
        return 1.0f - sum;
    default:
        return sum;
    }
}

/* The distance of two vectors scaled by s from their dot and squared norms,
 * inv_scale2 = 1 / s^2 (a metric with that form). */
__device__ inline float distance_from_dot(cagra_gpu_metric metric, float norm_a, float norm_b, float dot,
                                          float inv_scale2)
{
    if (metric == CAGRA_GPU_L2)
        return fmaxf(norm_a + norm_b - 2.0f * dot, 0.0f) * inv_scale2;
    return distance_from_sum(metric, dot * inv_scale2);
}

} // namespace cagra_gpu
