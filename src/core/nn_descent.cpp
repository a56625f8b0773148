/*
 * nn_descent.cpp — the approximate kNN graph (NN-descent, Dong et al. 2011)
 * and the exact one by brute force.
 *
 * Each node keeps a sorted candidate list of k (distance, id, is-new),
 * seeded by the leaves of two random-projection trees.  An iteration samples
 * the S closest new and S closest old entries per node, adds reverse samples
 * (bounded, chosen by a hash priority so the choice does not depend on
 * thread timing), and joins every new sample with every other new and old
 * sample of the same node: a pair (a, b) may update the lists of a and b.
 * The vectors of one node's samples are gathered into a contiguous block
 * first, so the join's distance matrix reads them from cache; the updates
 * are queued and applied per owner thread, without locks.  See docs/core.md.
 */
#include <algorithm>
#include <cstring>
#include <memory>
#include <limits>

#include "nn_descent.h"
#include "params.h"
#include "distance.h"
#include "parallel.h"

namespace cagra {
namespace {

using detail::mix64;

/* Random-projection trees that seed the lists: two, because one tree's
 * leaves leave NN-descent little to find in its first iteration. */
constexpr uint32_t kTrees = 2;

/* The share of list entries an iteration may change before the sample
 * widens (see nn_descent). */
constexpr double kSlowConvergence = 0.6;

/* Spin lock per node: critical sections are a few dozen instructions. */
struct SpinLock {
    std::atomic<bool> held{false};
    void lock()
    {
        while (held.exchange(true, std::memory_order_acquire))
            while (held.load(std::memory_order_relaxed))
                relax();
    }
    void unlock() { held.store(false, std::memory_order_release); }
    static void relax()
    {
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#endif
    }
};

/* One list entry; the top bit of `id` marks an entry not yet joined
 * ("new").  Distance and id share a cache line, so an update touches one
 * row, not three arrays. */
struct Entry {
    float dist;
    uint32_t id;
};
constexpr uint32_t kNewBit = 0x80000000u;
constexpr uint32_t kIdMask = 0x7FFFFFFFu;

struct CandidateLists {
    uint32_t k;
    std::vector<Entry> entries;                  /* n rows of k, sorted by distance */
    std::unique_ptr<std::atomic<float>[]> worst; /* last distance of each row, for a lock-free pre-check */
    std::unique_ptr<SpinLock[]> locks;

    CandidateLists(uint64_t n, uint32_t k_)
        : k(k_), entries(n * k_, Entry{std::numeric_limits<float>::infinity(), kIdMask}),
          worst(new std::atomic<float>[n]), locks(new SpinLock[n])
    {}
    Entry *row(uint64_t u) { return &entries[u * k]; }

    /* Insert v into u's list if it is closer than the worst entry and not
     * there yet.  Returns whether the list changed.  Every distance comes
     * from the same kernel, which is symmetric bit for bit, so a duplicate
     * of v can only sit among the entries of exactly distance d: only those
     * are compared. */
    bool insert(uint32_t u, uint32_t v, float d)
    {
        if (!(d < worst[u].load(std::memory_order_relaxed)))
            return false;
        locks[u].lock();
        bool changed = insert_unlocked(u, v, d);
        locks[u].unlock();
        return changed;
    }

    /* Whether v is in u's list at distance d (see insert_unlocked: a copy
     * of v can only sit among the entries of exactly distance d). */
    bool contains(uint32_t u, uint32_t v, float d)
    {
        const Entry *r = row(u);
        /* First entry not closer than d, by a branch-free binary search
         * (the outcome of each step is unpredictable). */
        uint32_t lo = 0;
        for (uint32_t len = k; len > 1;) {
            uint32_t half = len / 2;
            lo += half & (0u - (uint32_t)(r[lo + half - 1].dist < d));
            len -= half;
        }
        lo += (r[lo].dist < d);
        for (uint32_t j = lo; j < k && r[j].dist == d; j++)
            if ((r[j].id & kIdMask) == v)
                return true;
        return false;
    }

