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
#include "types.h"

namespace cagra {

/* The element type of stored vectors (float32 only so far). */
enum class ElementType : uint32_t { Float32 = 0 };

constexpr uint32_t element_bytes(ElementType type)
{
    return type == ElementType::Float32 ? 4 : 0;
}

/* An IEEE 754 half-precision value (pgvector's halfvec elements) as a float. */
inline float half_to_float(uint16_t h)
{
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exponent = (h >> 10) & 0x1Fu;
    uint32_t mantissa = h & 0x3FFu;
    uint32_t bits;
    if (exponent == 0x1F) {
        bits = sign | 0x7F800000u | (mantissa << 13); /* infinity, NaN */
    } else if (exponent != 0) {
        bits = sign | ((exponent + 112) << 23) | (mantissa << 13);
    } else if (mantissa == 0) {
        bits = sign; /* zero */
    } else {
        /* subnormal: shift the mantissa up until it is normal */
        exponent = 113;
        while (!(mantissa & 0x400u)) {
            mantissa <<= 1;
            exponent--;
        }
        bits = sign | (exponent << 23) | ((mantissa & 0x3FFu) << 13);
    }
    float f;
    std::memcpy(&f, &bits, sizeof f);
    return f;
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

    /* A prepared float32 vector written as the index stores it. */
    void store(const float *prepared, void *out) const { std::memcpy(out, prepared, vector_bytes()); }

    /* A stored vector read back as float32. */
    void load(const void *stored, float *out) const { std::memcpy(out, stored, vector_bytes()); }

    /* Distance from a prepared query to a stored vector. */
    float distance(const float *query, const void *stored) const
    {
        return cagra::distance(metric, query, static_cast<const float *>(stored), dim);
    }
};

inline bool operator==(const VectorFormat &a, const VectorFormat &b)
{
    return a.element == b.element && a.dim == b.dim && a.metric == b.metric;
}
inline bool operator!=(const VectorFormat &a, const VectorFormat &b)
{
    return !(a == b);
}

} // namespace cagra
