/*
 * types.h — the vocabulary shared by every part of cagra: metrics, build and
 * search parameters, the graph format, and the error type.
 *
 * This header is the contract between src/core (CPU), gpu/ (CUDA) and the
 * PostgreSQL extension.  It includes only the C++ standard library.
 */
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace cagra {

/* Largest vector dimension the index accepts (pgvector's HNSW stops at 2,000). */
constexpr uint32_t kMaxDim = 16000;
/* Largest dimension a graph is built over: an inner-product graph's vectors
 * have one coordinate more (inner_product_graph.h). */
constexpr uint32_t kMaxGraphDim = kMaxDim + 1;

/* Limits of the parameters (validated in params.cpp; the SQL reloptions and
 * settings take their ranges from here). */
constexpr uint32_t kMinDegree = 2;
constexpr uint32_t kMaxDegree = 1024;
constexpr uint32_t kMaxItopk = 1024;
constexpr uint32_t kMaxSearchWidth = 64;
constexpr uint32_t kMaxRandomEntries = 1024;

/* Most fixed entry nodes an index keeps with its graph. */
constexpr uint32_t kMaxStoredEntries = 1024;

/* Fixed entry nodes of a build of n rows, on the CPU and the GPU alike:
 * about 2 sqrt(n), a multiple of 8, at most kMaxStoredEntries, so that each
 * cluster of a set of well-separated clusters owns one (its kNN rows have no
 * edge out of it, so a search reaches it only from an entry inside).  The
 * GPU scores a batch's entries on tensor cores; the CPU measures a few
 * groups of them through the entry index. */
constexpr uint32_t fixed_entry_count(uint64_t n)
{
    uint64_t e = 8;
    while (e * e < 4 * n && e < kMaxStoredEntries)
        e += 8;
    return (uint32_t)(e < n ? e : n);
}

/* Padding id in a graph row.  Appears only while the graph has no more than
 * graph_degree nodes (a row cannot then be filled without a duplicate or a
 * self edge); inserts replace padding before they replace real edges. */
constexpr uint32_t kInvalidNode = 0xFFFFFFFFu;

/*
 * Distance functions, all "smaller is closer":
 *   L2            squared Euclidean distance
 *   InnerProduct  negative inner product (pgvector's <#>)
 *   Cosine        1 - cos(a, b); vectors are normalised once by
 *                 prepare_vector() and then compared as 1 - dot(a, b).
 *                 A zero vector stays zero (distance 1 to everything).
 *   L1            taxicab distance, sum |a - b| (pgvector's <+>)
 */
enum class Metric : uint32_t { L2 = 0, InnerProduct = 1, Cosine = 2, L1 = 3 };
constexpr uint32_t kMetricCount = 4;

const char *metric_name(Metric m);

/* Whether a stored or transmitted metric code names a metric. */
constexpr bool metric_is_valid(uint32_t code)
{
    return code < kMetricCount;
}

struct BuildParams {
    uint32_t graph_degree = 32;        /* out-degree of the final graph */
    uint32_t intermediate_degree = 64; /* out-degree of the kNN graph */
    uint32_t nn_descent_max_iterations = 20;
    float nn_descent_termination = 0.15f; /* stop when an iteration changed < this * n * k entries */
    uint32_t threads = 1;
    uint64_t seed = 0x5eedcafe;
};

/* search_width 0 is automatic: the search picks the width for where it
 * runs (cpu_search_params, gpu_search_params below).  An explicit width is
 * used as given. */
constexpr uint32_t kAutoSearchWidth = 0;

/* What automatic means (docs/tuning.md; docs/benchmarks.md, "Constants"): 2 parents an iteration for a CPU search from an
 * entry index (higher recall than width 1 for about as many distances); 1 on
 * the GPU, and on the CPU from a plain entry list (inserts, repairs, the
 * build's connection step). */
constexpr uint32_t kCpuAutoSearchWidth = 2;
constexpr uint32_t kNarrowAutoSearchWidth = 1;

struct SearchParams {
    uint32_t itopk_size = 64;                 /* candidates kept, >= k */
    uint32_t search_width = kAutoSearchWidth; /* parents expanded per iteration; 0: automatic */
    uint32_t max_iterations = 0;              /* 0: chosen from itopk_size and search_width */
    uint32_t random_entries = 32;             /* random entry nodes besides the fixed ones */
    uint64_t seed = 0x5eedcafe;
    /* With an EntryIndex (entry_index.h): groups of fixed entries measured
     * besides the pivots; 0 or more than there are: all entries.  12: c100k's
     * recall at every itopk, which 8 lost (docs/core.md). */
    uint32_t entry_probes = 12;
};

inline bool operator==(const SearchParams &a, const SearchParams &b)
{
    return a.itopk_size == b.itopk_size && a.search_width == b.search_width && a.max_iterations == b.max_iterations &&
           a.random_entries == b.random_entries && a.seed == b.seed && a.entry_probes == b.entry_probes;
}
inline bool operator!=(const SearchParams &a, const SearchParams &b)
{
    return !(a == b);
}

namespace detail {
inline SearchParams resolve_width(SearchParams p, uint32_t width)
{
    if (p.search_width == kAutoSearchWidth)
        p.search_width = width < p.itopk_size ? width : (p.itopk_size ? p.itopk_size : 1);
    return p;
}
} // namespace detail

/* `p` with an automatic search_width resolved for a CPU search (the core
 * Searcher): 2 when it starts from an entry index, 1 from a plain entry
 * list; never above itopk_size.  An explicit width stays. */
inline SearchParams cpu_search_params(const SearchParams &p, bool from_entry_index)
{
    return detail::resolve_width(p, from_entry_index ? kCpuAutoSearchWidth : kNarrowAutoSearchWidth);
}

/* The same for the GPU library's search: 1 (the worker widens small
 * batches whose width is automatic, src/worker/engine.cpp). */
inline SearchParams gpu_search_params(const SearchParams &p)
{
    return detail::resolve_width(p, kNarrowAutoSearchWidth);
}

/* Row-major n x dim float32 vectors, already prepared for the metric. */
struct DatasetView {
    const float *data = nullptr;
    uint64_t n = 0;
    uint32_t dim = 0;
    const float *row(uint64_t i) const { return data + i * dim; }
};

/*
 * The CAGRA graph: node ids are dense 0..n-1, each row holds exactly
 * `degree` out-edges (uint32), row-major n x degree, no self edge, no
 * duplicate.  A CPU-built and a GPU-built graph have this same format.
 */
struct Graph {
    uint32_t degree = 0;
    std::vector<uint32_t> edges;

    uint64_t size() const { return degree ? edges.size() / degree : 0; }
    const uint32_t *row(uint64_t i) const { return edges.data() + i * degree; }
    uint32_t *row(uint64_t i) { return edges.data() + i * degree; }
};

struct Neighbor {
    uint32_t id;
    float distance;
};

/* What every failure of the core reports; the PostgreSQL side maps the code
 * to an SQLSTATE and the hint to errhint(). */
enum class ErrorCode {
    InvalidParameter, /* a parameter out of range */
    InvalidData,      /* NaN, infinity, wrong dimension, no rows */
    OutOfMemory,
    Cancelled, /* the caller asked the build to stop */
    Corrupt,   /* serialised data that does not parse */
};

class Error : public std::runtime_error {
public:
    Error(ErrorCode code, const std::string &message, std::string hint = {})
        : std::runtime_error(message), code_(code), hint_(std::move(hint))
    {}
    ErrorCode code() const { return code_; }
    const std::string &hint() const { return hint_; }

private:
    ErrorCode code_;
    std::string hint_;
};

} // namespace cagra
