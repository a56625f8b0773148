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
