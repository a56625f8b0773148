/*
 * dataset.cu — the build's copy of the data on the device: the host rows
 * scaled and converted to fp16 in chunks through two staging buffers, their
 * squared norms; and the fixed entry nodes: the node nearest the mean, then
 * farthest-point picks over a seeded sample.
 */
#include <algorithm>
#include <cstring>
#include <set>
#include <thread>
#include <vector>

#include "dataset.cuh"

namespace cagra_gpu {

namespace {

__global__ void to_half_kernel(const float *x, uint64_t n, uint32_t dim, uint32_t dim16, float scale, __half *out)
{
    uint64_t total = n * dim16;
    for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < total;
         i += (uint64_t)gridDim.x * blockDim.x) {
        uint64_t row = i / dim16;
        uint32_t col = (uint32_t)(i % dim16);
        out[i] = col < dim ? __float2half_rn(x[row * dim + col] * scale) : __float2half(0.0f);
    }
}

__global__ void norms_kernel(const __half *v, uint64_t n, uint32_t dim16, float *norms)
{
    /* a warp a row, striding: grid_for caps the grid (8,388,608 warps of 256-thread blocks) */
    const uint64_t warps = (uint64_t)gridDim.x * (blockDim.x / 32);
    const uint32_t lane = threadIdx.x & 31;
    for (uint64_t r = (blockIdx.x * (uint64_t)blockDim.x + threadIdx.x) / 32; r < n; r += warps) {
        float d = warp_sum_half(MetricSum::Products, v + r * dim16, v + r * dim16, dim16, lane);
        if (lane == 0)
            norms[r] = d;
    }
}

__global__ void centroid_kernel(const __half *v, uint64_t n, uint32_t dim16, float *sum)
{
    /* block: a slice of rows; thread: one feature column of that slice */
    uint64_t r0 = blockIdx.x * 256ULL, r1 = min(n, r0 + 256);
    for (uint32_t c = threadIdx.x; c < dim16; c += blockDim.x) {
        float s = 0.0f;
        for (uint64_t r = r0; r < r1; r++)
            s += __half2float(v[r * dim16 + c]);
        atomicAdd(&sum[c], s);
    }
}

__global__ void nearest_to_kernel(const __half *v, uint64_t n, uint32_t dim16, const float *sum, float inv_n,
                                  unsigned long long *best)
{
    const uint64_t warps = (uint64_t)gridDim.x * (blockDim.x / 32);
    const uint32_t lane = threadIdx.x & 31;
    for (uint64_t u = (blockIdx.x * (uint64_t)blockDim.x + threadIdx.x) / 32; u < n; u += warps) {
        float acc = 0.0f;
        for (uint32_t c = lane; c < dim16; c += 32) {
            float diff = __half2float(v[u * dim16 + c]) - sum[c] * inv_n;
            acc = fmaf(diff, diff, acc);
        }
        for (int o = 16; o > 0; o >>= 1)
            acc += __shfl_xor_sync(0xFFFFFFFFu, acc, o);
        if (lane == 0)
            atomicMin(best, ((unsigned long long)ordered_key(acc) << 32) | (uint32_t)u);
    }
}

/* One farthest-point step over the sample, a warp a sampled row, the whole
 * device at once (one CTA for every step took 1.15 s of a 1M x 1,024 build):
 * entry `step` is `first` or the sampled row that step - 1 found farthest
 * from the entries before it; its distance lowers each row's nearest
 * distance, and the farthest row is kept in best[step] as (ordered nearest
 * distance << 32 | ~sample index), so ties go to the lower index. */
constexpr uint32_t kFarthestThreads = 256;

__global__ void __launch_bounds__(kFarthestThreads)
    farthest_step_kernel(const __half *v, uint32_t dim16, MetricSum sum, const uint32_t *sample, uint32_t sample_count,
                         uint32_t first, uint32_t step, bool last, float *nearest, unsigned long long *best,
                         uint32_t *entries)
{
    __shared__ unsigned long long s_best[kFarthestThreads / 32];
    const uint32_t lane = threadIdx.x & 31, warp = threadIdx.x / 32;
    const uint32_t entry = step == 0 ? first : sample[~(uint32_t)best[step - 1]];
    if (blockIdx.x == 0 && threadIdx.x == 0)
        entries[step] = entry;
    if (last)
        return;
    const __half *e = v + (uint64_t)entry * dim16;
    unsigned long long my = 0;
    const uint32_t warps = gridDim.x * (kFarthestThreads / 32);
    for (uint32_t r = blockIdx.x * (kFarthestThreads / 32) + warp; r < sample_count; r += warps) {
        const float acc = warp_sum_half(sum, e, v + (uint64_t)sample[r] * dim16, dim16, lane);
        /* scaled data: the order is what matters (cosine: 1 - dot decreases with dot) */
        const float d = sum == MetricSum::Products ? -acc : acc;
        const float m = step == 0 ? d : fminf(nearest[r], d);
        if (lane == 0)
            nearest[r] = m;
        my = max(my, (unsigned long long)ordered_key(m) << 32 | (uint32_t)~r);
    }
    if (lane == 0)
        s_best[warp] = my;
    __syncthreads();
    if (threadIdx.x == 0) {
        for (uint32_t w = 1; w < kFarthestThreads / 32; w++)
            my = max(my, s_best[w]);
        atomicMax(&best[step], my);
    }
}

/* Runs part(t, threads) on up to `most` threads, one slice of about
 * `per_thread` items each out of `count`, the calling thread included. */
template <class F>
void on_host_threads(uint64_t count, uint64_t per_thread, uint32_t most, F part)
{
    const uint32_t threads = (uint32_t)std::max<uint64_t>(
        1, std::min<uint64_t>({std::max(1u, std::thread::hardware_concurrency()), most, count / per_thread}));
    std::vector<std::thread> pool;
    for (uint32_t t = 1; t < threads; t++)
        pool.emplace_back(part, t, threads);
    part(0u, threads);
    for (auto &th : pool)
        th.join();
}

/* The largest |x| of the host rows as float bits (finite < infinity < NaN
 * in unsigned order too): the scale must be known before the first row is
 * converted, and reading the rows here costs less than sending them to the
 * device twice. */
uint32_t host_max_abs_bits(const float *x, uint64_t count)
{
    std::vector<uint32_t> best(16, 0);
    on_host_threads(count, 1ull << 22, 16, [&](uint32_t t, uint32_t threads) {
        const uint64_t lo = count * t / threads, hi = count * (t + 1) / threads;
        uint32_t m = 0;
        for (uint64_t i = lo; i < hi; i++) {
            uint32_t b;
            std::memcpy(&b, &x[i], 4);
            m = std::max(m, b & 0x7FFFFFFFu);
        }
        best[t] = m;
    });
    return *std::max_element(best.begin(), best.end());
}

} // namespace

