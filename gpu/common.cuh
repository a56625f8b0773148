/*
 * common.cuh — what every CUDA file of libcagra_gpu shares: the exception
 * that carries a cagra_gpu_status to the C boundary, checked CUDA calls,
 * an owning device buffer, the schedule of a host thread waiting for the
 * device, and small device helpers (ordered float keys, hashing).
 */
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>

#include "cagra_gpu.h"

namespace cagra_gpu {

constexpr uint32_t kInvalid = CAGRA_GPU_INVALID_NODE;

/* Thrown inside the library, caught in api.cu and turned into a status. */
struct Failure {
    cagra_gpu_status status;
    std::string message;
};

[[noreturn]] inline void fail(cagra_gpu_status status, std::string message)
{
    throw Failure{status, std::move(message)};
}

[[noreturn]] void fail_cuda(cudaError_t err, const char *what);

/* Stop a build whose caller set its cancel flag (cagra_gpu_build_params). */
inline void check_cancel(const cagra_gpu_build_params &params)
{
    if (params.cancel && *params.cancel)
        fail(CAGRA_GPU_CANCELLED, "the build was cancelled");
}

inline void check(cudaError_t err, const char *what)
{
    if (err != cudaSuccess)
        fail_cuda(err, what);
}

/* After a launch: a launch error now, an execution error at the next sync. */
inline void check_launch(const char *kernel)
{
    check(cudaGetLastError(), kernel);
}

inline uint64_t div_up(uint64_t a, uint64_t b)
{
    return (a + b - 1) / b;
}
inline uint64_t round_up(uint64_t a, uint64_t b)
{
    return div_up(a, b) * b;
}

/* Blocks of `block` threads for `threads` threads, capped: kernels launched
 * this way stride over what the grid does not cover. */
inline int grid_for(uint64_t threads, int block)
{
    return (int)std::min<uint64_t>(div_up(threads, block), 1u << 20);
}

__host__ __device__ inline uint32_t pow2_at_least(uint32_t x)
{
    uint32_t p = 1;
    while (p < x)
        p <<= 1;
    return p;
}

/* While one lives, no resident search kernel runs (search_resident.cuh):
 * device and page-locked allocations and frees may wait for the whole
 * device, which a kernel that never ends would make wait forever. */
class ResidentPause {
public:
    ResidentPause();
    ~ResidentPause();
    ResidentPause(const ResidentPause &) = delete;
    ResidentPause &operator=(const ResidentPause &) = delete;
};

/* Owning device allocation; an allocation failure becomes OUT_OF_MEMORY. */
template <class T>
class DeviceBuffer {
public:
    DeviceBuffer() = default;
    explicit DeviceBuffer(uint64_t count) { allocate(count); }
    ~DeviceBuffer() { release(); }
    DeviceBuffer(const DeviceBuffer &) = delete;
    DeviceBuffer &operator=(const DeviceBuffer &) = delete;
    DeviceBuffer(DeviceBuffer &&o) noexcept : ptr_(o.ptr_), count_(o.count_)
    {
        o.ptr_ = nullptr;
        o.count_ = 0;
    }
    DeviceBuffer &operator=(DeviceBuffer &&o) noexcept
    {
        if (this != &o) {
            release();
            std::swap(ptr_, o.ptr_);
            std::swap(count_, o.count_);
        }
        return *this;
    }

