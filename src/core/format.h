/*
 * format.h — how an index holds its vectors: the element type, the number of
 * dimensions and the metric, and what follows from them (bytes per vector,
 * the prepared form, distances to a stored vector, the value of the SQL
 * operator).  Storage, scans, uploads to the worker and the GPU library all
 * describe vectors with one VectorFormat, so a new element type or metric is
 * a change here and in distance.cpp, then one per layer (docs/architecture.md).
 */
#pragma once

#include <cmath>
#include <cstring>

#include "distance.h"
#include "half.h"
#include "types.h"

namespace cagra {

/* The element type of stored vectors: the `storage` reloption. */
enum class ElementType : uint32_t { Float32 = 0, Float16 = 1 };

constexpr uint32_t element_bytes(ElementType type)
{
    return type == ElementType::Float32 ? 4 : type == ElementType::Float16 ? 2 : 0;
}

constexpr bool element_type_is_valid(uint32_t value)
{
    return value <= (uint32_t)ElementType::Float16;
}

constexpr const char *element_type_name(ElementType type)
{
    return type == ElementType::Float16 ? "float16" : "float32";
}

/*
 * The value the SQL operator gives for a distance in the core's form:
 * L2 distances are squared inside the index, the operator (<->) is the
 * Euclidean distance; the other metrics' distances are the operators' values.
 */
inline double operator_value(Metric metric, float distance)
{
    if (metric == Metric::L2)
        return distance > 0 ? std::sqrt((double)distance) : 0.0;
    return (double)distance;
}

struct VectorFormat {
    ElementType element = ElementType::Float32;
    uint32_t dim = 0;
    Metric metric = Metric::L2;

    uint32_t vector_bytes() const { return dim * element_bytes(element); }

    /* `in` (float32, as the SQL type holds it) in the form the index keeps
     * (prepare_vector); queries are prepared the same way. */
    void prepare(const float *in, float *out) const { prepare_vector(metric, in, out, dim); }

    /* Index of the first element of a prepared vector that the element
     * type cannot hold (float16: magnitude 65,520 and beyond, which would
     * round to infinity), or dim when it holds them all. */
    uint32_t first_unstorable(const float *prepared) const
    {
        if (element != ElementType::Float16)
            return dim;
        float largest = 0; /* one branch-free pass; the search only on failure */
        for (uint32_t i = 0; i < dim; i++)
            largest = std::fmax(largest, std::fabs(prepared[i]));
        if (largest < kHalfOverflow)
            return dim;
        for (uint32_t i = 0; i < dim; i++)
            if (!(std::fabs(prepared[i]) < kHalfOverflow))
                return i;
        return dim;
    }

    /* A prepared float32 vector written as the index stores it (float16:
     * rounded to nearest; first_unstorable() says whether it fits). */
    void store(const float *prepared, void *out) const
    {
        if (element == ElementType::Float16)
            floats_to_halves(prepared, static_cast<uint16_t *>(out), dim);
        else
            std::memcpy(out, prepared, vector_bytes());
    }

    /* A stored vector read back as float32. */
    void load(const void *stored, float *out) const
    {
        if (element == ElementType::Float16)
            halves_to_floats(static_cast<const uint16_t *>(stored), out, dim);
        else
            std::memcpy(out, stored, vector_bytes());
    }

    /* Distance from a prepared query to a stored vector. */
    float distance(const float *query, const void *stored) const
    {
        if (element == ElementType::Float16)
            return distance_half(metric, query, static_cast<const uint16_t *>(stored), dim);
        return cagra::distance(metric, query, static_cast<const float *>(stored), dim);
    }

