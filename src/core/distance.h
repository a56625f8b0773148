/*
 * distance.h — distance kernels on float32 vectors of any dimension, and
 * from float32 queries to float16 stored vectors.
 *
 * The fast kernels are chosen once at run time (AVX-512, AVX2 or portable
 * code); the scalar reference versions are what the tests compare against.
 */
#pragma once

#include "types.h"

namespace cagra {

float l2_squared(const float *a, const float *b, uint32_t dim);
float inner_product(const float *a, const float *b, uint32_t dim);

/* Distance of the metric between two vectors prepared by prepare_vector(). */
float distance(Metric metric, const float *a, const float *b, uint32_t dim);

/* distance() of each of na rows a with each of nb rows b (row-major, dim
 * wide, prepared) into out (na x nb, row-major), for all-pairs work such as
 * exact kNN lists: L2, inner product and cosine by a blocked matrix product
 * of dot products (L2 as |a|^2 + |b|^2 - 2 a.b, so within float rounding of
 * distance(), not equal to it bit for bit); L1 pair by pair. */
void distance_block(Metric metric, const float *a, uint32_t na, const float *b, uint32_t nb, uint32_t dim,
                    float *out);
/* The positions j < len, in order, where d[j] is not above its bound
 * (bounds[j] when per_column, else bounds[0] for every j; NaN is never
 * above), into out, which must have room for len + 16; returns how many.
 * The filter of distance_block's rows against kNN lists' bounds. */
uint32_t positions_not_above(const float *d, uint32_t len, const float *bounds, bool per_column, uint32_t *out);
/* The same from a float32 vector to one stored in float16 (half.h). */
float distance_half(Metric metric, const float *a, const uint16_t *b, uint32_t dim);

/* n floats to float16 (rounded as float_to_half does) and back, with F16C
 * where the CPU has it. */
void floats_to_halves(const float *in, uint16_t *out, uint32_t n);
void halves_to_floats(const uint16_t *in, float *out, uint32_t n);

/* The dispatched kernel behind a metric, for hot loops that want no switch
 * per call: distance = offset + sign * fn(a, b, dim)
 * (L2: l2_squared, 1, 0; inner product: dot, -1, 0; cosine: dot, -1, 1;
 * L1: sum of absolute differences, 1, 0), for stored rows of float32
 * (Row = float) or float16 (Row = uint16_t: distance_half without its
 * switch). */
template <class Row> using RowKernel = float (*)(const float *, const Row *, uint32_t);
using PairKernel = RowKernel<float>;
using HalfPairKernel = RowKernel<uint16_t>;

template <class Row> struct MetricKernelFor {
    RowKernel<Row> fn;
    float sign;
    float offset;
    float operator()(const float *a, const Row *b, uint32_t dim) const { return offset + sign * fn(a, b, dim); }
};
using MetricKernel = MetricKernelFor<float>;
using HalfMetricKernel = MetricKernelFor<uint16_t>;
MetricKernel metric_kernel(Metric metric);
HalfMetricKernel half_metric_kernel(Metric metric);

/* Copy `in` to `out` in the form the index stores: unchanged for L2 and
 * inner product, normalised to unit length for cosine (zero stays zero).
 * `in` and `out` may be the same array. */
void prepare_vector(Metric metric, const float *in, float *out, uint32_t dim);

/* Name of the kernel set chosen on this CPU: "avx512", "avx2" or "portable". */
const char *distance_kernel_name();

namespace reference {
float l2_squared(const float *a, const float *b, uint32_t dim);
float inner_product(const float *a, const float *b, uint32_t dim);
float l1_distance(const float *a, const float *b, uint32_t dim);
float cosine_distance(const float *a, const float *b, uint32_t dim); /* unprepared inputs */
} // namespace reference

} // namespace cagra
