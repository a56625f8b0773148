/*
 * progress.h — what a running build shares with the thread that started it:
 * its phase, counters for progress reports and the cancel flag.  Apart from
 * build.h so that the helpers the build uses (parallel.h) need no more of
 * the build than this.
 */
#pragma once

#include <atomic>
#include <cstdint>

namespace cagra {

enum class BuildPhase : uint32_t { Validating = 0, KnnGraph = 1, Pruning = 2, Done = 3 };

/* Shared with the thread that started the build: the caller polls the
 * counters for progress reports (done/total restart in each phase) and sets
 * `cancel` to stop the build, which then throws Error(ErrorCode::Cancelled)
 * within about 100 ms, from every phase. */
struct BuildProgress {
    std::atomic<uint32_t> phase{0};
    std::atomic<uint64_t> done{0};
    std::atomic<uint64_t> total{0};
    std::atomic<bool> cancel{false};
};

} // namespace cagra
