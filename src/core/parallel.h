/*
 * parallel.h — internal helpers of the build (not part of the contract):
 * run a function over chunks of [0, n) on a given number of threads,
 * stopping promptly when the caller cancels; hashing and a small random
 * generator; the random-projection tree split.
 */
#pragma once

#include <algorithm>
#include <atomic>
#include <exception>
#include <limits>
#include <thread>
#include <utility>
#include <vector>

#include "progress.h"
#include "types.h"

namespace cagra {
namespace detail {

inline bool cancel_requested(const BuildProgress *progress)
{
    return progress && progress->cancel.load(std::memory_order_relaxed);
}

inline void throw_if_cancelled(const BuildProgress *progress)
{
    if (cancel_requested(progress))
        throw Error(ErrorCode::Cancelled, "graph build cancelled");
}

/*
 * fn(begin, end, thread_index) is called for consecutive chunks of `chunk`
 * items, handed out dynamically (so with one thread the order is fixed).
 * A cancel request is seen between chunks, so chunks should take well under
 * 100 ms.  An exception in any thread stops the others and is rethrown here.
 */
template <class Fn>
void parallel_for(uint64_t n, uint64_t chunk, uint32_t threads, const BuildProgress *progress, Fn &&fn)
{
    chunk = std::max<uint64_t>(chunk, 1);
    uint64_t chunks = (n + chunk - 1) / chunk;
    threads = (uint32_t)std::max<uint64_t>(1, std::min<uint64_t>(threads, chunks));
    std::atomic<uint64_t> next{0};
    std::atomic<bool> failed{false};
    std::exception_ptr error;
    std::atomic_flag error_lock = ATOMIC_FLAG_INIT;

    auto worker = [&](uint32_t t) {
        try {
            for (;;) {
                if (failed.load(std::memory_order_relaxed) || cancel_requested(progress))
                    return;
                uint64_t c = next.fetch_add(1, std::memory_order_relaxed);
                if (c >= chunks)
                    return;
                uint64_t begin = c * chunk;
                fn(begin, std::min(n, begin + chunk), t);
            }
        } catch (...) {
            if (!error_lock.test_and_set())
                error = std::current_exception();
            failed.store(true);
        }
    };

    if (threads == 1) {
        worker(0);
    } else {
        std::vector<std::thread> pool;
        pool.reserve(threads - 1);
        try {
            for (uint32_t t = 1; t < threads; t++)
                pool.emplace_back(worker, t);
        } catch (...) {
            failed.store(true);
            for (auto &th : pool)
                th.join();
            throw Error(ErrorCode::OutOfMemory, "could not start build threads");
        }
        worker(0);
        for (auto &th : pool)
            th.join();
    }
    if (error)
        std::rethrow_exception(error);
    throw_if_cancelled(progress);
}

/* A distance that sorts: inner products of huge vectors can overflow to
 * NaN, which would break std::sort's ordering; treat it as farthest. */
inline float sortable(float d)
{
    return d == d ? d : std::numeric_limits<float>::infinity();
}

/* splitmix64: a cheap, well-mixed hash for seeding and sampling. */
inline uint64_t mix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* A small xorshift generator for per-node random choices. */
struct Rng {
    uint64_t s;
    explicit Rng(uint64_t seed) : s(mix64(seed) | 1) {}
    uint64_t next()
    {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        return s;
    }
    uint64_t below(uint64_t n) { return next() % n; }
};

/* One random-projection tree: `order` becomes a permutation of 0..n-1 in
 * which each leaf (at most `leaf` points split off by hyperplanes halfway
 * between two random members) is the contiguous range given in `leaves`,
 * in tree order.  Used to seed NN-descent and to order nodes for locality. */
void rp_tree_leaves(const DatasetView &data, uint32_t leaf, uint64_t seed, const BuildProgress *progress,
                    std::vector<uint32_t> &order, std::vector<std::pair<uint64_t, uint64_t>> &leaves);

} // namespace detail
} // namespace cagra
