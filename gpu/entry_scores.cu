/*
 * entry_scores.cu — the product of a batch's queries with an index's fixed
 * entry rows on tensor cores (entry_scores.cuh says why).  A thread block
 * takes 16 queries and kScoreEntryTile entries: it converts a slice of the
 * queries' features to fp16 in shared memory, and each of its warps
 * multiplies it by the same slice of 64 entries read straight from global
 * memory (all of a batch's blocks read the same entry rows, which stay in
 * L2), slice after slice; the dots then become scores.
 */
#include <mma.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "entry_scores.cuh"
#include "metric.cuh"

namespace cagra_gpu {
namespace {

using namespace nvcuda;

constexpr uint32_t kQueryTile = 16;   /* queries per block: one fragment's rows */
constexpr uint32_t kSliceHalves = 256; /* features per slice of the staged queries */
constexpr uint32_t kSliceStride = kSliceHalves + 8;
constexpr uint32_t kWarps = 4;
constexpr uint32_t kWarpEntries = kScoreEntryTile / kWarps; /* four 16-wide fragments */
constexpr uint32_t kScoreStride = kScoreEntryTile + 4;
constexpr float kHalfMax = 65504.0f;

struct ScoreArgs {
    const __half *rows;
    const float *norms;
    uint32_t count, stride;
    float scale;
    bool l2;
    const float *queries;
    uint32_t query_stride, nq;
    float *scores;
};

__global__ void __launch_bounds__(kWarps * 32) score_entries_kernel(ScoreArgs a)
{
    __shared__ __align__(32) __half slice[kQueryTile][kSliceStride];
    __shared__ __align__(32) float dots[kQueryTile][kScoreStride];
    const uint32_t warp = threadIdx.x / 32;
    const uint32_t e0 = blockIdx.x * kScoreEntryTile + warp * kWarpEntries;
    for (uint32_t q0 = blockIdx.y * kQueryTile; q0 < a.nq; q0 += gridDim.y * kQueryTile) {
        wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[kWarpEntries / 16];
#pragma unroll
        for (uint32_t t = 0; t < kWarpEntries / 16; t++)
            wmma::fill_fragment(acc[t], 0.0f);
        for (uint32_t k0 = 0; k0 < a.stride; k0 += kSliceHalves) {
            const uint32_t width = min(kSliceHalves, a.stride - k0);
            __syncthreads(); /* the last slice's fragments are loaded */
            for (uint32_t i = threadIdx.x; i < kQueryTile * width; i += blockDim.x) {
                const uint32_t r = i / width, c = i % width, q = q0 + r, d = k0 + c;
                float x = q < a.nq && d < a.query_stride ? a.queries[(uint64_t)q * a.query_stride + d] : 0.0f;
                slice[r][c] = __float2half(fminf(fmaxf(x * a.scale, -kHalfMax), kHalfMax));
            }
            __syncthreads();
            for (uint32_t kk = 0; kk < width; kk += 16) {
                wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> fa;
                wmma::load_matrix_sync(fa, &slice[0][kk], kSliceStride);
#pragma unroll
                for (uint32_t t = 0; t < kWarpEntries / 16; t++) {
                    wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> fb;
                    wmma::load_matrix_sync(fb, a.rows + (uint64_t)(e0 + 16 * t) * a.stride + k0 + kk, a.stride);
                    wmma::mma_sync(acc[t], fa, fb, acc[t]);
                }
            }
        }
#pragma unroll
        for (uint32_t t = 0; t < kWarpEntries / 16; t++)
            wmma::store_matrix_sync(&dots[0][warp * kWarpEntries + 16 * t], acc[t], kScoreStride,
                                    wmma::mem_row_major);
        __syncthreads();
        for (uint32_t i = threadIdx.x; i < kQueryTile * kScoreEntryTile; i += blockDim.x) {
            const uint32_t r = i / kScoreEntryTile, c = i % kScoreEntryTile;
            const uint32_t q = q0 + r, e = blockIdx.x * kScoreEntryTile + c;
            if (q < a.nq && e < a.count)
                a.scores[(uint64_t)q * a.count + e] = a.l2 ? a.norms[e] - 2.0f * dots[r][c] : -dots[r][c];
        }
    }
}

/* The host row i of an fp32 or fp16 set as floats. */
float host_value(const void *vectors, cagra_gpu_dtype dtype, uint64_t i)
{
    if (dtype == CAGRA_GPU_FLOAT32)
        return static_cast<const float *>(vectors)[i];
    __half_raw raw;
    raw.x = static_cast<const uint16_t *>(vectors)[i];
    return __half2float(__half(raw));
}

} // namespace

uint64_t entry_rows_bytes(uint32_t count, uint32_t dim)
{
    return round_up(count, kScoreEntryTile) * round_up(dim, 16) * sizeof(__half) + count * sizeof(float);
}

void load_entry_rows(EntryRows &out, const void *vectors, cagra_gpu_dtype dtype, uint32_t dim, const uint32_t *entries,
                     uint32_t count, cudaStream_t stream)
{
    out.count = count;
    out.stride = (uint32_t)round_up(dim, 16);
    if (count == 0)
        return;
    const uint64_t padded = round_up(count, kScoreEntryTile);
    std::vector<float> gathered((uint64_t)count * dim);
    float max_abs = 0.0f;
    for (uint32_t e = 0; e < count; e++)
        for (uint32_t d = 0; d < dim; d++) {
            const float x = host_value(vectors, dtype, (uint64_t)entries[e] * dim + d);
            gathered[(uint64_t)e * dim + d] = x;
            max_abs = std::max(max_abs, std::fabs(x));
        }
    out.scale = max_abs > 0.0f && std::isfinite(max_abs) ? 1.0f / max_abs : 1.0f;
    std::vector<__half> rows(padded * out.stride, __float2half(0.0f));
    std::vector<float> norms(count);
    for (uint32_t e = 0; e < count; e++) {
        double norm = 0.0;
        for (uint32_t d = 0; d < dim; d++) {
            const __half h = __float2half(gathered[(uint64_t)e * dim + d] * out.scale);
            rows[(uint64_t)e * out.stride + d] = h;
            norm += (double)__half2float(h) * __half2float(h);
        }
        norms[e] = (float)norm;
    }
    out.rows.allocate(rows.size());
    out.norms.allocate(count);
    check(cudaMemcpyAsync(out.rows.get(), rows.data(), rows.size() * sizeof(__half), cudaMemcpyHostToDevice, stream),
          "copying the entry rows to the device");
    check(cudaMemcpyAsync(out.norms.get(), norms.data(), count * sizeof(float), cudaMemcpyHostToDevice, stream),
          "copying the entry rows to the device");
    /* the host vectors go out of scope before the copies may have run */
    check(cudaStreamSynchronize(stream), "copying the entry rows to the device");
}

void score_entries(const EntryRows &rows, cagra_gpu_metric metric, const float *queries, uint32_t query_stride,
                   uint32_t nq, float *scores, cudaStream_t stream)
{
    const ScoreArgs a{rows.rows.get(), rows.norms.get(), rows.count, rows.stride,  rows.scale,
                      metric == CAGRA_GPU_L2, queries,     query_stride, nq,          scores};
    const dim3 grid((uint32_t)div_up(rows.count, kScoreEntryTile),
                    (uint32_t)std::min<uint64_t>(div_up(nq, kQueryTile), 65535));
    score_entries_kernel<<<grid, kWarps * 32, 0, stream>>>(a);
    check_launch("score_entries_kernel");
}

} // namespace cagra_gpu