    void allocate(uint64_t count)
    {
        release();
        if (count == 0)
            return;
        ResidentPause pause;
        cudaError_t err = cudaMalloc(&ptr_, count * sizeof(T));
        if (err != cudaSuccess) {
            ptr_ = nullptr;
            /* the size, so that a build the up-front check let through but
             * that ran out later still says how much it asked for */
            char what[64];
            std::snprintf(what, sizeof what, "cudaMalloc of %.1f MiB", count * sizeof(T) / 1048576.0);
            fail_cuda(err, what);
        }
        count_ = count;
    }
    void release()
    {
        if (ptr_) {
            ResidentPause pause;
            cudaFree(ptr_);
        }
        ptr_ = nullptr;
        count_ = 0;
    }
    T *get() const { return ptr_; }
    uint64_t size() const { return count_; }
    uint64_t bytes() const { return count_ * sizeof(T); }

private:
    T *ptr_ = nullptr;
    uint64_t count_ = 0;
};

/* Page-locked host memory (cudaHostAlloc) for copies the device's copy
 * engine reads at full speed; allocated and freed with resident kernels
 * stopped, as device memory is. */
template <class T>
class PinnedBuffer {
public:
    explicit PinnedBuffer(uint64_t count)
    {
        ResidentPause pause;
        check(cudaHostAlloc(reinterpret_cast<void **>(&ptr_), count * sizeof(T), cudaHostAllocPortable),
              "allocating page-locked host memory");
    }
    ~PinnedBuffer()
    {
        ResidentPause pause;
        cudaFreeHost(ptr_);
    }
    PinnedBuffer(const PinnedBuffer &) = delete;
    PinnedBuffer &operator=(const PinnedBuffer &) = delete;
    T *get() const { return ptr_; }

private:
    T *ptr_ = nullptr;
};

/* Fails with OUT_OF_MEMORY, before anything is allocated, when `need`
 * bytes exceed what the device has free. */
void require_free_memory(uint64_t need, const char *what);

/* Grows b to at least count elements (checking the device has room first);
 * true when it was (re)allocated.  Scratch kept between calls. */
template <class T>
bool ensure(DeviceBuffer<T> &b, uint64_t count, const char *what)
{
    if (b.size() >= count)
        return false;
    b.release();
    require_free_memory(count * sizeof(T), what);
    b.allocate(count);
    return true;
}

/* Selects `device`, failing with NO_DEVICE / INVALID_ARGUMENT as fits. */
void use_device(int device);

/* An owned non-blocking stream (made while no resident kernel runs). */
struct Stream {
    cudaStream_t s = nullptr;
    Stream()
    {
        ResidentPause pause;
        check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
    }
    ~Stream()
    {
        if (s)
            cudaStreamDestroy(s);
    }
    Stream(const Stream &) = delete;
    Stream &operator=(const Stream &) = delete;
};

/* ---- device helpers ---- */

/* A float mapped to a uint32 whose unsigned order is the float order
 * (negative values too), so (key << 32 | id) sorts by distance, then id. */
__device__ inline uint32_t ordered_key(float f)
{
    uint32_t u = __float_as_uint(f);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

__device__ inline float key_to_float(uint32_t k)
{
    uint32_t u = (k & 0x80000000u) ? (k & 0x7FFFFFFFu) : ~k;
    return __uint_as_float(u);
}

/* The eight halves of a 16-byte load as floats, in order. */
__device__ inline void halves_to_floats(const uint4 &raw, float (&out)[8])
{
    const __half2 *h = reinterpret_cast<const __half2 *>(&raw);
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const float2 f = __half22float2(h[i]);
        out[2 * i] = f.x;
        out[2 * i + 1] = f.y;
    }
}

__host__ __device__ inline uint32_t hash32(uint32_t x)
{
    x ^= x >> 16;
    x *= 0x7feb352dU;
    x ^= x >> 15;
    x *= 0x846ca68bU;
    x ^= x >> 16;
    return x;
}

__host__ __device__ inline uint64_t splitmix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

/*
 * A host thread waiting for a search on the device: it spins for the time
 * of a short walk (a wake-up from a blocking wait, an interrupt and a
 * thread switch, costs tens of microseconds, a fifth of a lone 1,024-
 * dimension query's round trip), then yields its core, so that a busy host
 * leaves the cores to the backends, up to kBriefWait; beyond, the caller
 * blocks or sleeps.
 */
constexpr std::chrono::microseconds kSpinWait{200};
constexpr std::chrono::microseconds kBriefWait{1000};

inline void wait_step(std::chrono::steady_clock::duration waited)
{
    if (waited < kSpinWait) {
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#endif
    } else {
        sched_yield();
    }
}

} // namespace cagra_gpu
