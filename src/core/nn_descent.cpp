/*
 * nn_descent.cpp — the approximate kNN graph (NN-descent, Dong et al. 2011)
 * and the exact one by brute force.
 *
 * Each node keeps a sorted candidate list of k (id, distance, is-new).  An
 * iteration samples up to S new and S old entries per node, adds reverse
 * samples (bounded, chosen by a hash priority so the choice does not depend
 * on thread timing), and joins every new sample with every other new and old
 * sample of the same node: a pair (a, b) updates the lists of a and b.  The
 * vectors of one node's samples are gathered into a contiguous block first,
 * so the join's distance matrix reads them from cache.
 */
#include <algorithm>
#include <cstring>
#include <memory>

#include "build.h"
#include "distance.h"
#include "parallel.h"

namespace cagra {
namespace {

using detail::mix64;

/* Spin lock per node: critical sections are a few dozen instructions. */
struct SpinLock {
    std::atomic<bool> held{false};
    void lock()
    {
        while (held.exchange(true, std::memory_order_acquire))
            while (held.load(std::memory_order_relaxed))
                __builtin_ia32_pause();
    }
    void unlock() { held.store(false, std::memory_order_release); }
};

struct CandidateLists {
    uint32_t k;
    std::vector<uint32_t> ids;
    std::vector<float> dists;
    std::vector<uint8_t> is_new;
    std::unique_ptr<std::atomic<float>[]> worst; /* dists of the last entry, for a lock-free pre-check */
    std::unique_ptr<SpinLock[]> locks;

    CandidateLists(uint64_t n, uint32_t k_)
        : k(k_), ids(n * k_), dists(n * k_), is_new(n * k_, 1), worst(new std::atomic<float>[n]),
          locks(new SpinLock[n])
    {
    }

