/*
 * search.cpp — the non-template parts of search: the in-memory accessor,
 * the visited set's sizing, and the per-thread pool of search buffers.
 */
#include <algorithm>
#include <memory>

#include "search.h"

namespace cagra {

/* Float32 rows: the format of the metric over data.dim floats. */
InMemoryGraph::InMemoryGraph(const Graph &graph, const DatasetView &data, Metric metric)
    : InMemoryGraph(graph, data.data, VectorFormat{ElementType::Float32, data.dim, metric})
{
    if (graph.size() != data.n)
        throw Error(ErrorCode::InvalidData, "graph of " + std::to_string(graph.size()) + " rows does not match " +
                                                std::to_string(data.n) + " vectors");
}

InMemoryGraph::InMemoryGraph(const Graph &graph, const void *rows, const VectorFormat &format)
    : graph_(&graph), rows_(static_cast<const char *>(rows)), format_(format), row_bytes_(format.vector_bytes()),
      kernel_(metric_kernel(format.metric)), half_kernel_(half_metric_kernel(format.metric)),
      size_((uint32_t)graph.size()),
      /* the lines a row spans (one more when it does not start a line), at most 17 */
      lines_((uint32_t)std::min<uint64_t>((row_bytes_ + 63) / 64 + 1, 17))
{
    if (graph.degree == 0)
        throw Error(ErrorCode::InvalidData, "graph without edges");
    if (!element_type_is_valid((uint32_t)format.element))
        throw Error(ErrorCode::InvalidData, "unknown element type " + std::to_string((uint32_t)format.element));
}

namespace detail {

void VisitedSet::clear_dense()
{
    for (uint32_t i = 0; i < count_; i++)
        bits_[set_[i] >> 6] = 0;
    if (universe_ < (uint64_t)bits_.size() * 64)
        bits_[universe_ >> 6] = 0; /* the sentinel's word */
}

void VisitedSet::reset(uint32_t expected, uint32_t universe)
{
    if (dense_)
        clear_dense();
    dense_ = universe <= kDenseVisitedLimit;
    if (dense_) {
        /* one bit per node and the sentinel bit at `universe` */
        const size_t words = universe / 64 + 1;
        if (bits_.size() < words)
            bits_.resize(words, 0);
        universe_ = universe;
        bits_[universe >> 6] |= 1ull << (universe & 63);
        count_ = 0;
        return;
    }
    uint32_t cap = 1024;
    while (cap < 2 * expected && cap < (1u << 30))
        cap <<= 1;
    /* Keep a table that grew for earlier searches of this thread, within
     * reason: regrowing every query would cost more than a larger clear. */
    if (slots_.size() >= cap && slots_.size() <= 8 * (size_t)cap)
        cap = (uint32_t)slots_.size();
    if (slots_.size() == cap)
        std::fill(slots_.begin(), slots_.end(), 0);
    else
        slots_.assign(cap, 0);
    mask_ = cap - 1;
    shift_ = 32 - __builtin_ctz(cap);
    count_ = 0;
}

void VisitedSet::grow()
{
    std::vector<uint32_t> old;
    old.swap(slots_);
    uint32_t cap = (uint32_t)old.size() * 2;
    slots_.assign(cap, 0);
    mask_ = cap - 1;
    shift_ = 32 - __builtin_ctz(cap);
    for (uint32_t key : old) {
        if (key == 0)
            continue;
        uint32_t h = hash(key);
        while (slots_[h] != 0)
            h = (h + 1) & mask_;
        slots_[h] = key;
    }
}

namespace {
/* Free scratch objects of this thread.  Searchers may nest (several open
 * scans in one backend), so this is a pool, not a single object. */
thread_local std::vector<std::unique_ptr<SearchScratch>> scratch_pool;
} // namespace

SearchScratch *acquire_scratch()
{
    if (scratch_pool.empty())
        return new SearchScratch();
    SearchScratch *s = scratch_pool.back().release();
    scratch_pool.pop_back();
    return s;
}

void release_scratch(SearchScratch *s)
{
    if (!s)
        return;
    try {
        if (scratch_pool.size() < 8) {
            scratch_pool.emplace_back(s);
            return;
        }
    } catch (...) {
    }
    delete s;
}

} // namespace detail
} // namespace cagra
