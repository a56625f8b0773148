/*
 * common.cu — the library's shared host helpers (common.cuh): CUDA errors
 * turned into a status and a message, the device check before an
 * allocation, and the choice of the device.
 */
#include <cstdio>
#include <string>

#include "common.cuh"

namespace cagra_gpu {

namespace {

/* Kept free beside our own buffers: the context, CUB scratch, fragmentation. */
constexpr uint64_t kHeadroom = 64ULL << 20;

std::string mib(uint64_t bytes)
{
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.1f MiB", bytes / 1048576.0);
    return buf;
}

} // namespace

[[noreturn]] void fail_cuda(cudaError_t err, const char *what)
{
    cudaGetLastError(); /* clear a non-sticky error so later calls can proceed */
    std::string msg = std::string(what) + ": " + cudaGetErrorString(err);
    switch (err) {
    case cudaErrorMemoryAllocation:
        fail(CAGRA_GPU_OUT_OF_MEMORY, "device out of memory in " + msg);
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorInitializationError:
    case cudaErrorInvalidDevice:
    case cudaErrorDevicesUnavailable:
        fail(CAGRA_GPU_NO_DEVICE, msg);
    default:
        fail(CAGRA_GPU_DEVICE_ERROR, msg);
    }
}

void require_free_memory(uint64_t need, const char *what)
{
    size_t free_b = 0, total_b = 0;
    check(cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo");
    if (need + kHeadroom > free_b)
        fail(CAGRA_GPU_OUT_OF_MEMORY, std::string(what) + " needs " + mib(need) + " of device memory, but only " +
                                          mib(free_b) + " of " + mib(total_b) + " are free");
}

void use_device(int device)
{
    int count = 0;
    cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess || count == 0) {
        cudaGetLastError();
        fail(CAGRA_GPU_NO_DEVICE,
             std::string("no CUDA device: ") + (err != cudaSuccess ? cudaGetErrorString(err) : "none found"));
    }
    if (device < 0 || device >= count)
        fail(CAGRA_GPU_INVALID_ARGUMENT,
             "device " + std::to_string(device) + " does not exist (" + std::to_string(count) + " present)");
    check(cudaSetDevice(device), "cudaSetDevice");
}

} // namespace cagra_gpu