    /* Merge candidates (keys of finite distances and ids, any order, see
     * sort_key) into u's row, owned by the caller: one sort and one pass
     * instead of an insertion (and a row shift) per candidate.  `merged`
     * is scratch of k entries. */
    void merge_unlocked(uint32_t u, std::vector<uint64_t> &cand, std::vector<Entry> &merged)
    {
        /* At most k of them can enter the row. */
        if (cand.size() > k) {
            std::nth_element(cand.begin(), cand.begin() + k, cand.end());
            cand.resize(k);
        }
        std::sort(cand.begin(), cand.end());
        const Entry *r = row(u);
        uint32_t i = 0, out = 0;
        size_t c = 0;
        while (out < k) {
            const float d = c < cand.size() ? key_distance(cand[c]) : 0.0f;
            if (c == cand.size() || !(d < r[i].dist)) {
                merged[out++] = r[i++]; /* i < k: the row alone has k entries */
                continue;
            }
            const uint32_t v = (uint32_t)cand[c++];
            /* A copy already taken has the same distance (one kernel). */
            bool dup = false;
            for (uint32_t j = out; j > 0 && merged[j - 1].dist == d && !dup; j--)
                dup = (merged[j - 1].id & kIdMask) == v;
            if (!dup)
                merged[out++] = {d, v | kNewBit};
        }
        std::copy(merged.begin(), merged.end(), row(u));
        worst[u].store(row(u)[k - 1].dist, std::memory_order_relaxed);
    }

    /* (distance, id) as one integer that sorts like the pair: the float's
     * bits made monotonic (negative values flipped), then the id. */
    static uint64_t sort_key(float d, uint32_t id)
    {
        uint32_t bits;
        std::memcpy(&bits, &d, 4);
        bits ^= (bits >> 31) ? 0xFFFFFFFFu : 0x80000000u;
        return (uint64_t)bits << 32 | id;
    }
    static float key_distance(uint64_t key)
    {
        uint32_t bits = (uint32_t)(key >> 32);
        bits ^= (bits >> 31) ? 0x80000000u : 0xFFFFFFFFu;
        float d;
        std::memcpy(&d, &bits, 4);
        return d;
    }