void make_half_dataset(const float *host, uint64_t n, uint32_t dim, HalfDataset &out, cudaStream_t stream)
{
    out.n = n;
    out.dim = dim;
    out.dim16 = (uint32_t)round_up(dim, 16);
    const uint32_t bits = host_max_abs_bits(host, n * dim);
    if (bits >= 0x7F800000u)
        fail(CAGRA_GPU_INVALID_ARGUMENT, "the data contains NaN or infinity");
    float maxabs_f;
    std::memcpy(&maxabs_f, &bits, 4);
    /* a power of two that brings the largest magnitude near 256: exact to apply,
     * and squares summed over the features stay far from fp16's range */
    int e = 0;
    if (maxabs_f > 0.0f)
        std::frexp(maxabs_f, &e);
    float scale = std::ldexp(1.0f, 8 - e);
    out.inv_scale = 1.0f / scale;
    out.inv_scale2 = 1.0f / (scale * scale);
    out.vectors.allocate(n * out.dim16);
    out.norms.allocate(n);
    /* Float32 rows go through staging buffers of upload_chunk_rows, so the
     * device never holds the whole set in float32 beside its fp16 copy.
     * Past one chunk they are copied by host threads into two page-locked
     * buffers in turn, so one chunk is sent while the next is copied (faster
     * than the driver's own copy of pageable memory). */
    const uint64_t chunk = std::min<uint64_t>(n, upload_chunk_rows(dim));
    const bool staged = chunk < n;
    DeviceBuffer<float> on_device[2];
    std::unique_ptr<PinnedBuffer<float>> pinned[2];
    cudaEvent_t sent[2] = {nullptr, nullptr};
    auto destroy_events = [&] {
        for (cudaEvent_t e : sent)
            if (e)
                cudaEventDestroy(e);
    };
    try {
        for (int b = 0; b < (staged ? 2 : 1); b++) {
            on_device[b].allocate(chunk * dim);
            if (staged) {
                pinned[b] = std::make_unique<PinnedBuffer<float>>(chunk * dim);
                check(cudaEventCreateWithFlags(&sent[b], cudaEventDisableTiming), "cudaEventCreate");
            }
        }
        for (uint64_t r0 = 0, i = 0; r0 < n; r0 += chunk, i++) {
            const uint64_t rows = std::min(chunk, n - r0);
            const int b = staged ? (int)(i & 1) : 0;
            const float *from = host + r0 * dim;
            if (staged) {
                /* the copy engine is done with this buffer's last chunk */
                check(cudaEventSynchronize(sent[b]), "copying the build data to the device");
                float *to = pinned[b]->get();
                const uint64_t count = rows * dim;
                on_host_threads(count, 1ull << 20, 8, [&](uint32_t t, uint32_t threads) {
                    const uint64_t lo = count * t / threads, hi = count * (t + 1) / threads;
                    std::memcpy(to + lo, from + lo, (hi - lo) * sizeof(float));
                });
                from = to;
            }
            check(cudaMemcpyAsync(on_device[b].get(), from, rows * dim * sizeof(float), cudaMemcpyHostToDevice, stream),
                  "copying the build data to the device");
            if (staged)
                check(cudaEventRecord(sent[b], stream), "cudaEventRecord");
            to_half_kernel<<<grid_for(rows * out.dim16, 256), 256, 0, stream>>>(
                on_device[b].get(), rows, dim, out.dim16, scale, out.vectors.get() + r0 * out.dim16);
            check_launch("to_half_kernel");
        }
        check(cudaStreamSynchronize(stream), "copying the build data to the device");
    } catch (...) {
        cudaStreamSynchronize(stream);
        destroy_events();
        throw;
    }
    destroy_events();
    norms_kernel<<<grid_for(n * 32, 256), 256, 0, stream>>>(out.vectors.get(), n, out.dim16, out.norms.get());
    check_launch("norms_kernel");
    check(cudaStreamSynchronize(stream), "converting the build data to fp16");
}

