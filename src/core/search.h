/*
 * search.h — CAGRA search over any graph storage.
 *
 * An Accessor gives the searcher the graph and the vectors.  It must provide:
 *
 *   uint32_t size() const;     nodes 0..size()-1
 *   uint32_t degree() const;
 *   uint32_t dim() const;
 *   Metric metric() const;
 *   // the row of `id`: degree() ids, kInvalidNode for padding; may copy it
 *   // into `scratch` (degree() entries) and return scratch
 *   const uint32_t *neighbors(uint32_t id, uint32_t *scratch) const;
 *   // the prepared vector of `id`: dim() floats; may copy it into `scratch`
 *   // (dim() entries) and return scratch.  Used by update.h, not by search.
 *   const float *vector(uint32_t id, float *scratch) const;
 *   // distances from a prepared query to `count` nodes
 *   void distances(const float *query, const uint32_t *ids, uint32_t count, float *out) const;
 *
 * Optional: `void prefetch_neighbors(uint32_t id) const`, a hint that the row
 * of `id` will be read soon (the searcher calls it for candidates that enter
 * its buffer, so the row is in cache when the node is expanded).
 *
 * InMemoryGraph is the accessor for a graph and vectors held in memory
 * (float32, or float16 as VectorFormat stores them); the PostgreSQL
 * extension has one that reads index pages through shared buffers.
 *
 * Searcher keeps its state between calls of next(), so a search can be
 * continued for more results after the first k (SQL index scans need it).
 * Results come in non-decreasing distance over all calls, never twice: a node
 * found by a later call that is closer than one already returned is dropped.
 * A node the filter rejects is traversed but not returned.  See docs/core.md.
 */
#pragma once

#include <cstring>
#include <limits>
#include <type_traits>
#include <utility>
#include <vector>

#include "distance.h"
#include "entry_index.h"
#include "format.h"
#include "params.h"
#include "types.h"

namespace cagra {

class InMemoryGraph {
public:
    /* Keeps references: graph and data must outlive the accessor. */
    InMemoryGraph(const Graph &graph, const DatasetView &data, Metric metric);
    /* Vectors as `format` stores them (float32 or float16 rows of
     * format.vector_bytes(), VectorFormat::store), n = graph.size() of them:
     * float16 halves the bytes a distance loads.  Queries stay float32. */
    InMemoryGraph(const Graph &graph, const void *rows, const VectorFormat &format);
    uint32_t size() const { return size_; }
    uint32_t degree() const { return graph_->degree; }
    uint32_t dim() const { return format_.dim; }
    Metric metric() const { return format_.metric; }
    const VectorFormat &format() const { return format_; }
    const uint32_t *neighbors(uint32_t id, uint32_t *) const { return graph_->row(id); }
    void prefetch_neighbors(uint32_t id) const
    {
        prefetch_lines(graph_->row(id), graph_->degree * sizeof(uint32_t), 64);
    }
    const float *vector(uint32_t id, float *scratch) const
    {
        if (format_.element == ElementType::Float32)
            return reinterpret_cast<const float *>(row(id));
        format_.load(row(id), scratch);
        return scratch;
    }
    void distances(const float *query, const uint32_t *ids, uint32_t count, float *out) const
    {
        if (format_.element == ElementType::Float16)
            distances_with(half_kernel_, reinterpret_cast<const uint16_t *>(rows_), query, ids, count, out);
        else
            distances_with(kernel_, reinterpret_cast<const float *>(rows_), query, ids, count, out);
    }

private:
    const char *row(uint32_t id) const { return rows_ + (size_t)id * row_bytes_; }
    template <class Kernel, class Element>
    void distances_with(const Kernel &kernel, const Element *rows, const float *query, const uint32_t *ids,
                        uint32_t count, float *out) const
    {
        /* Vectors of a batch are scattered in memory: keep a few rows in
         * flight ahead of the one being computed. */
        constexpr uint32_t ahead = 4;
        const uint32_t dim = format_.dim;
        for (uint32_t i = 0; i < count && i < ahead; i++)
            prefetch_row(ids[i]);
        for (uint32_t i = 0; i < count; i++) {
            if (i + ahead < count)
                prefetch_row(ids[i + ahead]);
            out[i] = kernel(query, rows + (size_t)ids[i] * dim, dim);
        }
    }
    void prefetch_row(uint32_t id) const { prefetch_lines(row(id), row_bytes_, lines_); }
    /* The cache lines [p, p + bytes) touches, at most max_lines of them.
     * Counted from the line p is in: a std::vector's data sits 16 bytes
     * past a page start, so a 1 KiB row spans 17 lines and a 128-byte
     * graph row 3, and counting from p would leave the last one to a
     * demand miss. */
    static void prefetch_lines(const void *p, size_t bytes, uint32_t max_lines)
    {
        const uintptr_t end = (uintptr_t)p + bytes;
        uintptr_t line = (uintptr_t)p & ~(uintptr_t)63;
        for (uint32_t l = 0; line < end && l < max_lines; line += 64, l++)
            __builtin_prefetch((const void *)line);
    }