    /* insert() for a caller that owns row u exclusively. */
    bool insert_unlocked(uint32_t u, uint32_t v, float d)
    {
        Entry *r = row(u);
        bool changed = false;
        if (d < r[k - 1].dist) {
            /* First entry farther than d, by binary search (rows are long
             * and mostly out of cache). */
            uint32_t lo = 0, hi = k - 1;
            while (lo < hi) {
                uint32_t mid = (lo + hi) / 2;
                if (r[mid].dist > d)
                    hi = mid;
                else
                    lo = mid + 1;
            }
            uint32_t pos = lo;
            bool dup = false;
            for (uint32_t j = pos; j > 0 && r[j - 1].dist == d && !dup; j--)
                dup = (r[j - 1].id & kIdMask) == v;
            if (!dup) {
                std::memmove(r + pos + 1, r + pos, (k - 1 - pos) * sizeof(Entry));
                r[pos] = {d, v | kNewBit};
                worst[u].store(r[k - 1].dist, std::memory_order_relaxed);
                changed = true;
            }
        }
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
    {}
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

/* Rows start as placeholders (id kIdMask, distance +inf, as constructed);
 * the trees fill most of them, fill_short_rows() the rest. */
void init_empty(CandidateLists &lists, uint64_t n)
{
    for (uint64_t u = 0; u < n; u++)
        lists.worst[u].store(std::numeric_limits<float>::infinity(), std::memory_order_relaxed);
}

/* Complete rows the trees left short with random nodes. */
void fill_short_rows(CandidateLists &lists, const DatasetView &data, const MetricKernel &dist, uint64_t seed,
                     uint32_t threads, BuildProgress *progress)
{
    const uint64_t n = data.n;
    const uint32_t k = lists.k;
    detail::parallel_for(n, 1024, threads, progress, [&](uint64_t begin, uint64_t end, uint32_t) {
        for (uint64_t u = begin; u < end; u++) {
            detail::Rng rng(seed ^ mix64(u));
            uint64_t next = 0; /* sequential fallback when random picks keep colliding */
            for (uint32_t tries = 0; lists.row(u)[k - 1].id == kIdMask; tries++) {
                uint64_t v = tries < 8 * k ? rng.below(n) : next++;
                if (v == u || v >= n)
                    continue;
                /* Huge finite components can give an infinite (or, for
                 * inner products, NaN) distance, which no list would take:
                 * clamp, so every row fills. */
                float d = dist(data.row(u), data.row(v), data.dim);
                if (!(d < std::numeric_limits<float>::max()))
                    d = std::numeric_limits<float>::max();
                lists.insert((uint32_t)u, (uint32_t)v, d);
            }
        }
    });
}

/*
 * Random-projection trees (as in PyNNDescent): every pair inside a leaf is
 * joined.  A few trees give NN-descent a start far better than random
 * lists, so it needs fewer (and cheaper) iterations.
 */
void rp_tree_init(CandidateLists &lists, const DatasetView &data, const MetricKernel &dist, uint32_t trees,
                  uint32_t leaf, uint64_t seed, uint32_t threads, BuildProgress *progress)
{
    const uint32_t dim = data.dim;
    /* The splits of one tree are sequential: build the trees side by side. */
    std::vector<std::vector<uint32_t>> order(trees);
    std::vector<std::vector<std::pair<uint64_t, uint64_t>>> leaves(trees);
    detail::parallel_for(trees, 1, threads, progress, [&](uint64_t t, uint64_t, uint32_t) {
        detail::rp_tree_leaves(data, leaf, seed ^ mix64(0x7265e + t), progress, order[t], leaves[t]);
    });
    /* Within one tree every node lies in exactly one leaf, so the task of
     * a leaf owns its members' rows: no locks, and each pair's distance is
     * computed once into a small matrix. */
    for (uint32_t t = 0; t < trees; t++) {
        detail::parallel_for(leaves[t].size(), 16, threads, progress, [&](uint64_t lb, uint64_t le, uint32_t) {
            std::vector<float> matrix;
            std::vector<uint64_t> cand;
            std::vector<Entry> merged(lists.k);
            for (uint64_t l = lb; l < le; l++) {
                auto [begin, end] = leaves[t][l];
                const uint64_t m = end - begin;
                const uint32_t *ids = &order[t][begin];
                matrix.resize(m * m);
                for (uint64_t x = 0; x < m; x++)
                    for (uint64_t y = x + 1; y < m; y++)
                        matrix[x * m + y] = matrix[y * m + x] = dist(data.row(ids[x]), data.row(ids[y]), dim);
                for (uint64_t x = 0; x < m; x++) {
                    cand.clear();
                    /* Only what beats the row's worst entry (so never NaN
                     * or infinity: those are left to fill_short_rows). */
                    const float worst = lists.worst[ids[x]].load(std::memory_order_relaxed);
                    for (uint64_t y = 0; y < m; y++)
                        if (y != x && matrix[x * m + y] < worst)
                            cand.push_back(CandidateLists::sort_key(matrix[x * m + y], ids[y]));
                    lists.merge_unlocked(ids[x], cand, merged);
                }
            }
        });
    }
}

/* A queued list update: offer `candidate` at `dist` to `node`'s list. */
struct Update {
    uint32_t node;
    uint32_t candidate;
    float dist;
};

/* Per-thread scratch of the local join. */
struct JoinScratch {
    std::vector<std::vector<Update>> queued; /* by owner thread of the row */
    std::vector<uint32_t> members;           /* new samples first, then old */
    std::vector<float> block;                /* their vectors, contiguous */
    std::vector<float> worst;                /* their lists' worst distances */
};

} // namespace

void detail::rp_tree_leaves(const DatasetView &data, uint32_t leaf, uint64_t seed, const BuildProgress *progress,
                            std::vector<uint32_t> &order, std::vector<std::pair<uint64_t, uint64_t>> &leaves)
{
    const uint64_t n = data.n;
    const uint32_t dim = data.dim;
    order.resize(n);
    for (uint64_t i = 0; i < n; i++)
        order[i] = (uint32_t)i;
    leaves.clear();
    std::vector<float> normal(dim);
    detail::Rng rng(seed);
    /* Depth first, lower half first, so leaves come out in tree order. */
    std::vector<std::pair<uint64_t, uint64_t>> stack{{0, n}};
    while (!stack.empty()) {
        auto [begin, end] = stack.back();
        stack.pop_back();
        if (end - begin <= leaf) {
            leaves.push_back({begin, end});
            continue;
        }
        detail::throw_if_cancelled(progress);
        const float *a = data.row(order[begin + rng.below(end - begin)]);
        const float *b = data.row(order[begin + rng.below(end - begin)]);
        double offset = 0;
        for (uint32_t j = 0; j < dim; j++) {
            normal[j] = a[j] - b[j];
            offset += 0.5 * ((double)a[j] * a[j] - (double)b[j] * b[j]);
        }
        auto side = [&](uint32_t id) { return inner_product(data.row(id), normal.data(), dim) > offset; };
        uint64_t mid = (uint64_t)(std::partition(order.begin() + begin, order.begin() + end, side) - order.begin());
        if (mid == begin || mid == end) /* degenerate cut (equal points): halve */
            mid = begin + (end - begin) / 2;
        stack.push_back({mid, end});
        stack.push_back({begin, mid});
    }
}

KnnGraph brute_force_knn(const DatasetView &data, Metric metric, uint32_t k, uint32_t threads,
                         const BuildProgress *progress)
{
    validate_dataset(data, kMaxGraphDim);
    if (k == 0 || k > data.n - 1)
        throw Error(ErrorCode::InvalidParameter,
                    "k must be between 1 and n - 1 (" + std::to_string(data.n - 1) + "), got " + std::to_string(k));
    const uint64_t n = data.n;
    const uint32_t dim = data.dim;
    /*
     * Each pair once: a task takes a block of kRows rows against the rows
     * from its own block on, in tiles of as many columns, by distance_block
     * (a blocked matrix product, whose transposition of each group of
     * columns the block's 256 rows share; the tile's 256 KB of distances
     * stay in the cache), and offers each distance to both rows.  A
     * row keeps only the candidates that beat its k-th nearest so far (its
     * bound), trimmed back to k when 2k have gathered; a block's rows are
     * updated under that block's lock, since later tasks reach them too.
     */
    constexpr uint64_t kRows = 256;
    constexpr uint64_t tile = kRows;
    const uint64_t blocks = (n + kRows - 1) / kRows;
    const uint64_t cap = 2 * (uint64_t)k;
    std::vector<uint64_t> cand(n * cap);
    std::vector<uint32_t> count(n, 0);
    std::unique_ptr<std::atomic<float>[]> bound(new std::atomic<float>[n]);
    for (uint64_t r = 0; r < n; r++)
        bound[r].store(std::numeric_limits<float>::infinity(), std::memory_order_relaxed);
    std::unique_ptr<SpinLock[]> locks(new SpinLock[blocks]);

    /* Candidate v at distance d into row r, its block's lock held, unless
     * above the row's bound (ties with the k-th stay, the lowest ids win
     * below; NaN counts as +infinity, so every row fills). */
    auto offer = [&](uint64_t r, uint32_t v, float d) {
        if (d > bound[r].load(std::memory_order_relaxed))
            return;
        uint64_t *c = &cand[r * cap];
        c[count[r]++] = CandidateLists::sort_key(detail::sortable(d), v);
        if (count[r] == k || count[r] == cap) {
            std::nth_element(c, c + (k - 1), c + count[r]);
            count[r] = k;
            bound[r].store(CandidateLists::key_distance(c[k - 1]), std::memory_order_relaxed);
        }
    };
    detail::parallel_for(blocks, 1, std::max(threads, 1u), progress, [&](uint64_t b0, uint64_t b1, uint32_t) {
        std::vector<float> dists(kRows * tile);
        std::vector<uint32_t> hits(tile + 16);
        for (uint64_t blk = b0; blk < b1; blk++) {
            const uint64_t r0 = blk * kRows, rows = std::min(n, r0 + kRows) - r0;
            for (uint64_t c0 = r0; c0 < n; c0 += tile) {
                const uint64_t cols = std::min(n, c0 + tile) - c0;
                distance_block(metric, data.row(r0), (uint32_t)rows, data.row(c0), (uint32_t)cols, dim, dists.data());
                /* to the block's own rows: every column of the tile (most
                 * distances fail the bound: one vectorised pass a row) */
                locks[blk].lock();
                for (uint64_t i = 0; i < rows; i++) {
                    const uint64_t r = r0 + i;
                    const float *di = &dists[i * cols];
                    const float b = bound[r].load(std::memory_order_relaxed);
                    const uint32_t found = positions_not_above(di, (uint32_t)cols, &b, false, hits.data());
                    for (uint32_t h = 0; h < found; h++)
                        if (c0 + hits[h] != r)
                            offer(r, (uint32_t)(c0 + hits[h]), di[hits[h]]);
                }
                locks[blk].unlock();
                /* to the columns' rows, block by block, beyond this block
                 * (its own pairs came both ways above) */
                for (uint64_t j0 = std::max(c0, r0 + rows); j0 < c0 + cols; j0 += kRows) {
                    const uint64_t jb = j0 / kRows, width = std::min(c0 + cols, j0 + kRows) - j0;
                    float b[kRows];
                    locks[jb].lock();
                    for (uint64_t j = 0; j < width; j++)
                        b[j] = bound[j0 + j].load(std::memory_order_relaxed);
                    for (uint64_t i = 0; i < rows; i++) {
                        const float *di = &dists[i * cols + (j0 - c0)];
                        const uint32_t found = positions_not_above(di, (uint32_t)width, b, true, hits.data());
                        for (uint32_t h = 0; h < found; h++) {
                            const uint64_t j = hits[h];
                            offer(j0 + j, (uint32_t)(r0 + i), di[j]);
                            b[j] = bound[j0 + j].load(std::memory_order_relaxed);
                        }
                    }
                    locks[jb].unlock();
                }
            }
        }
    });
    detail::throw_if_cancelled(progress);

    KnnGraph out;
    out.k = k;
    out.ids.resize(n * k);
    out.distances.resize(n * k);
    detail::parallel_for(n, 1024, std::max(threads, 1u), progress, [&](uint64_t begin, uint64_t end, uint32_t) {
        for (uint64_t r = begin; r < end; r++) {
            uint64_t *c = &cand[r * cap];
            std::nth_element(c, c + (k - 1), c + count[r]);
            std::sort(c, c + k);
            for (uint32_t j = 0; j < k; j++) {
                out.ids[r * k + j] = (uint32_t)c[j];
                out.distances[r * k + j] = CandidateLists::key_distance(c[j]);
            }
        }
    });
    return out;
}

KnnGraph nn_descent(const DatasetView &data, Metric metric, const BuildParams &params, BuildProgress *progress)
{
    validate_build_params(params);
    validate_dataset(data, kMaxGraphDim);
    if (data.n < 2)
        throw Error(ErrorCode::InvalidData, "a kNN graph needs at least 2 vectors");
    if (data.n >= kIdMask)
        throw Error(ErrorCode::InvalidData, "NN-descent handles at most " + std::to_string(kIdMask) + " vectors");
    const uint64_t n = data.n;
    const uint32_t dim = data.dim;
    const uint32_t k = (uint32_t)std::min<uint64_t>(params.intermediate_degree, n - 1);
    const uint32_t threads = params.threads;
    /* Samples per node and kind; the join costs about (2S)^2 * 1.5
     * distances per node, so S trades build time against convergence.
     * Lists that still change in most of their entries after the first
     * iterations (real text embeddings: 83% in the second, where generated
     * clustered sets change 25-42%) are far from converging with that
     * sample: S doubles for the iterations left (docs/core.md). */
    uint32_t S = std::max<uint32_t>(4, std::min<uint32_t>(k, (k + 7) / 8));
    const uint32_t wide_S = std::min(k, 2 * S);
    const MetricKernel dist = metric_kernel(metric);

    /* Progress: of the n rows, those whose list settled (took no new
     * neighbour in the last iteration); the iterations stop when few
     * still change, so it ends near n, not at a fraction of an iteration
     * budget that convergence leaves unused. */
    if (progress) {
        progress->phase.store((uint32_t)BuildPhase::KnnGraph);
        progress->total.store(n);
        progress->done.store(0);
    }

    CandidateLists lists(n, k);
    init_empty(lists, n);
    rp_tree_init(lists, data, dist, kTrees, std::max<uint32_t>(2 * k, 32), params.seed, threads, progress);
    fill_short_rows(lists, data, dist, params.seed, threads, progress);

    SampleLists fwd_new(n, S, false), fwd_old(n, S, false);
    SampleLists rev_new(n, S, true), rev_old(n, S, true);
    std::vector<JoinScratch> scratch(threads);
    /* The thread that applies a row's updates.  Rows are dealt out in
     * blocks of 64, not in halves: a round's nodes are neighbours in the
     * locality order, so their updates fall into a narrow range of rows,
     * which one half would give to one thread. */
    auto owner_of = [threads](uint32_t node) { return (node >> 6) % threads; };
    for (auto &js : scratch)
        js.queued.resize(threads);
    const uint64_t stop_below = (uint64_t)(params.nn_descent_termination * (double)n * k);

    for (uint32_t iter = 0; iter < params.nn_descent_max_iterations; iter++) {
        /* 1. Forward samples: the closest new entries (then marked old)
         *    and the closest old ones.  (Random picks were tried: they
         *    converge in more iterations on clustered data.) */
        std::atomic<uint64_t> changed_rows{0};
        detail::parallel_for(n, 1024, threads, progress, [&](uint64_t begin, uint64_t end, uint32_t) {
            uint64_t changed = 0;
            for (uint64_t u = begin; u < end; u++) {
                Entry *r = lists.row(u);
                uint32_t cn = 0, co = 0;
                for (uint32_t j = 0; j < k; j++) {
                    if (r[j].id & kNewBit) {
                        if (cn < S) {
                            r[j].id &= kIdMask;
                            fwd_new.row(u)[cn++] = r[j].id;
                        }
                    } else if (co < S) {
                        fwd_old.row(u)[co++] = r[j].id;
                    }
                }
                fwd_new.count[u] = cn;
                fwd_old.count[u] = co;
                rev_new.count[u] = 0;
                rev_old.count[u] = 0;
                changed += cn > 0;
            }
            changed_rows.fetch_add(changed, std::memory_order_relaxed);
        });
        if (progress)
            progress->done.store(n - changed_rows.load());
        const uint64_t iseed = mix64(params.seed + iter);
        /* 2. Reverse samples. */
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
        /* 3. Local join, in rounds of nodes: the join only reads the lists
         *    and queues the pairs that beat a list's worst entry, per owner
         *    thread; then each thread applies the updates of the rows it
         *    owns, so no row is ever locked. */
        std::atomic<uint64_t> updates{0};
        const uint64_t round = 8192;
        for (uint64_t r0 = 0; r0 < n; r0 += round) {
            const uint64_t r1 = std::min(n, r0 + round);
            detail::parallel_for(r1 - r0, 64, threads, progress, [&](uint64_t begin, uint64_t end, uint32_t t) {
                JoinScratch &js = scratch[t];
                for (uint64_t u = r0 + begin; u < r0 + end; u++) {
                    auto &m = js.members;
                    m.clear();
                    auto add_unique = [&](uint32_t v) {
                        for (uint32_t x : m)
                            if (x == v)
                                return;
                        m.push_back(v);
                    };
                    for (uint32_t j = 0; j < fwd_new.count[u]; j++)
                        m.push_back(fwd_new.row(u)[j]);
                    for (uint32_t j = 0; j < rev_new.count[u]; j++)
                        add_unique(rev_new.row(u)[j]);
                    const size_t num_new = m.size();
                    if (num_new == 0)
                        continue;
                    for (uint32_t j = 0; j < fwd_old.count[u]; j++)
                        add_unique(fwd_old.row(u)[j]);
                    for (uint32_t j = 0; j < rev_old.count[u]; j++)
                        add_unique(rev_old.row(u)[j]);
                    const size_t total = m.size();
                    js.block.resize(total * dim);
                    js.worst.resize(total);
                    for (size_t j = 0; j < total; j++) {
                        for (uint32_t line = 0; line < k * sizeof(Entry); line += 64)
                            __builtin_prefetch((const char *)lists.row(m[j]) + line);
                        std::memcpy(&js.block[j * dim], data.row(m[j]), dim * sizeof(float));
                        js.worst[j] = lists.worst[m[j]].load(std::memory_order_relaxed);
                    }
                    for (size_t a = 0; a < num_new; a++) {
                        const float *va = &js.block[a * dim];
                        for (size_t b = a + 1; b < total; b++) {
                            float d = dist(va, &js.block[b * dim], dim);
                            /* Rows change only between rounds, so a pair
                             * already listed is dropped here, where the
                             * row is cheap to read, not queued. */
                            if (d < js.worst[a] && !lists.contains(m[a], m[b], d))
                                js.queued[owner_of(m[a])].push_back({m[a], m[b], d});
                            if (d < js.worst[b] && !lists.contains(m[b], m[a], d))
                                js.queued[owner_of(m[b])].push_back({m[b], m[a], d});
                        }
                    }
                }
            });
            detail::parallel_for(threads, 1, threads, progress, [&](uint64_t owner, uint64_t, uint32_t) {
                uint64_t applied = 0;
                for (uint32_t t = 0; t < threads; t++) {
                    auto &q = scratch[t].queued[owner];
                    /* Most queued pairs lost to an earlier update of the
                     * row: the dense worst[] array says so without
                     * touching the row. */
                    for (const Update &up : q)
                        if (up.dist < lists.worst[up.node].load(std::memory_order_relaxed))
                            applied += lists.insert_unlocked(up.node, up.candidate, up.dist);
                    q.clear();
                }
                updates.fetch_add(applied, std::memory_order_relaxed);
            });
        }
        if (iter > 0 && updates.load() <= stop_below)
            break;
        if (S < wide_S && (double)updates.load() > kSlowConvergence * (double)n * k) {
            S = wide_S;
            fwd_new = SampleLists(n, S, false);
            fwd_old = SampleLists(n, S, false);
            rev_new = SampleLists(n, S, true);
            rev_old = SampleLists(n, S, true);
        }
    }

    KnnGraph out;
    out.k = k;
    out.ids.resize(n * k);
    out.distances.resize(n * k);
    detail::parallel_for(n, 4096, threads, progress, [&](uint64_t begin, uint64_t end, uint32_t) {
        for (uint64_t i = begin * k; i < end * k; i++) {
            out.ids[i] = lists.entries[i].id & kIdMask;
            out.distances[i] = lists.entries[i].dist;
        }
    });
    if (progress)
        progress->done.store(n);
    return out;
}

} // namespace cagra
