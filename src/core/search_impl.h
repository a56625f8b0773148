/*
 * search_impl.h — the template code of Searcher (included by search.h).
 *
 * State: a sorted buffer of at most itopk_size candidates, each marked when
 * expanded; an overflow of the candidates that did not fit (an unsorted
 * array while nothing has been returned, turned into a min-heap when a
 * continued search needs it); the exact visited set.
 */
#pragma once

#include <algorithm>

#include "parallel.h"

namespace cagra {

template <class Accessor>
Searcher<Accessor>::Searcher(const Accessor &graph, const float *query, const SearchParams &params,
                             const std::vector<uint32_t> &entry_nodes)
    : g_(graph), query_(query), params_(cpu_search_params(params, false)), s_(nullptr)
{
    validate_search_params(params, 0);
    if (params_.max_iterations == 0)
        params_.max_iterations = auto_max_iterations(params_);
    s_ = detail::acquire_scratch();
    try {
        start(entry_nodes);
    } catch (...) {
        detail::release_scratch(s_); /* the destructor will not run */
        throw;
    }
}

template <class Accessor>
template <class Index, class>
Searcher<Accessor>::Searcher(const Accessor &graph, const float *query, const SearchParams &params,
                             const Index &entries)
    : g_(graph), query_(query), params_(cpu_search_params(params, true)), s_(nullptr)
{
    validate_search_params(params, 0);
    if (params_.max_iterations == 0)
        params_.max_iterations = auto_max_iterations(params_);
    s_ = detail::acquire_scratch();
    try {
        start(entries);
    } catch (...) {
        detail::release_scratch(s_);
        throw;
    }
}

template <class Accessor>
Searcher<Accessor>::~Searcher()
{
    detail::release_scratch(s_);
}

/* Size the buffers for a start of at most `entries` fixed entries. */
template <class Accessor>
void Searcher<Accessor>::prepare()
{
    const uint32_t degree = g_.degree();
    s_->buffer.resize(params_.itopk_size);
    s_->overflow.clear();
    s_->row.resize(degree);
    s_->visited.reset(params_.itopk_size * degree / 2, g_.size());
}

/* Append up to random_entries random unvisited nodes to s_->ids after the
 * first `count`; returns the new count. */
template <class Accessor>
uint32_t Searcher<Accessor>::add_random_entries(uint32_t count)
{
    const uint32_t n = g_.size();
    detail::Rng rng(params_.seed);
    uint32_t want = std::min(params_.random_entries, n);
    const uint32_t goal = count + want;
    for (uint32_t tries = 0; tries < 2 * want + 8 && count < goal; tries++) {
        uint32_t id = (uint32_t)rng.below(n);
        if (s_->visited.insert(id))
            s_->ids[count++] = id;
    }
    return count;
}

/* Distances to the first `count` ids of s_->ids, offered to the buffer. */
template <class Accessor>
void Searcher<Accessor>::measure(uint32_t count)
{
    g_.distances(query_, s_->ids.data(), count, s_->dists.data());
    distance_count_ += count;
    offer(s_->ids.data(), s_->dists.data(), count);
}

/* Seed the buffer with the entry nodes (done in the constructor, so the
 * entry list need not outlive the searcher). */
template <class Accessor>
void Searcher<Accessor>::start(const std::vector<uint32_t> &entries)
{
    const uint32_t n = g_.size();
    prepare();
    s_->ids.resize(
        (size_t)std::max(params_.search_width * g_.degree(), params_.random_entries + (uint32_t)entries.size()));
    s_->dists.resize(s_->ids.size());
    if (n == 0)
        return;
    uint32_t count = 0;
    for (uint32_t e : entries)
        if (e < n && s_->visited.insert(e))
            s_->ids[count++] = e;
    measure(add_random_entries(count));
}

template <class Accessor>
void Searcher<Accessor>::add_entries(const uint32_t *ids, uint32_t count)
{
    const uint32_t n = g_.size();
    if (s_->ids.size() < count) {
        s_->ids.resize(count);
        s_->dists.resize(count);
    }
    uint32_t fresh = 0;
    for (uint32_t i = 0; i < count; i++)
        if (ids[i] < n && s_->visited.insert(ids[i]))
            s_->ids[fresh++] = ids[i];
    measure(fresh);
}

/* Seed from an entry index: the pivots first, then the members of the
 * groups whose pivots came closest; the random entries come later. */
template <class Accessor>
void Searcher<Accessor>::start(const EntryIndex &entries)
{
    const uint32_t n = g_.size();
    prepare();
    const uint32_t pivots = (uint32_t)entries.pivots.size();
    s_->ids.resize((size_t)std::max(params_.search_width * g_.degree(),
                                    params_.random_entries + pivots + (uint32_t)entries.members.size()));
    s_->dists.resize(s_->ids.size());
    if (n == 0)
        return;
    uint32_t count = 0;
    for (uint32_t e : entries.pivots)
        if (e < n && s_->visited.insert(e))
            s_->ids[count++] = e;
    const uint32_t measured_pivots = count;
    /* The random entries wait until the walk has converged (next()): at the
     * start they are typical points, often closer than the entries the
     * index picked but leading nowhere, and they took the buffer's first
     * expansions (docs/benchmarks.md, "Constants"). */
    random_pending_ = params_.random_entries > 0;
    g_.distances(query_, s_->ids.data(), count, s_->dists.data());
    distance_count_ += count;

    /* The group members go after the pivots and random entries, and the
     * whole start is offered to the buffer in one batch. */
    const uint32_t first = count;
    uint32_t more = count;
    auto take = [&](uint32_t t) {
        for (uint32_t j = entries.group_begin[t]; j < entries.group_begin[t + 1]; j++) {
            uint32_t e = entries.members[j];
            if (e < n && s_->visited.insert(e))
                s_->ids[more++] = e;
        }
    };
    /* The closest pivots pick the groups.  A derived index holds no pivot
     * that the loop above skips; if one does, distances cannot be matched
     * to groups, so take them all. */
    uint32_t probes = params_.entry_probes;
    if (probes == 0 || probes >= pivots || measured_pivots != pivots) {
        for (uint32_t t = 0; t < pivots; t++)
            take(t);
    } else {
        constexpr uint32_t kMaxProbes = 64;
        uint32_t best[kMaxProbes];
        float best_d[kMaxProbes];
        const uint32_t want = std::min(probes, kMaxProbes);
        uint32_t kept = 0;
        for (uint32_t t = 0; t < pivots; t++) {
            float d = detail::sortable(s_->dists[t]);
            if (kept == want && !(d < best_d[kept - 1]))
                continue;
            uint32_t pos = kept < want ? kept++ : kept - 1;
            while (pos > 0 && best_d[pos - 1] > d) {
                best[pos] = best[pos - 1];
                best_d[pos] = best_d[pos - 1];
                pos--;
            }
            best[pos] = t;
            best_d[pos] = d;
        }
        for (uint32_t i = 0; i < kept; i++)
            take(best[i]);
    }
    g_.distances(query_, s_->ids.data() + first, more - first, s_->dists.data() + first);
    distance_count_ += more - first;
    offer(s_->ids.data(), s_->dists.data(), more);
}

template <class Accessor>
void Searcher<Accessor>::push_overflow(const detail::Candidate &c)
{
    s_->overflow.push_back(c);
    if (overflow_heap_)
        std::push_heap(s_->overflow.begin(), s_->overflow.end(),
                       [](const detail::Candidate &a, const detail::Candidate &b) { return a.dist > b.dist; });
    overflow_min_ = std::min(overflow_min_, c.dist);
}

/* Offer `count` measured candidates to the buffer: the buffer keeps the
 * itopk_size best of itself and the batch, the rest goes to the overflow.
 * The same outcome as offering them one at a time (a tie keeps the entry
 * already there first), but a batch is merged in one pass from the back
 * instead of shifting the buffer once per candidate, and most of a batch
 * (worse than the buffer's worst) never touches the buffer. */
template <class Accessor>
void Searcher<Accessor>::offer(const uint32_t *ids, const float *dists, uint32_t count)
{
    const uint32_t cap = params_.itopk_size;
    detail::Candidate *buf = s_->buffer.data();
    std::vector<detail::Candidate> &fresh = s_->fresh;
    fresh.clear();
    const float worst = size_ == cap ? buf[size_ - 1].dist : std::numeric_limits<float>::infinity();
    for (uint32_t i = 0; i < count; i++) {
        float d = detail::sortable(dists[i]);
        if (size_ < cap || d < worst)
            fresh.push_back({d, ids[i], 0});
        else
            push_overflow({d, ids[i], 0});
    }
    if (fresh.empty())
        return;
    auto closer = [](const detail::Candidate &a, const detail::Candidate &b) { return a.dist < b.dist; };
    if (fresh.size() > cap) {
        /* A large start: only the best cap can stay. */
        std::nth_element(fresh.begin(), fresh.begin() + cap, fresh.end(), closer);
        for (size_t i = cap; i < fresh.size(); i++)
            push_overflow(fresh[i]);
        fresh.resize(cap);
    }
    std::sort(fresh.begin(), fresh.end(), closer);
    /* Merge from the back into positions total-1 .. 0; what lands at cap or
     * beyond leaves for the overflow. */
    int64_t i = (int64_t)size_ - 1, j = (int64_t)fresh.size() - 1;
    const uint32_t total = size_ + (uint32_t)fresh.size();
    int64_t k = (int64_t)total - 1;
    uint32_t lowest = cap;
    while (j >= 0) {
        detail::Candidate c;
        if (i >= 0 && buf[i].dist > fresh[j].dist)
            c = buf[i--];
        else {
            c = fresh[j--];
            if (k < (int64_t)cap) {
                lowest = (uint32_t)k;
                if constexpr (detail::has_prefetch_neighbors<Accessor>::value)
                    g_.prefetch_neighbors(c.id);
            }
        }
        if (k >= (int64_t)cap)
            push_overflow(c);
        else
            buf[k] = c;
        k--;
    }
    size_ = std::min(total, cap);
    scan_ = std::min(scan_, lowest);
}

/* Gather the unvisited neighbours of `parents`, compute their distances in
 * one batch, and offer them to the buffer. */
template <class Accessor>
void Searcher<Accessor>::expand(const uint32_t *parents, uint32_t count)
{
    const uint32_t degree = g_.degree();
    uint32_t *ids = s_->ids.data();
    uint32_t m = 0;
    detail::VisitedSet &visited = s_->visited;
    for (uint32_t p = 0; p < count; p++) {
        const uint32_t *row = g_.neighbors(parents[p], s_->row.data());
        if (visited.dense()) {
            /* no branch on the outcome: padding is never fresh there */
            for (uint32_t j = 0; j < degree; j++) {
                ids[m] = row[j];
                m += visited.insert(row[j]);
            }
        } else {
            for (uint32_t j = 0; j < degree; j++) {
                uint32_t v = row[j];
                if (v != kInvalidNode && visited.insert(v))
                    ids[m++] = v;
            }
        }
    }
    g_.distances(query_, ids, m, s_->dists.data());
    distance_count_ += m;
    offer(ids, s_->dists.data(), m);
}

/* One iteration: expand the `width` best unexpanded candidates.  False when
 * every candidate in the buffer is already expanded. */
template <class Accessor>
bool Searcher<Accessor>::iterate(uint32_t width)
{
    uint32_t parents[64];
    uint32_t count = 0;
    width = std::min<uint32_t>(width, 64);
    detail::Candidate *buf = s_->buffer.data();
    uint32_t i = scan_;
    for (; i < size_ && count < width; i++)
        if (!buf[i].expanded) {
            buf[i].expanded = 1;
            parents[count++] = buf[i].id;
        }
    scan_ = i; /* everything before i is expanded now */
    if (count == 0)
        return false;
    iterations_++;
    expand(parents, count);
    return true;
}

/* Restore "every overflow entry is at least every buffer entry" after
 * results were taken from the buffer: move the closest overflow entries in
 * while they beat the buffer's worst or the buffer has room. */
template <class Accessor>
bool Searcher<Accessor>::refill()
{
    auto &ov = s_->overflow;
    auto greater = [](const detail::Candidate &a, const detail::Candidate &b) { return a.dist > b.dist; };
    if (!overflow_heap_) {
        std::make_heap(ov.begin(), ov.end(), greater);
        overflow_heap_ = true;
    }
    bool moved = false;
    detail::Candidate *buf = s_->buffer.data();
    while (!ov.empty() && (size_ < params_.itopk_size || ov.front().dist < buf[size_ - 1].dist)) {
        detail::Candidate c = ov.front();
        std::pop_heap(ov.begin(), ov.end(), greater);
        ov.pop_back();
        if (size_ == params_.itopk_size) {
            detail::Candidate worst = buf[--size_];
            ov.push_back(worst);
            std::push_heap(ov.begin(), ov.end(), greater);
        }
        uint32_t pos = size_;
        while (pos > 0 && buf[pos - 1].dist > c.dist) {
            buf[pos] = buf[pos - 1];
            pos--;
        }
        buf[pos] = c;
        size_++;
        scan_ = std::min(scan_, pos);
        moved = true;
    }
    overflow_min_ = ov.empty() ? std::numeric_limits<float>::infinity() : ov.front().dist;
    return moved;
}

template <class Accessor>
template <class Filter>
uint32_t Searcher<Accessor>::next(uint32_t k, Filter &&accept, Neighbor *out)
{
    uint32_t produced = 0;
    uint32_t iterations = 0;
    detail::Candidate *buf = s_->buffer.data();
    while (produced < k) {
        if (iterations < params_.max_iterations && iterate(params_.search_width)) {
            iterations++;
            continue;
        }
        if (random_pending_) {
            /* converged from the entry index: now the random entries, which
             * enter the buffer only where they beat what the walk found */
            random_pending_ = false;
            uint32_t count = add_random_entries(0);
            if (count) {
                measure(count);
                continue;
            }
        }
        /* The head may only be returned when nothing set aside is closer. */
        if (size_ == 0 || buf[0].dist > overflow_min_) {
            if (refill())
                continue;
            if (size_ == 0)
                break;
        }
        if (!buf[0].expanded) {
            /* Past the iteration cap: still expand a node before returning
             * it, so that a continued search goes on from it. */
            buf[0].expanded = 1;
            uint32_t id = buf[0].id;
            expand(&id, 1);
            continue;
        }
        detail::Candidate head = buf[0];
        std::memmove(buf, buf + 1, (size_ - 1) * sizeof(detail::Candidate));
        size_--;
        scan_ = scan_ ? scan_ - 1 : 0;
        if (head.dist >= last_ && accept(head.id)) {
            out[produced++] = {head.id, head.dist};
            last_ = head.dist;
        }
    }
    return produced;
}

template <class Accessor, class Index, class>
std::vector<Neighbor> search(const Accessor &graph, const float *query, uint32_t k, const SearchParams &params,
                             const Index &entries)
{
    validate_search_params(params, k);
    Searcher<Accessor> s(graph, query, params, entries);
    std::vector<Neighbor> out(k);
    out.resize(s.next(k, out.data()));
    return out;
}

template <class Accessor>
std::vector<Neighbor> search(const Accessor &graph, const float *query, uint32_t k, const SearchParams &params,
                             const std::vector<uint32_t> &entry_nodes)
{
    validate_search_params(params, k);
    Searcher<Accessor> s(graph, query, params, entry_nodes);
    std::vector<Neighbor> out(k);
    out.resize(s.next(k, out.data()));
    return out;
}

} // namespace cagra