    /*
     * A lower bound of the SQL operator's value on the vector before it was
     * stored, from `distance` (this format's) to its stored copy.  float16
     * rounds each element x_i to h_i with |x_i - h_i| <= u |x_i| + a, where
     * u = 2^-11 is the relative error on the normal range and a = 2^-25 the
     * absolute error of an element stored as a subnormal (or as zero), which
     * does not shrink with the query.  So e = x - h has ||e|| <= u ||x|| +
     * a sqrt(dim) and |e|_1 <= u |x|_1 + a dim, and with ||x|| <= ||q|| +
     * ||q - x|| (the same in L1):
     *   L2 (||q - x||):        ||q - x|| >= (||q - h|| - u ||q|| - a sqrt(dim)) / (1 + u)
     *   inner product (-<q, x>): -<q, x> >= -<q, h> - ||q|| (u max ||x|| + a sqrt(dim))
     *   cosine (unit x and q):   1 - <q, x> >= 1 - <q, h> - (u + a sqrt(dim))
     *   L1 (|q - x|_1):        |q - x|_1 >= (|q - h|_1 - u |q|_1 - a dim) / (1 + u)
     * The bound uses twice each constant, and adds the float rounding of
     * sums over dim terms, so that a value computed another way (pgvector's
     * operators) is not below it either.  Monotone in `distance`.  Float32
     * storage is exact: the operator value itself.
     */
    double operator_lower_bound(float distance, double query_norm, double max_norm) const
    {
        double value = operator_value(metric, distance);
        if (element != ElementType::Float16)
            return value;
        const double c = 2 * kHalfUnitRoundoff + 8 * std::sqrt((double)dim) * std::ldexp(1.0, -24);
        const double subnormal = 2 * kHalfSubnormalRoundoff * std::sqrt((double)dim); /* of ||e|| */
        switch (metric) {
        case Metric::L2:
            value = (value - c * query_norm - subnormal) / (1 + c);
            return value > 0 ? value : 0;
        case Metric::InnerProduct:
            return value - c * query_norm * max_norm - subnormal * query_norm;
        case Metric::Cosine:
            return value - c * query_norm - subnormal * query_norm;
        case Metric::L1:
            value = (value - c * query_norm - 2 * kHalfSubnormalRoundoff * (double)dim) / (1 + c);
            return value > 0 ? value : 0;
        }
        return value;
    }

    /* Whether an index of this format keeps the largest norm of its stored
     * vectors: float16's inner-product bound (operator_lower_bound) and the
     * inner-product graph's extra coordinate (inner_product_graph.h) use it. */
    bool keeps_max_norm() const { return element == ElementType::Float16 || metric == Metric::InnerProduct; }

    /* The norm of a prepared query that operator_lower_bound wants: |q|_1
     * under L1, 1 under cosine (a unit vector), ||q|| otherwise. */
    double bound_norm(const float *query) const
    {
        if (metric == Metric::Cosine)
            return 1.0;
        if (metric == Metric::L1) {
            double s = 0;
            for (uint32_t i = 0; i < dim; i++)
                s += std::fabs((double)query[i]);
            return s;
        }
        return std::sqrt((double)inner_product(query, query, dim));
    }
};

/* |x|^2, finite for every finite float vector: the float kernel, summed
 * again in double where that overflows (components from about 1e19 on). */
inline double squared_norm(const float *x, uint32_t dim)
{
    const float fast = inner_product(x, x, dim);
    if (std::isfinite(fast))
        return fast;
    double s = 0;
    for (uint32_t j = 0; j < dim; j++)
        s += (double)x[j] * x[j];
    return s;
}

/* Euclidean norm (query norms and the largest stored norm, which the meta
 * page keeps as a float: finite below components of about 1e36). */
inline double vector_norm(const float *x, uint32_t dim)
{
    return std::sqrt(squared_norm(x, dim));
}

inline bool operator==(const VectorFormat &a, const VectorFormat &b)
{
    return a.element == b.element && a.dim == b.dim && a.metric == b.metric;
}
inline bool operator!=(const VectorFormat &a, const VectorFormat &b)
{
    return !(a == b);
}

} // namespace cagra