    const Graph *graph_;
    const char *rows_;
    VectorFormat format_;
    size_t row_bytes_;
    MetricKernel kernel_;
    HalfMetricKernel half_kernel_;
    uint32_t size_;
    uint32_t lines_; /* at most this many cache lines prefetched per vector */
};

namespace detail {

/* Whether an accessor offers the optional prefetch_neighbors(id). */
template <class A, class = void>
struct has_prefetch_neighbors : std::false_type {};
template <class A>
struct has_prefetch_neighbors<A, std::void_t<decltype(std::declval<const A &>().prefetch_neighbors(0u))>>
    : std::true_type {};

/* A buffer or overflow entry. */
struct Candidate {
    float dist;
    uint32_t id;
    uint32_t expanded;
};

/* Exact visited set.  For graphs of up to kDenseVisitedLimit nodes, a
 * bitmap over the node ids (n / 8 bytes, kept per thread) with the list of
 * the ids set, so clearing it costs the visited count, not the graph size:
 * a test is one load and no hashing or probing, and neighbour lists can be
 * filtered without a branch per neighbour.  Larger graphs: open addressing
 * over id + 1 (0 marks a free slot), sized from what a search of these
 * parameters visits and grown at half load. */
class VisitedSet {
public:
    static constexpr uint32_t kDenseVisitedLimit = 1u << 24;

    /* `expected`: about how many ids a search inserts; `universe`: ids are
     * below it (the graph size). */
    void reset(uint32_t expected, uint32_t universe);
    bool dense() const { return dense_; }
    /* True when id was not in the set (and is now).  Dense: an id at or
     * above the universe (kInvalidNode padding) counts as already there. */
    bool insert(uint32_t id)
    {
        if (dense_) {
            uint32_t pos = id < universe_ ? id : universe_; /* the sentinel bit is always set */
            uint64_t &word = bits_[pos >> 6];
            const uint64_t bit = 1ull << (pos & 63);
            const bool fresh = !(word & bit);
            word |= bit;
            if (count_ == set_.size())
                set_.resize(set_.size() * 2 + 64);
            set_[count_] = id; /* kept only when fresh */
            count_ += fresh;
            return fresh;
        }
        uint32_t key = id + 1;
        for (uint32_t h = hash(key);; h = (h + 1) & mask_) {
            uint32_t s = slots_[h];
            if (s == key)
                return false;
            if (s == 0) {
                slots_[h] = key;
                if (++count_ * 2 > mask_)
                    grow();
                return true;
            }
        }
    }
    uint32_t count() const { return count_; }

private:
    uint32_t hash(uint32_t key) const { return (key * 0x9E3779B1u) >> shift_; }
    void grow();
    void clear_dense();
    bool dense_ = false;
    /* dense form */
    std::vector<uint64_t> bits_;
    std::vector<uint32_t> set_; /* the ids whose bits are set, count_ of them */
    uint32_t universe_ = 0;
    /* hashed form */
    std::vector<uint32_t> slots_;
    uint32_t mask_ = 0;
    uint32_t shift_ = 32;
    uint32_t count_ = 0;
};

/* Buffers of one search; recycled per thread so a query allocates nothing
 * once the thread has run one of the same size. */
struct SearchScratch {
    VisitedSet visited;
    std::vector<Candidate> buffer;
    std::vector<Candidate> overflow;
    std::vector<Candidate> fresh; /* a batch being offered to the buffer */
    std::vector<uint32_t> ids;
    std::vector<float> dists;
    std::vector<uint32_t> row;
};
SearchScratch *acquire_scratch();
void release_scratch(SearchScratch *s);

} // namespace detail

template <class Accessor>
class Searcher {
public:
    /* `query` is prepared (prepare_vector); it and the accessor must outlive
     * the searcher (entry_nodes need not).  The entry distances are computed
     * here.  Throws Error(InvalidParameter) for bad parameters.  An
     * automatic search_width resolves as cpu_search_params (types.h) says:
     * 1 from an entry list, 2 from an entry index. */
    Searcher(const Accessor &graph, const float *query, const SearchParams &params,
             const std::vector<uint32_t> &entry_nodes);
    /* The same, starting from an entry index (derive_entry_index of the
     * entry list, cached by the caller): measures its pivots, then the
     * members of the params.entry_probes groups with the closest pivots;
     * the random entries once the walk has converged (in next()).
     * The index must outlive the constructor call only.  (A template only
     * so that a braced list, e.g. {}, still picks the entry-list form.) */
    template <class Index, class = std::enable_if_t<std::is_same<Index, EntryIndex>::value>>
    Searcher(const Accessor &graph, const float *query, const SearchParams &params, const Index &entries);
    ~Searcher();
    Searcher(const Searcher &) = delete;
    Searcher &operator=(const Searcher &) = delete;