    /* Insert v into u's list if it is closer than the worst entry and not
     * there yet.  Returns whether the list changed. */
    bool insert(uint32_t u, uint32_t v, float d)
    {
        if (!(d < worst[u].load(std::memory_order_relaxed)))
            return false;
        locks[u].lock();
        uint32_t *row = &ids[(uint64_t)u * k];
        float *rd = &dists[(uint64_t)u * k];
        uint8_t *rn = &is_new[(uint64_t)u * k];
        bool changed = false;
        if (d < rd[k - 1]) {
            bool dup = false;
            for (uint32_t j = 0; j < k; j++)
                dup |= row[j] == v;
            if (!dup) {
                uint32_t j = k - 1;
                for (; j > 0 && rd[j - 1] > d; j--) {
                    row[j] = row[j - 1];
                    rd[j] = rd[j - 1];
                    rn[j] = rn[j - 1];
                }
                row[j] = v;
                rd[j] = d;
                rn[j] = 1;
                worst[u].store(rd[k - 1], std::memory_order_relaxed);
                changed = true;
            }
        }
        locks[u].unlock();
        return changed;
    }
};

/* Bounded sample lists, n rows of `cap` entries plus a count. */
struct SampleLists {
    uint32_t cap;
    std::vector<uint32_t> ids;
    std::vector<uint64_t> prio; /* only used by reverse lists */
    std::vector<uint32_t> count;
    SampleLists(uint64_t n, uint32_t cap_, bool with_prio)
        : cap(cap_), ids(n * cap_), prio(with_prio ? n * cap_ : 0), count(n, 0)
    {
    }
    uint32_t *row(uint64_t u) { return &ids[u * cap]; }
};

/* Keep in v's reverse list the `cap` sources with the smallest priority:
 * the result is the same whatever order the threads arrive in. */
void push_reverse(SampleLists &rev, SpinLock *locks, uint32_t v, uint32_t u, uint64_t prio)
{
    locks[v].lock();
    uint32_t c = rev.count[v];
    uint32_t *ids = rev.row(v);
    uint64_t *pr = &rev.prio[(uint64_t)v * rev.cap];
    if (c < rev.cap) {
        ids[c] = u;
        pr[c] = prio;
        rev.count[v] = c + 1;
    } else {
        uint32_t worst = 0;
        for (uint32_t j = 1; j < c; j++)
            if (pr[j] > pr[worst])
                worst = j;
        if (prio < pr[worst]) {
            ids[worst] = u;
            pr[worst] = prio;
        }
    }
    locks[v].unlock();
}

void random_init(CandidateLists &lists, const DatasetView &data, const MetricKernel &dist, uint64_t seed,
                 uint32_t threads, BuildProgress *progress)
{
    const uint64_t n = data.n;
    const uint32_t k = lists.k;
    detail::parallel_for(n, 512, threads, progress, [&](uint64_t begin, uint64_t end, uint32_t) {
        std::vector<std::pair<float, uint32_t>> row(k);
        for (uint64_t u = begin; u < end; u++) {
            detail::Rng rng(seed ^ mix64(u));
            uint32_t filled = 0;
            while (filled < k) {
                uint32_t v = (uint32_t)rng.below(n);
                if (v == u)
                    continue;
                bool dup = false;
                for (uint32_t j = 0; j < filled; j++)
                    dup |= row[j].second == v;
                if (dup)
                    continue;
                row[filled++] = {dist(data.row(u), data.row(v), data.dim), v};
            }
            std::sort(row.begin(), row.end());
            for (uint32_t j = 0; j < k; j++) {
                lists.ids[u * k + j] = row[j].second;
                lists.dists[u * k + j] = row[j].first;
            }
            lists.worst[u].store(row[k - 1].first, std::memory_order_relaxed);
        }
    });
}

/* Per-thread scratch of the local join. */
struct JoinScratch {
    std::vector<uint32_t> members; /* new samples first, then old */
    std::vector<float> block;      /* their vectors, contiguous */
};

} // namespace

KnnGraph brute_force_knn(const DatasetView &data, Metric metric, uint32_t k, uint32_t threads)
{
    validate_dataset(data);
    if (k == 0 || k > data.n - 1)
        throw Error(ErrorCode::InvalidParameter,
                    "k must be between 1 and n - 1 (" + std::to_string(data.n - 1) + "), got " + std::to_string(k));
    const MetricKernel dist = metric_kernel(metric);
    KnnGraph out;
    out.k = k;
    out.ids.resize(data.n * k);
    out.distances.resize(data.n * k);
    detail::parallel_for(data.n, 16, std::max(threads, 1u), nullptr, [&](uint64_t begin, uint64_t end, uint32_t) {
        std::vector<std::pair<float, uint32_t>> all;
        all.reserve(data.n);
        for (uint64_t u = begin; u < end; u++) {
            all.clear();
            for (uint64_t v = 0; v < data.n; v++)
                if (v != u)
                    all.push_back({dist(data.row(u), data.row(v), data.dim), (uint32_t)v});
            std::partial_sort(all.begin(), all.begin() + k, all.end());
            for (uint32_t j = 0; j < k; j++) {
                out.ids[u * k + j] = all[j].second;
                out.distances[u * k + j] = all[j].first;
            }
        }
    });
    return out;
}

KnnGraph nn_descent(const DatasetView &data, Metric metric, const BuildParams &params, BuildProgress *progress)
{
    validate_build_params(params);
    validate_dataset(data);
    if (data.n < 2)
        throw Error(ErrorCode::InvalidData, "a kNN graph needs at least 2 vectors");
    const uint64_t n = data.n;
    const uint32_t dim = data.dim;
    const uint32_t k = (uint32_t)std::min<uint64_t>(params.intermediate_degree, n - 1);
    const uint32_t threads = params.threads;
    /* Samples per node and kind; the join costs about (2S)^2 * 1.5
     * distances per node, so S trades build time against convergence. */
    const uint32_t S = std::max<uint32_t>(4, std::min<uint32_t>(k, (k + 3) / 4));
    const MetricKernel dist = metric_kernel(metric);

    if (progress) {
        progress->phase.store((uint32_t)BuildPhase::KnnGraph);
        progress->total.store(n * params.nn_descent_max_iterations);
        progress->done.store(0);
    }

    CandidateLists lists(n, k);
    random_init(lists, data, dist, params.seed, threads, progress);

    SampleLists fwd_new(n, S, false), fwd_old(n, S, false);
    SampleLists rev_new(n, S, true), rev_old(n, S, true);
    std::vector<JoinScratch> scratch(threads);
    const uint64_t stop_below = (uint64_t)(params.nn_descent_termination * (double)n * k);

    for (uint32_t iter = 0; iter < params.nn_descent_max_iterations; iter++) {
        /* 1. Forward samples: the closest new entries (now marked old) and
         *    the closest old ones. */
        detail::parallel_for(n, 1024, threads, progress, [&](uint64_t begin, uint64_t end, uint32_t) {
            for (uint64_t u = begin; u < end; u++) {
                uint32_t *ids = &lists.ids[u * k];
                uint8_t *isn = &lists.is_new[u * k];
                uint32_t cn = 0, co = 0;
                for (uint32_t j = 0; j < k; j++) {
                    if (isn[j]) {
                        if (cn < S) {
                            fwd_new.row(u)[cn++] = ids[j];
                            isn[j] = 0;
                        }
                    } else if (co < S) {
                        fwd_old.row(u)[co++] = ids[j];
                    }
                }
                fwd_new.count[u] = cn;
                fwd_old.count[u] = co;
                rev_new.count[u] = 0;
                rev_old.count[u] = 0;
            }
        });
        /* 2. Reverse samples. */
        const uint64_t iseed = mix64(params.seed + iter);
        detail::parallel_for(n, 1024, threads, progress, [&](uint64_t begin, uint64_t end, uint32_t) {
            for (uint64_t u = begin; u < end; u++) {
                for (uint32_t j = 0; j < fwd_new.count[u]; j++) {
                    uint32_t v = fwd_new.row(u)[j];
                    push_reverse(rev_new, lists.locks.get(), v, (uint32_t)u, mix64(iseed ^ (u << 32 | v)));
                }
                for (uint32_t j = 0; j < fwd_old.count[u]; j++) {
                    uint32_t v = fwd_old.row(u)[j];
                    push_reverse(rev_old, lists.locks.get(), v, (uint32_t)u, mix64(iseed ^ (u << 32 | v)));
                }
            }
        });
        /* 3. Local join. */
        std::atomic<uint64_t> updates{0};
        detail::parallel_for(n, 64, threads, progress, [&](uint64_t begin, uint64_t end, uint32_t t) {
            JoinScratch &js = scratch[t];
            uint64_t local_updates = 0;
            for (uint64_t u = begin; u < end; u++) {
                auto &m = js.members;
                m.clear();
                auto add_unique = [&](uint32_t v, size_t from) {
                    for (size_t j = from; j < m.size(); j++)
                        if (m[j] == v)
                            return;
                    m.push_back(v);
                };
                for (uint32_t j = 0; j < fwd_new.count[u]; j++)
                    m.push_back(fwd_new.row(u)[j]);
                for (uint32_t j = 0; j < rev_new.count[u]; j++)
                    add_unique(rev_new.row(u)[j], 0);
                const size_t num_new = m.size();
                if (num_new == 0)
                    continue;
                for (uint32_t j = 0; j < fwd_old.count[u]; j++)
                    add_unique(fwd_old.row(u)[j], 0);
                for (uint32_t j = 0; j < rev_old.count[u]; j++)
                    add_unique(rev_old.row(u)[j], 0);
                const size_t total = m.size();
                js.block.resize(total * dim);
                for (size_t j = 0; j < total; j++)
                    std::memcpy(&js.block[j * dim], data.row(m[j]), dim * sizeof(float));
                for (size_t a = 0; a < num_new; a++) {
                    const float *va = &js.block[a * dim];
                    for (size_t b = a + 1; b < total; b++) {
                        float d = dist(va, &js.block[b * dim], dim);
                        local_updates += lists.insert(m[a], m[b], d);
                        local_updates += lists.insert(m[b], m[a], d);
                    }
                }
            }
            updates.fetch_add(local_updates, std::memory_order_relaxed);
            if (progress)
                progress->done.fetch_add(end - begin, std::memory_order_relaxed);
        });
        if (updates.load() <= stop_below)
            break;
    }

    KnnGraph out;
    out.k = k;
    out.ids = std::move(lists.ids);
    out.distances = std::move(lists.dists);
    if (progress)
        progress->done.store(progress->total.load());
    return out;
}

} // namespace cagra