uint32_t central_node(const HalfDataset &data, cudaStream_t stream)
{
    DeviceBuffer<float> sum(data.dim16);
    DeviceBuffer<unsigned long long> best(1);
    check(cudaMemsetAsync(sum.get(), 0, data.dim16 * 4, stream), "cudaMemset");
    check(cudaMemsetAsync(best.get(), 0xFF, 8, stream), "cudaMemset");
    centroid_kernel<<<(unsigned)div_up(data.n, 256), 128, 0, stream>>>(data.vectors.get(), data.n, data.dim16,
                                                                       sum.get());
    check_launch("centroid_kernel");
    nearest_to_kernel<<<grid_for(data.n * 32, 256), 256, 0, stream>>>(data.vectors.get(), data.n, data.dim16, sum.get(),
                                                                      1.0f / (float)data.n, best.get());
    check_launch("nearest_to_kernel");
    unsigned long long key = 0;
    check(cudaMemcpyAsync(&key, best.get(), 8, cudaMemcpyDeviceToHost, stream), "cudaMemcpy");
    check(cudaStreamSynchronize(stream), "finding the central node");
    return (uint32_t)key;
}

std::vector<uint32_t> farthest_entry_nodes(const HalfDataset &data, cagra_gpu_metric metric, uint32_t first,
                                           uint64_t seed, uint32_t want, cudaStream_t stream,
                                           const std::vector<uint32_t> *pool)
{
    constexpr uint64_t kSampleSize = 8192;
    if (want <= 1)
        return {first};
    std::vector<uint32_t> sample;
    if (pool && !pool->empty()) {
        /* long-edge nodes: a search that starts there can leave the entry's
         * cluster at its first step */
        const uint64_t m = pool->size();
        for (uint64_t i = 0; i < std::min(kSampleSize, m); i++)
            sample.push_back(m <= kSampleSize ? (*pool)[i] : (*pool)[splitmix64(seed ^ 0xe7e7 ^ (i << 24)) % m]);
    } else {
        for (uint64_t i = 0; i < std::min(kSampleSize, data.n); i++)
            sample.push_back(data.n <= kSampleSize ? (uint32_t)i
                                                   : (uint32_t)(splitmix64(seed ^ 0xe7e7 ^ (i << 24)) % data.n));
    }
    const uint32_t count = (uint32_t)sample.size();
    DeviceBuffer<uint32_t> dsample(count), dentries(want);
    DeviceBuffer<float> nearest(count);
    DeviceBuffer<unsigned long long> best(want);
    check(cudaMemcpyAsync(dsample.get(), sample.data(), count * 4ull, cudaMemcpyHostToDevice, stream), "cudaMemcpy");
    check(cudaMemsetAsync(best.get(), 0, best.bytes(), stream), "cudaMemset");
    const uint32_t blocks = (uint32_t)div_up(count, kFarthestThreads / 32);
    for (uint32_t step = 0; step < want; step++) {
        farthest_step_kernel<<<blocks, kFarthestThreads, 0, stream>>>(
            data.vectors.get(), data.dim16, metric_sum(metric), dsample.get(), count, first, step, step + 1 == want,
            nearest.get(), best.get(), dentries.get());
        check_launch("farthest_step_kernel");
    }
    std::vector<uint32_t> picked(want);
    check(cudaMemcpyAsync(picked.data(), dentries.get(), want * 4ull, cudaMemcpyDeviceToHost, stream), "cudaMemcpy");
    check(cudaStreamSynchronize(stream), "choosing entry nodes");
    /* a pick that repeats an entry means every sampled row is one: stop there */
    std::vector<uint32_t> out;
    std::set<uint32_t> seen;
    for (uint32_t id : picked) {
        if (!seen.insert(id).second)
            break;
        out.push_back(id);
    }
    return out;
}

} // namespace cagra_gpu
