/*
 * hold_memory.cu — a test helper that takes device memory away from
 * everybody else: `hold_memory DEVICE LEAVE_MB` allocates memory on DEVICE
 * until only about LEAVE_MB MiB (1 MiB = 2^20 bytes) remain free there,
 * prints "holding N MB, M MB free", and keeps it until it receives SIGTERM
 * (or SIGINT) or its standard input reaches end of file.  The TAP tests use
 * it to make the GPU worker run out of device memory.  Exit status: 0 after
 * a release, 1 when the device cannot be used, 2 on bad arguments.
 */
#include <cuda_runtime.h>

#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace {

constexpr size_t kMiB = size_t(1) << 20;
/* First chunk size; halved whenever an allocation fails, down to kMinChunk. */
constexpr size_t kMaxChunk = 1024 * kMiB;
constexpr size_t kMinChunk = 1 * kMiB;

volatile sig_atomic_t stop_requested = 0;

void on_signal(int)
{
    stop_requested = 1;
}

bool parse_number(const char *s, long *out)
{
    char *end = nullptr;
    errno = 0;
    long v = std::strtol(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || v < 0)
        return false;
    *out = v;
    return true;
}

bool free_memory(size_t *free_b)
{
    size_t total_b = 0;
    cudaError_t err = cudaMemGetInfo(free_b, &total_b);
    if (err != cudaSuccess) {
        std::fprintf(stderr, "hold_memory: cudaMemGetInfo: %s\n", cudaGetErrorString(err));
        return false;
    }
    return true;
}

/* Allocate chunks until at most `leave` bytes (plus less than kMinChunk)
 * are free; a failed allocation is not an error, only a smaller chunk. */
bool hold_until(size_t leave, std::vector<void *> *held, size_t *held_bytes)
{
    size_t chunk = kMaxChunk;
    for (;;) {
        size_t free_b = 0;
        if (!free_memory(&free_b))
            return false;
        if (free_b <= leave + kMinChunk)
            return true;
        size_t want = std::min(chunk, free_b - leave);
        want -= want % kMinChunk;
        if (want < kMinChunk)
            return true;
        void *p = nullptr;
        if (cudaMalloc(&p, want) == cudaSuccess) {
            held->push_back(p);
            *held_bytes += want;
            continue;
        }
        cudaGetLastError(); /* an allocation failure is not sticky: clear it */
        if (chunk <= kMinChunk)
            return true; /* fragmentation: this is as close as it gets */
        chunk /= 2;
    }
}

/* Sleep until a signal asks to stop or stdin reaches end of file. */
void wait_for_release()
{
    bool watch_stdin = true;
    while (!stop_requested) {
        struct pollfd pfd = {STDIN_FILENO, POLLIN, 0};
        int r = poll(&pfd, watch_stdin ? 1 : 0, 1000);
        if (r < 0 || r == 0)
            continue; /* EINTR (the signal sets the flag) or the timeout */
        if (pfd.revents & (POLLIN | POLLHUP)) {
            char buf[256];
            ssize_t n = read(STDIN_FILENO, buf, sizeof buf);
            if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN))
                return; /* end of file (or stdin unusable): release */
        } else if (pfd.revents & (POLLERR | POLLNVAL)) {
            watch_stdin = false; /* no stdin to watch: wait for a signal only */
        }
    }
}

} // namespace

int main(int argc, char **argv)
{
    long device = 0, leave_mb = 0;
    if (argc != 3 || !parse_number(argv[1], &device) || !parse_number(argv[2], &leave_mb)) {
        std::fprintf(stderr, "usage: hold_memory DEVICE LEAVE_MB\n"
                             "  holds device memory until about LEAVE_MB MiB are free on DEVICE,\n"
                             "  until SIGTERM or end of file on stdin\n");
        return 2;
    }

    struct sigaction sa = {};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, nullptr);
    sigaction(SIGINT, &sa, nullptr);

    cudaError_t err = cudaSetDevice((int)device);
    if (err == cudaSuccess)
        err = cudaFree(nullptr); /* create the context now, so its memory is counted */
    if (err != cudaSuccess) {
        std::fprintf(stderr, "hold_memory: device %ld: %s\n", device, cudaGetErrorString(err));
        return 1;
    }

    std::vector<void *> held;
    size_t held_bytes = 0, free_b = 0;
    if (!hold_until((size_t)leave_mb * kMiB, &held, &held_bytes) || !free_memory(&free_b))
        return 1;
    std::printf("holding %zu MB, %zu MB free\n", held_bytes / kMiB, free_b / kMiB);
    std::fflush(stdout);

    wait_for_release();

    for (void *p : held)
        cudaFree(p);
    std::printf("released %zu MB\n", held_bytes / kMiB);
    std::fflush(stdout);
    return 0;
}
