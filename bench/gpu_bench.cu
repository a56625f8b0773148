/*
 * gpu_bench.cu — the H200 benchmark of libcagra_gpu on a texmex-format set
 * (bench/gen.py): GPU build seconds, CPU build seconds (core build_graph),
 * exact brute-force search on the GPU (cuBLAS GEMM + a warp top-k), and the
 * GPU CAGRA search's recall@10 and queries/s for batches of 1, 100 and
 * 10,000 over an itopk sweep, and small batches from several threads at
 * once (one search context each: what the worker's concurrent batches get).
 * Prints a markdown table; figures, not asserts.  Each point repeats its
 * queries for at least 0.3 s.  --metric ip for
 * inner-product ground truth (normalised embeddings, bench/text_dataset.py).
 * --termination T[,T...]: a GPU build at each NN-descent termination, with
 * its build time, the navigation probe of its graph (1,024 rows searched
 * for themselves, as the build's own probe does) and its recall curve
 * (batch 10,000); the other figures use the first termination's graph.
 * Each build's steps, their seconds and whether it added long edges are
 * printed from its cagra_gpu_build_result.
 * --ctas N: every search with N thread blocks per query (0, the default:
 * the library chooses from the batch size; 1: one block per query).
 * --entries E[,E...]: after the build, the fp16 index loaded with only the
 * first E of the build's entry nodes (0: the random entries alone),
 * recall@10, queries/s, and the distances and iterations of a query's
 * walk at batch 10,000 for itopk 32, 40, 48 and 64: what the fixed entries
 * cost and give.  --only entries: the build and that sweep, nothing else.
 * The build line gives the build's peak device memory: free memory sampled
 * every 200 us through the build, against the free memory before it.
 * --only graphs: the GPU build and the core's CPU build (--cpu-build
 * THREADS, 16 when not given) of the same set, and the recall@10 of each
 * graph searched on the GPU (fp32 vectors, batch 10,000) at itopk 16 to
 * 128, side by side: how far the CPU-built graph is from the GPU-built one.
 * --only latency: after the build, only the small-batch latency sweep
 * (batches 1, 4, 16 and 64, one block per query at search_width 1 and 8
 * against 4 to 32 blocks per query at search_width 1 to 8 and the
 * library's choice): ms per launch on the host and on the device,
 * queries/s, recall@10.
 * --only load: after the build, only batches of 10 from 1, 4 and 8 threads
 * at once (k 10 at itopk 32, and k = itopk = 128 as a filtered scan's round
 * asks) with the library's choice of blocks per query against 1 to 16.
 *
 * usage: gpu_bench DIR [--cpu-build THREADS] [--metric l2|ip] [--termination T[,T...]] [--ctas N]
 *                  [--entries E[,E...]] [--only latency|entries|graphs|load] [--out FILE]
 */
#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_profiler_api.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "build.h"
#include "cagra_gpu.h"
#include "parallel.h"
#include "search.h"

namespace {

/* --ctas: ctas_per_query of every search but the latency sweep's */
uint32_t g_ctas = 0;

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t)
{
    return std::chrono::duration<double>(Clock::now() - t).count();
}

void die(const std::string &msg)
{
    std::fprintf(stderr, "gpu_bench: %s\n", msg.c_str());
    std::exit(1);
}

