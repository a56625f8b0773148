/*
 * serialize.h — a flat, versioned byte image of a whole index: parameters,
 * graph, entry nodes, vectors and caller ids.  Used to move a built index
 * between processes (the GPU worker and a backend) and to files for tests.
 *
 * Layout (little-endian), version 1:
 *   SerializedHeader (72 bytes, no padding), then
 *   graph    n * degree uint32
 *   entries  entry_count uint32
 *   vectors  n * dim float32 (prepared)
 *   ids      n uint64 when has_ids, else nothing (caller's ids, e.g. packed heap TIDs)
 * `checksum` is a 64-bit hash of everything after the header.
 */
#pragma once

#include "build.h"
#include "types.h"

namespace cagra {

constexpr uint32_t kSerializedMagic = 0x43414752; /* "CAGR" */
constexpr uint32_t kSerializedVersion = 1;

struct SerializedHeader {
    uint32_t magic;
    uint32_t version;
    uint32_t metric;
    uint32_t dim;
    uint64_t n;
    uint32_t degree;
    uint32_t entry_count;
    /* BuildParams as built, field by field so the layout is fixed */
    uint32_t graph_degree;
    uint32_t intermediate_degree;
    uint32_t nn_descent_max_iterations;
    float nn_descent_termination;
    uint32_t threads;
    uint32_t has_ids; /* 1: the ids section is present */
    uint64_t seed;
    uint64_t checksum;
};
static_assert(sizeof(SerializedHeader) == 72, "SerializedHeader must have no padding");

struct IndexImage {
    Metric metric = Metric::L2;
    uint32_t dim = 0;
    BuildParams params;
    BuiltGraph built;
    std::vector<float> vectors;
    std::vector<uint64_t> ids; /* empty, or one per node */
};

std::vector<uint8_t> serialize(const IndexImage &index);   /* throws Error(InvalidParameter) if inconsistent */
IndexImage deserialize(const uint8_t *bytes, size_t size); /* throws Error(Corrupt) */

/* The checksum used in the header (exposed for tests and other writers). */
uint64_t image_checksum(const uint8_t *bytes, size_t size);

} // namespace cagra