    /* Up to `k` further results into `out`; returns how many (fewer than k
     * only when the reachable graph is exhausted).  accept(id) == false:
     * traversed, never returned. */
    template <class Filter>
    uint32_t next(uint32_t k, Filter &&accept, Neighbor *out);

    /* Measure and offer `count` more start nodes, before the first next():
     * nodes no edge may lead to yet (inserted, not linked). */
    void add_entries(const uint32_t *ids, uint32_t count);

    uint32_t next(uint32_t k, Neighbor *out)
    {
        return next(
            k, [](uint32_t) { return true; }, out);
    }

    uint64_t distance_count() const { return distance_count_; } /* distances computed so far */
    uint64_t iteration_count() const { return iterations_; }    /* expansions rounds so far */
    const SearchParams &params() const { return params_; }      /* as resolved and used */

private:
    void prepare();
    void start(const std::vector<uint32_t> &entries);
    void start(const EntryIndex &entries);
    uint32_t add_random_entries(uint32_t count);
    void measure(uint32_t count);
    bool iterate(uint32_t width);
    void expand(const uint32_t *parents, uint32_t count);
    void offer(const uint32_t *ids, const float *dists, uint32_t count);
    void push_overflow(const detail::Candidate &c);
    bool refill();

    const Accessor &g_;
    const float *query_;
    SearchParams params_;
    detail::SearchScratch *s_;
    uint32_t size_ = 0; /* entries in s_->buffer */
    uint32_t scan_ = 0; /* every buffer entry before this one is expanded */
    bool overflow_heap_ = false;
    bool random_pending_ = false; /* from an entry index: random entries not measured yet */
    float overflow_min_ = std::numeric_limits<float>::infinity();
    float last_ = -std::numeric_limits<float>::infinity();
    uint64_t distance_count_ = 0;
    uint64_t iterations_ = 0;
};

/* One-shot convenience: the k best, sorted. */
template <class Accessor>
std::vector<Neighbor> search(const Accessor &graph, const float *query, uint32_t k, const SearchParams &params,
                             const std::vector<uint32_t> &entry_nodes);
template <class Accessor, class Index, class = std::enable_if_t<std::is_same<Index, EntryIndex>::value>>
std::vector<Neighbor> search(const Accessor &graph, const float *query, uint32_t k, const SearchParams &params,
                             const Index &entries);

} // namespace cagra

#include "search_impl.h"