#define CUDA_OK(x)                                                                                                     \
    do {                                                                                                               \
        cudaError_t e_ = (x);                                                                                          \
        if (e_ != cudaSuccess)                                                                                         \
            die(std::string(#x) + ": " + cudaGetErrorString(e_));                                                      \
    } while (0)

#define GPU_OK(x)                                                                                                      \
    do {                                                                                                               \
        if ((x) != CAGRA_GPU_OK)                                                                                       \
            die(std::string(#x) + ": " + cagra_gpu_last_error());                                                      \
    } while (0)

template <class T>
std::vector<T> read_vecs(const std::string &path, uint32_t &dim, uint64_t &rows)
{
    FILE *f = std::fopen(path.c_str(), "rb");
    if (!f)
        die("cannot open " + path);
    int32_t d = 0;
    if (std::fread(&d, 4, 1, f) != 1)
        die("empty " + path);
    std::fseek(f, 0, SEEK_END);
    long size = std::ftell(f);
    std::fseek(f, 0, SEEK_SET);
    dim = (uint32_t)d;
    rows = (uint64_t)size / (4 + 4ull * dim);
    std::vector<T> out(rows * dim);
    std::vector<int32_t> buf(dim + 1);
    for (uint64_t i = 0; i < rows; i++) {
        if (std::fread(buf.data(), 4, dim + 1, f) != dim + 1)
            die("short read in " + path);
        std::memcpy(&out[i * dim], buf.data() + 1, 4ull * dim);
    }
    std::fclose(f);
    return out;
}

double recall_at(const std::vector<uint32_t> &ids, uint32_t k, const std::vector<int32_t> &gt, uint32_t gt_dim,
                 uint32_t nq)
{
    uint64_t hit = 0;
    for (uint32_t q = 0; q < nq; q++) {
        std::set<int32_t> t(&gt[(uint64_t)q * gt_dim], &gt[(uint64_t)q * gt_dim] + k);
        for (uint32_t j = 0; j < k; j++)
            hit += t.count((int32_t)ids[(uint64_t)q * k + j]);
    }
    return (double)hit / (double)(nq * k);
}

/* The build's navigation probe (gpu/long_edges.cu) through the C API:
 * 1,024 seeded rows searched for their own vectors with the default search
 * settings; a miss when the first result is neither the row nor at least as
 * close (a duplicate).  Fraction missed. */
double probe_miss_rate(cagra_gpu_index *ix, const std::vector<float> &base, uint64_t n, uint32_t dim,
                       cagra_gpu_metric metric, uint64_t seed)
{
    const uint32_t probes = 1024;
    std::vector<uint32_t> rows(probes);
    std::vector<float> q((uint64_t)probes * dim);
    for (uint32_t p = 0; p < probes; p++) {
        rows[p] = (uint32_t)(cagra::detail::mix64(seed ^ 0x9e0beULL ^ cagra::detail::mix64(p)) % n);
        std::memcpy(&q[(uint64_t)p * dim], &base[(uint64_t)rows[p] * dim], 4ull * dim);
    }
    cagra_gpu_search_params sp;
    cagra_gpu_default_search_params(&sp);
    std::vector<uint32_t> ids(probes);
    std::vector<float> dist(probes);
    GPU_OK(cagra_gpu_search(ix, q.data(), probes, 1, &sp, nullptr, ids.data(), dist.data()));
    uint32_t missed = 0;
    for (uint32_t p = 0; p < probes; p++) {
        if (ids[p] == rows[p])
            continue;
        float self = 0.0f, tol = 0.0f;
        if (metric != CAGRA_GPU_L2) {
            float dot = 0.0f;
            for (uint32_t j = 0; j < dim; j++)
                dot += q[(uint64_t)p * dim + j] * q[(uint64_t)p * dim + j];
            self = metric == CAGRA_GPU_INNER_PRODUCT ? -dot : 1.0f - dot;
            tol = 1e-4f * std::fabs(dot);
        }
        missed += !(dist[p] <= self + tol);
    }
    return (double)missed / probes;
}

/* ---- exact search: C = B Q^T by cuBLAS, then a warp keeps each query's top 10 ---- */

constexpr int kTop = 10;

__global__ void norms_kernel(const float *b, uint64_t n, uint32_t dim, float *out)
{
    uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x;
    if (i >= n)
        return;
    float s = 0.0f;
    for (uint32_t j = 0; j < dim; j++)
        s = fmaf(b[i * dim + j], b[i * dim + j], s);
    out[i] = s;
}

/* dots: nq rows of `cols` (query-major); best: nq x kTop (dist, id), running */
__global__ void topk_kernel(const float *dots, uint32_t nq, uint32_t cols, uint64_t col0, const float *norms,
                            bool inner_product, float *best_d, uint32_t *best_i)
{
    uint32_t q = (blockIdx.x * blockDim.x + threadIdx.x) / 32, lane = threadIdx.x & 31;
    if (q >= nq)
        return;
    float d[kTop];
    uint32_t id[kTop];
#pragma unroll
    for (int t = 0; t < kTop; t++) {
        d[t] = lane == 0 ? best_d[q * kTop + t] : INFINITY;
        id[t] = lane == 0 ? best_i[q * kTop + t] : 0xFFFFFFFFu;
    }
    const float *row = dots + (uint64_t)q * cols;
    for (uint32_t c = lane; c < cols; c += 32) {
        float v = inner_product ? -row[c] : norms[col0 + c] - 2.0f * row[c];
        if (v < d[kTop - 1]) {
            d[kTop - 1] = v;
            id[kTop - 1] = (uint32_t)(col0 + c);
#pragma unroll
            for (int t = kTop - 1; t > 0; t--)
                if (d[t] < d[t - 1]) {
                    float td = d[t];
                    d[t] = d[t - 1];
                    d[t - 1] = td;
                    uint32_t ti = id[t];
                    id[t] = id[t - 1];
                    id[t - 1] = ti;
                }
        }
    }
    /* merge the 32 sorted lists: kTop rounds of warp argmin over the heads */
    for (int r = 0; r < kTop; r++) {
        float head = d[0];
        float m = head;
        for (int o = 16; o > 0; o >>= 1)
            m = fminf(m, __shfl_xor_sync(0xFFFFFFFFu, m, o));
        uint32_t owner = __ffs(__ballot_sync(0xFFFFFFFFu, head == m)) - 1;
        uint32_t win = __shfl_sync(0xFFFFFFFFu, id[0], owner);
        if (lane == 0) {
            best_d[q * kTop + r] = m;
            best_i[q * kTop + r] = win;
        }
        if (lane == owner) {
#pragma unroll
            for (int t = 0; t < kTop - 1; t++) {
                d[t] = d[t + 1];
                id[t] = id[t + 1];
            }
            d[kTop - 1] = INFINITY;
        }
    }
}

struct BruteForce {
    double seconds = 0;
    std::vector<uint32_t> ids;
};

BruteForce brute_force(const float *dbase, uint64_t n, uint32_t dim, const std::vector<float> &queries, uint32_t nq,
                       bool inner_product)
{
    cublasHandle_t h;
    if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS)
        die("cublasCreate");
    const uint64_t chunk = 1 << 16;
    float *dq, *dots, *norms, *bd;
    uint32_t *bi;
    CUDA_OK(cudaMalloc(&dq, (uint64_t)nq * dim * 4));
    CUDA_OK(cudaMalloc(&dots, (uint64_t)nq * chunk * 4));
    CUDA_OK(cudaMalloc(&norms, n * 4));
    CUDA_OK(cudaMalloc(&bd, (uint64_t)nq * kTop * 4));
    CUDA_OK(cudaMalloc(&bi, (uint64_t)nq * kTop * 4));
    norms_kernel<<<(unsigned)((n + 255) / 256), 256>>>(dbase, n, dim, norms);
    CUDA_OK(cudaDeviceSynchronize());
    BruteForce out;
    for (int rep = 0; rep < 2; rep++) { /* the first run warms cuBLAS up */
        auto t0 = Clock::now();
        CUDA_OK(cudaMemcpy(dq, queries.data(), (uint64_t)nq * dim * 4, cudaMemcpyHostToDevice));
        std::vector<float> inf((uint64_t)nq * kTop, INFINITY);
        CUDA_OK(cudaMemcpy(bd, inf.data(), inf.size() * 4, cudaMemcpyHostToDevice));
        for (uint64_t c0 = 0; c0 < n; c0 += chunk) {
            uint32_t cols = (uint32_t)std::min<uint64_t>(chunk, n - c0);
            const float one = 1.0f, zero = 0.0f;
            /* column-major: dots (cols x nq) = B_chunk^T(cols x dim) * Q(dim x nq) */
            if (cublasSgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, cols, nq, dim, &one, dbase + c0 * dim, dim, dq, dim, &zero,
                            dots, cols) != CUBLAS_STATUS_SUCCESS)
                die("cublasSgemm");
            topk_kernel<<<(nq * 32 + 255) / 256, 256>>>(dots, nq, cols, c0, norms, inner_product, bd, bi);
        }
        CUDA_OK(cudaDeviceSynchronize());
        out.ids.resize((uint64_t)nq * kTop);
        CUDA_OK(cudaMemcpy(out.ids.data(), bi, out.ids.size() * 4, cudaMemcpyDeviceToHost));
        out.seconds = seconds_since(t0);
    }
    cudaFree(dq);
    cudaFree(dots);
    cudaFree(norms);
    cudaFree(bd);
    cudaFree(bi);
    cublasDestroy(h);
    return out;
}

struct Row {
    uint32_t itopk, batch;
    double recall, qps, latency_ms;
    double distances, iterations; /* a query's, in the timed batches walked by one CTA a query (else 0) */
};

/* Runs the 1000 queries (tiled up to the batch size) in batches; recall
 * over the first nq results, throughput over every query sent. */
Row sweep_point(cagra_gpu_index *ix, const std::vector<float> &queries, uint32_t nq, uint32_t dim,
                const std::vector<int32_t> &gt, uint32_t gt_dim, uint32_t itopk, uint32_t batch,
                uint32_t search_width = 1)
{
    cagra_gpu_search_params sp;
    cagra_gpu_default_search_params(&sp);
    sp.itopk_size = itopk;
    sp.search_width = search_width;
    sp.ctas_per_query = g_ctas;
    const uint32_t k = 10;
    uint32_t total = std::max(batch, nq);
    std::vector<float> q((uint64_t)total * dim);
    for (uint32_t i = 0; i < total; i++)
        std::memcpy(&q[(uint64_t)i * dim], &queries[(uint64_t)(i % nq) * dim], 4ull * dim);
    std::vector<uint32_t> ids((uint64_t)total * k);
    std::vector<float> dist((uint64_t)total * k);
    GPU_OK(
        cagra_gpu_search(ix, q.data(), std::min(batch, total), k, &sp, nullptr, ids.data(), dist.data())); /* warm-up */
    /* the tiled queries again until 0.3 s have passed: one batch of 10,000
     * is a few milliseconds, too short for the clocks to settle (the same
     * point measured once differed by 1.6x between two machines) */
    std::vector<double> lat;
    uint64_t sent = 0;
    cagra_gpu_search_stats before, after;
    GPU_OK(cagra_gpu_index_search_stats(ix, &before));
    auto t0 = Clock::now();
    do {
        for (uint32_t s = 0; s < total; s += batch) {
            uint32_t b = std::min(batch, total - s);
            auto t1 = Clock::now();
            GPU_OK(cagra_gpu_search(ix, &q[(uint64_t)s * dim], b, k, &sp, nullptr, &ids[(uint64_t)s * k],
                                    &dist[(uint64_t)s * k]));
            lat.push_back(seconds_since(t1));
        }
        sent += total;
    } while (seconds_since(t0) < 0.3);
    double secs = seconds_since(t0);
    GPU_OK(cagra_gpu_index_search_stats(ix, &after));
    std::sort(lat.begin(), lat.end());
    Row r;
    const double walked = (double)(after.queries - before.queries);
    r.distances = walked ? (after.distances - before.distances) / walked : 0.0;
    r.iterations = walked ? (after.iterations - before.iterations) / walked : 0.0;
    r.itopk = itopk;
    r.batch = batch;
    r.recall = recall_at(ids, k, gt, gt_dim, nq);
    r.qps = sent / secs;
    r.latency_ms = lat[lat.size() / 2] * 1e3;
    return r;
}

/* `threads` threads, each with its own search context, each sending the
 * queries (tiled to `per_thread` queries) in batches of `batch`, asking k
 * results a query with `ctas` blocks per query; recall@10 of the first ten. */
Row concurrent_point(cagra_gpu_index *ix, const std::vector<float> &queries, uint32_t nq, uint32_t dim,
                     const std::vector<int32_t> &gt, uint32_t gt_dim, uint32_t itopk, uint32_t batch, uint32_t threads,
                     uint32_t per_thread, uint32_t k = 10, uint32_t ctas = g_ctas)
{
    cagra_gpu_search_params sp;
    cagra_gpu_default_search_params(&sp);
    sp.itopk_size = itopk;
    sp.ctas_per_query = ctas;
    std::vector<float> q((uint64_t)per_thread * dim);
    for (uint32_t i = 0; i < per_thread; i++)
        std::memcpy(&q[(uint64_t)i * dim], &queries[(uint64_t)(i % nq) * dim], 4ull * dim);
    std::vector<std::vector<uint32_t>> ids(threads, std::vector<uint32_t>((uint64_t)per_thread * k));
    std::vector<cagra_gpu_search_context *> ctx(threads);
    for (auto &c : ctx)
        GPU_OK(cagra_gpu_search_context_create(0, &c));
    auto work = [&](uint32_t t) {
        std::vector<float> dist((uint64_t)batch * k);
        for (uint32_t s = 0; s < per_thread; s += batch) {
            uint32_t b = std::min(batch, per_thread - s);
            GPU_OK(cagra_gpu_search_in(ctx[t], ix, &q[(uint64_t)s * dim], b, k, &sp, nullptr, &ids[t][(uint64_t)s * k],
                                       dist.data()));
        }
    };
    work(0); /* warm-up: every context's buffers grow once */
    for (uint32_t t = 1; t < threads; t++)
        work(t);
    auto t0 = Clock::now();
    std::vector<std::thread> pool;
    for (uint32_t t = 0; t < threads; t++)
        pool.emplace_back(work, t);
    for (auto &th : pool)
        th.join();
    double secs = seconds_since(t0);
    for (auto *c : ctx)
        cagra_gpu_search_context_free(c);
    Row r;
    r.itopk = itopk;
    r.batch = batch;
    const uint32_t judged = std::min(nq, per_thread);
    std::vector<uint32_t> first10((uint64_t)judged * 10);
    for (uint32_t q = 0; q < judged; q++)
        std::copy_n(&ids[0][(uint64_t)q * k], 10, &first10[(uint64_t)q * 10]);
    r.recall = recall_at(first10, 10, gt, gt_dim, judged);
    r.qps = (double)threads * per_thread / secs;
    r.latency_ms = 0;
    return r;
}

struct LatencyRow {
    double recall, qps, host_ms, device_ms;
};

/* The 1000 queries (tiled up to the batch) in launches of `batch` through
 * one created context, one launch at a time: medians of each launch's host
 * time and of its device time (copies and kernel), queries/s over all. */
LatencyRow latency_point(cagra_gpu_index *ix, cagra_gpu_search_context *ctx, const std::vector<float> &queries,
                         uint32_t nq, uint32_t dim, const std::vector<int32_t> &gt, uint32_t gt_dim, uint32_t itopk,
                         uint32_t batch, uint32_t width, uint32_t ctas)
{
    cagra_gpu_search_params sp;
    cagra_gpu_default_search_params(&sp);
    sp.itopk_size = itopk;
    sp.search_width = width;
    sp.ctas_per_query = ctas;
    const uint32_t k = 10, total = std::max(batch, nq);
    std::vector<float> q((uint64_t)total * dim);
    for (uint32_t i = 0; i < total; i++)
        std::memcpy(&q[(uint64_t)i * dim], &queries[(uint64_t)(i % nq) * dim], 4ull * dim);
    std::vector<uint32_t> ids((uint64_t)total * k);
    std::vector<float> dist((uint64_t)total * k);
    GPU_OK(cagra_gpu_search_in(ctx, ix, q.data(), batch, k, &sp, nullptr, ids.data(), dist.data())); /* warm-up */
    std::vector<double> host, device;
    auto t0 = Clock::now();
    for (uint32_t s = 0; s < total; s += batch) {
        const uint32_t b = std::min(batch, total - s);
        auto t1 = Clock::now();
        GPU_OK(cagra_gpu_search_in(ctx, ix, &q[(uint64_t)s * dim], b, k, &sp, nullptr, &ids[(uint64_t)s * k],
                                   &dist[(uint64_t)s * k]));
        host.push_back(seconds_since(t1) * 1e3);
        device.push_back(cagra_gpu_search_context_device_ms(ctx));
    }
    const double secs = seconds_since(t0);
    std::sort(host.begin(), host.end());
    std::sort(device.begin(), device.end());
    return {recall_at(ids, k, gt, gt_dim, nq), total / secs, host[host.size() / 2], device[device.size() / 2]};
}

/* Small batches: one thread block per query (search_width 1, and 8 as the
 * worker sends small batches) against several blocks per query. */
void latency_sweep(cagra_gpu_index *ix, const std::vector<float> &queries, uint32_t nq, uint32_t dim,
                   const std::vector<int32_t> &gt, uint32_t gt_dim, const std::function<void(const char *)> &emit)
{
    cagra_gpu_search_context *ctx = nullptr;
    GPU_OK(cagra_gpu_search_context_create(0, &ctx));
    emit("| itopk | batch | blocks per query | search_width | recall@10 | ms per launch | device ms | queries/s |\n"
         "|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    struct Mode {
        uint32_t ctas, width;
    };
    const Mode modes[] = {{1, 1},  {1, 8},  {4, 4},  {4, 8},  {8, 1},  {8, 2}, {8, 4}, {8, 8},
                          {16, 1}, {16, 2}, {16, 4}, {16, 8}, {32, 2}, {0, 1}, {0, 8}};
    char line[256];
    for (uint32_t itopk : {32u, 64u, 128u})
        for (uint32_t batch : {1u, 4u, 16u, 64u})
            for (const Mode &m : modes) {
                const LatencyRow r =
                    latency_point(ix, ctx, queries, nq, dim, gt, gt_dim, itopk, batch, m.width, m.ctas);
                char ctas[16];
                std::snprintf(ctas, sizeof ctas, m.ctas ? "%u" : "auto", m.ctas);
                std::snprintf(line, sizeof line, "| %u | %u | %s | %u | %.4f | %.3f | %.3f | %.0f |\n", itopk, batch,
                              ctas, m.width, r.recall, r.host_ms, r.device_ms, r.qps);
                emit(line);
            }
    emit("\n");
    cagra_gpu_search_context_free(ctx);
}

/* Small batches from several threads at once, as the worker's concurrent
 * batches send them: blocks per query chosen by the library against fixed
 * counts, for the plain first round (k 10, itopk 32) and a filtered scan's
 * post-filtered round (k = itopk = 128).  Does the library's choice, made
 * per batch, still pay when other batches share the device? */
void load_sweep(cagra_gpu_index *ix, const std::vector<float> &queries, uint32_t nq, uint32_t dim,
                const std::vector<int32_t> &gt, uint32_t gt_dim, const std::function<void(const char *)> &emit)
{
    emit("| itopk | k | batch | threads | blocks per query | recall@10 | queries/s |\n"
         "|---:|---:|---:|---:|---:|---:|---:|\n");
    struct Round {
        uint32_t itopk, k;
    };
    char line[256];
    for (const Round &rd : {Round{32, 10}, Round{128, 128}})
        for (uint32_t threads : {1u, 4u, 8u})
            for (uint32_t ctas : {0u, 1u, 2u, 4u, 8u, 16u}) {
                const uint32_t batch = 10;
                const Row r = concurrent_point(ix, queries, nq, dim, gt, gt_dim, rd.itopk, batch, threads,
                                               batch * 200, rd.k, ctas);
                char c[16];
                std::snprintf(c, sizeof c, ctas ? "%u" : "auto", ctas);
                std::snprintf(line, sizeof line, "| %u | %u | %u | %u | %s | %.4f | %.0f |\n", rd.itopk, rd.k, batch,
                              threads, c, r.recall, r.qps);
                emit(line);
            }
    emit("\n");
}

/* The most device memory in use, over what was in use when it started,
 * while it lives: cudaMemGetInfo sampled every 200 us by a thread. */
class PeakMemory {
  public:
    PeakMemory()
    {
        size_t free = 0, total = 0;
        CUDA_OK(cudaMemGetInfo(&free, &total));
        start_free_ = free;
        least_free_ = free;
        sampler_ = std::thread([this] {
            CUDA_OK(cudaSetDevice(0));
            while (!stop_.load()) {
                size_t f = 0, t = 0;
                if (cudaMemGetInfo(&f, &t) == cudaSuccess)
                    least_free_ = std::min(least_free_.load(), f);
                std::this_thread::sleep_for(std::chrono::microseconds(200));
            }
        });
    }
    /* bytes, once the work is done */
    uint64_t stop()
    {
        stop_ = true;
        sampler_.join();
        return start_free_ - least_free_.load();
    }

  private:
    size_t start_free_;
    std::atomic<size_t> least_free_;
    std::atomic<bool> stop_{false};
    std::thread sampler_;
};

/* The fp16 index with only the first E entry nodes, for each E. */
void entries_sweep(const std::vector<__half> &base16, uint64_t n, uint32_t dim, const std::vector<uint32_t> &graph,
                   uint32_t degree, cagra_gpu_metric metric, const std::vector<uint32_t> &entries,
                   const std::vector<uint32_t> &counts, const std::vector<float> &queries, uint32_t nq,
                   const std::vector<int32_t> &gt, uint32_t gt_dim, const std::function<void(const char *)> &emit)
{
    cagra_gpu_search_params sp;
    cagra_gpu_default_search_params(&sp);
    char line[256];
    std::snprintf(line, sizeof line,
                  "Fixed entry nodes (fp16 vectors, batch 10,000, plus %u random entries; the build gave %zu):\n\n"
                  "| entry nodes | itopk | recall@10 | q/s | distances a query | iterations a query |\n"
                  "|---:|---:|---:|---:|---:|---:|\n",
                  sp.random_entries, entries.size());
    emit(line);
    for (uint32_t e : counts) {
        e = std::min<uint32_t>(e, (uint32_t)entries.size());
        cagra_gpu_index *ix = nullptr;
        GPU_OK(cagra_gpu_index_load(0, base16.data(), CAGRA_GPU_FLOAT16, n, dim, graph.data(), degree, metric,
                                    entries.data(), e, &ix));
        for (uint32_t itopk : {32u, 40u, 48u, 64u}) {
            Row r = sweep_point(ix, queries, nq, dim, gt, gt_dim, itopk, 10000);
            std::snprintf(line, sizeof line, "| %u | %u | %.4f | %.0f | %.0f | %.1f |\n", e, itopk, r.recall, r.qps,
                          r.distances, r.iterations);
            emit(line);
        }
        cagra_gpu_index_free(ix);
    }
    emit("\n");
}

/* CAGRA_BENCH_GRAPH=FILE: the graph and entries of this run go to FILE when
 * it does not exist; when it does, they come from it instead (the same
 * graph searched by two builds of the library). */
void exchange_graph(std::vector<uint32_t> &graph, std::vector<uint32_t> &entries, uint32_t &entry_count)
{
    const char *path = std::getenv("CAGRA_BENCH_GRAPH");
    if (!path)
        return;
    if (FILE *f = std::fopen(path, "rb")) {
        uint64_t gs = 0;
        uint32_t ec = 0;
        if (std::fread(&gs, 8, 1, f) != 1 || std::fread(&ec, 4, 1, f) != 1)
            die("bad graph file");
        graph.resize(gs);
        entries.resize(ec);
        if (std::fread(graph.data(), 4, gs, f) != gs || std::fread(entries.data(), 4, ec, f) != ec)
            die("bad graph file");
        std::fclose(f);
        entry_count = ec;
        std::printf("graph and %u entries read from %s\n", ec, path);
        return;
    }
    FILE *f = std::fopen(path, "wb");
    const uint64_t gs = graph.size();
    std::fwrite(&gs, 8, 1, f);
    std::fwrite(&entry_count, 4, 1, f);
    std::fwrite(graph.data(), 4, gs, f);
    std::fwrite(entries.data(), 4, entry_count, f);
    std::fclose(f);
    std::printf("graph and %u entries written to %s\n", entry_count, path);
}

} // namespace

/* --only graphs: the core's CPU build of the same set beside the GPU-built
 * graph, both searched on the GPU (fp32 vectors, batch 10,000). */
void compare_graphs(const std::vector<float> &base, uint64_t n, uint32_t dim, cagra_gpu_metric metric,
                    const std::vector<uint32_t> &gpu_graph, uint32_t degree, const std::vector<uint32_t> &gpu_entries,
                    uint32_t gpu_entry_count, const std::vector<float> &queries, uint32_t nq,
                    const std::vector<int32_t> &gt, uint32_t gt_dim, uint32_t threads,
                    const std::function<void(const char *)> &emit)
{
    char line[512];
    cagra::BuildParams cp;
    cp.threads = threads;
    auto t0 = Clock::now();
    cagra::BuiltGraph cpu = cagra::build_graph(
        cagra::DatasetView{base.data(), n, dim},
        metric == CAGRA_GPU_L2 ? cagra::Metric::L2 : cagra::Metric::InnerProduct, cp);
    std::snprintf(line, sizeof line, "| CPU build (core build_graph, %u threads, termination %g) | %.2f s |\n\n",
                  threads, cp.nn_descent_termination, seconds_since(t0));
    emit(line);
    const uint32_t itopks[] = {16, 32, 48, 64, 128};
    emit("| graph (searched on the GPU, fp32, batch 10,000) | entries | recall@10 at itopk 16 | 32 | 48 | 64 | 128 |\n"
         "|---|---:|---:|---:|---:|---:|---:|\n");
    std::vector<double> gpu_recall;
    auto sweep = [&](const char *name, const std::vector<uint32_t> &g, uint32_t deg, const uint32_t *ent,
                     uint32_t ec, std::vector<double> *keep) {
        cagra_gpu_index *ix = nullptr;
        GPU_OK(cagra_gpu_index_load(0, base.data(), CAGRA_GPU_FLOAT32, n, dim, g.data(), deg, metric, ent, ec, &ix));
        std::string row;
        std::snprintf(line, sizeof line, "| %s | %u |", name, ec);
        row += line;
        for (size_t i = 0; i < sizeof itopks / sizeof itopks[0]; i++) {
            Row r = sweep_point(ix, queries, nq, dim, gt, gt_dim, itopks[i], 10000);
            std::snprintf(line, sizeof line, " %.4f |", r.recall);
            row += line;
            keep->push_back(r.recall);
        }
        row += "\n";
        emit(row.c_str());
        cagra_gpu_index_free(ix);
    };
    std::vector<double> cpu_recall;
    sweep("GPU-built", gpu_graph, degree, gpu_entries.data(), gpu_entry_count, &gpu_recall);
    sweep("CPU-built", cpu.graph.edges, cpu.graph.degree, cpu.entry_nodes.data(), (uint32_t)cpu.entry_nodes.size(),
          &cpu_recall);
    std::string row = "| CPU-built less GPU-built | |";
    for (size_t i = 0; i < gpu_recall.size(); i++) {
        std::snprintf(line, sizeof line, " %+.4f |", cpu_recall[i] - gpu_recall[i]);
        row += line;
    }
    emit((row + "\n\n").c_str());
}

int main(int argc, char **argv)
{
    if (argc < 2)
        die("usage: gpu_bench DIR [--cpu-build THREADS] [--metric l2|ip] [--termination T[,T...]] [--ctas N] "
            "[--entries E[,E...]] [--only latency|entries|graphs|load] [--out FILE]");
    std::string dir = argv[1], out_path;
    uint32_t cpu_threads = 0;
    cagra_gpu_metric metric = CAGRA_GPU_L2;
    std::vector<float> terminations; /* empty: one build at the default */
    bool latency_only = false, entries_only = false, graphs_only = false, load_only = false;
    std::vector<uint32_t> entry_counts; /* --entries */
    for (int i = 2; i + 1 < argc; i += 2) {
        if (!std::strcmp(argv[i], "--termination")) {
            for (const char *p = argv[i + 1]; *p;) {
                char *end = nullptr;
                const float t = std::strtof(p, &end);
                if (end == p || !(t >= 0.0f && t < 1.0f) || (*end && *end != ','))
                    die(std::string("bad --termination list ") + argv[i + 1]);
                terminations.push_back(t);
                p = *end ? end + 1 : end;
            }
        } else if (!std::strcmp(argv[i], "--cpu-build"))
            cpu_threads = (uint32_t)std::atoi(argv[i + 1]);
        else if (!std::strcmp(argv[i], "--metric") && !std::strcmp(argv[i + 1], "l2"))
            metric = CAGRA_GPU_L2;
        else if (!std::strcmp(argv[i], "--metric") && !std::strcmp(argv[i + 1], "ip"))
            metric = CAGRA_GPU_INNER_PRODUCT;
        else if (!std::strcmp(argv[i], "--out"))
            out_path = argv[i + 1];
        else if (!std::strcmp(argv[i], "--ctas"))
            g_ctas = (uint32_t)std::atoi(argv[i + 1]);
        else if (!std::strcmp(argv[i], "--only") && !std::strcmp(argv[i + 1], "latency"))
            latency_only = true;
        else if (!std::strcmp(argv[i], "--only") && !std::strcmp(argv[i + 1], "entries"))
            entries_only = true;
        else if (!std::strcmp(argv[i], "--only") && !std::strcmp(argv[i + 1], "graphs"))
            graphs_only = true;
        else if (!std::strcmp(argv[i], "--only") && !std::strcmp(argv[i + 1], "load"))
            load_only = true;
        else if (!std::strcmp(argv[i], "--entries")) {
            for (const char *p = argv[i + 1]; *p;) {
                char *end = nullptr;
                const long e = std::strtol(p, &end, 10);
                if (end == p || e < 0 || (*end && *end != ','))
                    die(std::string("bad --entries list ") + argv[i + 1]);
                entry_counts.push_back((uint32_t)e);
                p = *end ? end + 1 : end;
            }
        }
        else
            die(std::string("unknown option ") + argv[i]);
    }
    if (argc % 2 != 0)
        die(std::string("option ") + argv[argc - 1] + " needs a value");
    uint32_t dim, qdim, gt_dim;
    uint64_t n, nq64, ngt;
    auto base = read_vecs<float>(dir + "/base.fvecs", dim, n);
    auto queries = read_vecs<float>(dir + "/query.fvecs", qdim, nq64);
    auto gt = read_vecs<int32_t>(dir + "/gt.ivecs", gt_dim, ngt);
    const uint32_t nq = (uint32_t)nq64;
    if (qdim != dim || ngt != nq64)
        die("inconsistent data set");

    cagra_gpu_device_info info;
    GPU_OK(cagra_gpu_get_device_info(0, &info));
    std::string report;
    char line[512];
    /* the report file is rewritten after each line, so a run stopped by a
     * time limit still leaves what it measured */
    auto emit = [&](const char *s) {
        std::fputs(s, stdout);
        std::fflush(stdout);
        report += s;
        if (!out_path.empty()) {
            FILE *f = std::fopen(out_path.c_str(), "w");
            if (f) {
                std::fputs(report.c_str(), f);
                std::fclose(f);
            }
        }
    };
    std::snprintf(line, sizeof line,
                  "device: %s, %d SMs, %.1f GiB; data: %s, n=%llu dim=%u queries=%u, metric %s; "
                  "library %s\n\n",
                  info.name, info.multiprocessors, info.total_memory / 1073741824.0, dir.c_str(), (unsigned long long)n,
                  dim, nq, metric == CAGRA_GPU_L2 ? "L2" : "inner product", cagra_gpu_version());
    emit(line);

    /* GPU build (after a small warm-up build that creates the context) */
    cagra_gpu_build_params bp;
    cagra_gpu_default_build_params(&bp);
    std::vector<uint32_t> graph(n * bp.graph_degree), entries(1024);
    uint32_t entry_count = 0;
    {
        std::vector<uint32_t> g(4000 * bp.graph_degree);
        GPU_OK(cagra_gpu_build(0, base.data(), 4000, dim, metric, &bp, g.data(), nullptr, 0, nullptr));
    }
    const bool termination_sweep = !terminations.empty();
    if (!termination_sweep)
        terminations.push_back(bp.nn_descent_termination);
    auto t0 = Clock::now();
    for (size_t ti = 0; ti < terminations.size(); ti++) {
        cagra_gpu_build_params tp = bp;
        tp.nn_descent_termination = terminations[ti];
        std::vector<uint32_t> g(n * bp.graph_degree), e(1024);
        cagra_gpu_build_result built;
        PeakMemory peak;
        t0 = Clock::now();
        GPU_OK(cagra_gpu_build(0, base.data(), n, dim, metric, &tp, g.data(), e.data(), 1024, &built));
        const double secs = seconds_since(t0);
        const uint64_t peak_bytes = peak.stop();
        const uint32_t ec = built.entry_count;
        e.resize(ec);
        std::printf("build steps (s): upload %.3f, kNN %.3f, pruning %.3f, connect %.3f (%llu links, %llu "
                    "unreached), entries %.3f, probe %.3f (%.2f%% missed), long edges %.3f (%s), download %.3f\n",
                    built.upload_seconds, built.knn_seconds, built.optimize_seconds, built.connect_seconds,
                    (unsigned long long)built.connect_links, (unsigned long long)built.unreached,
                    built.entries_seconds, built.probe_seconds, 100.0 * built.probe_miss_rate,
                    built.long_edges_seconds, built.long_edges ? "added" : "none", built.download_seconds);
        if (ti == 0) {
            bp = tp;
            std::snprintf(line, sizeof line,
                          "| GPU build (graph_degree %u, intermediate %u, termination %g, host->graph incl. copies) | "
                          "%.2f s, peak device memory %.2f GiB (fp16 vectors and graph: %.2f GiB) |\n",
                          bp.graph_degree, bp.intermediate_degree, bp.nn_descent_termination, secs,
                          peak_bytes / 1073741824.0,
                          (n * (uint64_t)dim * 2 + n * (uint64_t)bp.graph_degree * 4) / 1073741824.0);
            emit(line);
        }
        if (termination_sweep) {
            if (ti == 0)
                emit("\n| NN-descent termination | GPU build | probe misses | recall@10 (batch 10,000) at itopk 16 "
                     "| 32 | 64 | 128 | 256 |\n|---:|---:|---:|---:|---:|---:|---:|---:|\n");
            cagra_gpu_index *ix = nullptr;
            GPU_OK(cagra_gpu_index_load(0, base.data(), CAGRA_GPU_FLOAT32, n, dim, g.data(), bp.graph_degree, metric,
                                        e.data(), ec, &ix));
            std::string row;
            std::snprintf(line, sizeof line, "| %g | %.2f s | %.1f%% |", terminations[ti], secs,
                          100.0 * probe_miss_rate(ix, base, n, dim, metric, bp.seed));
            row += line;
            for (uint32_t itopk : {16u, 32u, 64u, 128u, 256u}) {
                Row r = sweep_point(ix, queries, nq, dim, gt, gt_dim, itopk, 10000);
                std::snprintf(line, sizeof line, " %.4f |", r.recall);
                row += line;
            }
            row += "\n";
            emit(row.c_str());
            cagra_gpu_index_free(ix);
        }
        if (ti == 0) {
            graph.swap(g);
            entries.swap(e);
            entry_count = ec;
        }
    }
    exchange_graph(graph, entries, entry_count);
    if (termination_sweep)
        emit("\n");
    {
        cagra_gpu_index *ix = nullptr;
        GPU_OK(cagra_gpu_index_load(0, base.data(), CAGRA_GPU_FLOAT32, n, dim, graph.data(), bp.graph_degree, metric,
                                    entries.data(), entry_count, &ix));
        std::snprintf(line, sizeof line,
                      "| navigation probe of the GPU-built graph (1,024 rows searched for themselves, default "
                      "search) | %.1f%% missed |\n",
                      100.0 * probe_miss_rate(ix, base, n, dim, metric, bp.seed));
        emit(line);
        cagra_gpu_index_free(ix);
    }

    std::vector<__half> base16;
    auto half_base = [&]() -> const std::vector<__half> & {
        if (base16.empty()) {
            base16.resize(base.size());
            for (size_t i = 0; i < base.size(); i++)
                base16[i] = __float2half_rn(base[i]);
        }
        return base16;
    };
    if (!entry_counts.empty()) {
        emit("\n");
        entries_sweep(half_base(), n, dim, graph, bp.graph_degree, metric, entries, entry_counts, queries, nq, gt,
                      gt_dim, emit);
    }
    if (entries_only)
        return 0;
    if (graphs_only) {
        compare_graphs(base, n, dim, metric, graph, bp.graph_degree, entries, entry_count, queries, nq, gt, gt_dim,
                       cpu_threads ? cpu_threads : 16, emit);
        return 0;
    }

    if (latency_only || load_only) {
        cagra_gpu_index *ix = nullptr;
        GPU_OK(cagra_gpu_index_load(0, base.data(), CAGRA_GPU_FLOAT32, n, dim, graph.data(), bp.graph_degree, metric,
                                    entries.data(), entry_count, &ix));
        if (latency_only) {
            emit("\nSmall-batch latency (fp32 vectors, one launch at a time):\n\n");
            latency_sweep(ix, queries, nq, dim, gt, gt_dim, emit);
        } else {
            emit("\nSmall batches from concurrent threads (fp32 vectors):\n\n");
            load_sweep(ix, queries, nq, dim, gt, gt_dim, emit);
        }
        cagra_gpu_index_free(ix);
        return 0;
    }

    if (std::getenv("CAGRA_BENCH_PROFILE")) {
        /* for ncu --profile-from-start off: one batch-10,000 search at itopk 64,
         * then the build again, and nothing else */
        cagra_gpu_index *ix = nullptr;
        GPU_OK(cagra_gpu_index_load(0, base.data(), CAGRA_GPU_FLOAT32, n, dim, graph.data(), bp.graph_degree, metric,
                                    entries.data(), entry_count, &ix));
        CUDA_OK(cudaProfilerStart());
        Row r = sweep_point(ix, queries, nq, dim, gt, gt_dim, 64, 10000);
        std::printf("profiled search: recall %.4f, %.0f q/s\n", r.recall, r.qps);
        cagra_gpu_build_result built;
        GPU_OK(cagra_gpu_build(0, base.data(), n, dim, metric, &bp, graph.data(), entries.data(), 1024, &built));
        CUDA_OK(cudaProfilerStop());
        cagra_gpu_index_free(ix);
        return 0;
    }

    /* exact brute force over batches of 10,000 (the queries tiled) */
    {
        const uint32_t bq = 10000;
        std::vector<float> q((uint64_t)bq * dim);
        for (uint32_t i = 0; i < bq; i++)
            std::memcpy(&q[(uint64_t)i * dim], &queries[(uint64_t)(i % nq) * dim], 4ull * dim);
        float *dbase;
        CUDA_OK(cudaMalloc(&dbase, n * dim * 4));
        CUDA_OK(cudaMemcpy(dbase, base.data(), n * dim * 4, cudaMemcpyHostToDevice));
        BruteForce bf = brute_force(dbase, n, dim, q, bq, metric == CAGRA_GPU_INNER_PRODUCT);
        cudaFree(dbase);
        std::snprintf(line, sizeof line,
                      "| exact brute force on the GPU, batch 10,000 (cuBLAS SGEMM + top-10) | "
                      "%.0f q/s, recall@10 %.4f |\n\n",
                      bq / bf.seconds, recall_at(bf.ids, kTop, gt, gt_dim, nq));
        emit(line);
    }

    auto run_sweep = [&](const char *title, const std::vector<uint32_t> &g, uint32_t degree,
                         const std::vector<uint32_t> &ent, bool fp16) {
        cagra_gpu_index *ix = nullptr;
        GPU_OK(cagra_gpu_index_load(0, fp16 ? (const void *)half_base().data() : base.data(),
                                    fp16 ? CAGRA_GPU_FLOAT16 : CAGRA_GPU_FLOAT32, n, dim, g.data(), degree, metric,
                                    ent.data(), (uint32_t)ent.size(), &ix));
        std::snprintf(line, sizeof line,
                      "%s\n\n| itopk | batch | recall@10 | queries/s | median batch latency |\n"
                      "|---:|---:|---:|---:|---:|\n",
                      title);
        emit(line);
        for (uint32_t batch : {10000u, 100u, 1u})
            for (uint32_t itopk : {16u, 32u, 64u, 128u, 256u}) {
                Row r = sweep_point(ix, queries, nq, dim, gt, gt_dim, itopk, batch);
                std::snprintf(line, sizeof line, "| %u | %u | %.4f | %.0f | %.3f ms |\n", r.itopk, r.batch, r.recall,
                              r.qps, r.latency_ms);
                emit(line);
            }
        if (!fp16) {
            /* small batches leave the device idle: does a wider search per
             * iteration (fewer, larger steps) cut their latency? */
            emit("\n| itopk | search_width | batch | recall@10 | queries/s | median batch latency |\n"
                 "|---:|---:|---:|---:|---:|---:|\n");
            for (uint32_t batch : {1u, 16u})
                for (uint32_t itopk : {32u, 64u})
                    for (uint32_t width : {1u, 2u, 4u, 8u}) {
                        Row r = sweep_point(ix, queries, nq, dim, gt, gt_dim, itopk, batch, width);
                        std::snprintf(line, sizeof line, "| %u | %u | %u | %.4f | %.0f | %.3f ms |\n", r.itopk, width,
                                      r.batch, r.recall, r.qps, r.latency_ms);
                        emit(line);
                    }
            emit("\n| itopk | batch | threads (one search context each) | recall@10 | queries/s |\n"
                 "|---:|---:|---:|---:|---:|\n");
            for (uint32_t batch : {16u, 64u})
                for (uint32_t threads : {1u, 4u, 8u}) {
                    Row r = concurrent_point(ix, queries, nq, dim, gt, gt_dim, 32, batch, threads, batch * 200);
                    std::snprintf(line, sizeof line, "| 32 | %u | %u | %.4f | %.0f |\n", batch, threads, r.recall,
                                  r.qps);
                    emit(line);
                }
        }
        emit("\n");
        cagra_gpu_index_free(ix);
    };
    run_sweep("GPU search of the GPU-built graph (fp32 vectors, search_width 1)", graph, bp.graph_degree, entries,
              false);
    run_sweep("GPU search of the GPU-built graph (fp16 vectors, search_width 1)", graph, bp.graph_degree, entries,
              true);

    /* last, so a slow CPU build cannot cost the GPU figures */
    cagra::BuiltGraph cpu;
    if (cpu_threads) {
        cagra::BuildParams cp;
        cp.threads = cpu_threads;
        t0 = Clock::now();
        cpu = cagra::build_graph(cagra::DatasetView{base.data(), n, dim},
                                 metric == CAGRA_GPU_L2 ? cagra::Metric::L2 : cagra::Metric::InnerProduct, cp);
        std::snprintf(line, sizeof line, "| CPU build (core build_graph, %u threads) | %.2f s |\n", cpu_threads,
                      seconds_since(t0));
        emit(line);
    }

    if (cpu_threads)
        run_sweep("GPU search of the CPU-built graph (fp32 vectors)", cpu.graph.edges, cpu.graph.degree,
                  cpu.entry_nodes, false);

    return 0;
}
