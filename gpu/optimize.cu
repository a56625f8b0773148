/*
 * optimize.cu — turns the kNN graph into the CAGRA graph on the device:
 *   prune    per node, count the detours of each edge A->B (a D earlier in
 *            A's list with B in D's list, max(rank A->D, rank D->B) < rank
 *            A->B) and keep the `degree` edges with the fewest, ties by rank;
 *   reverse  for each kept edge A->B, A joins B's reverse list, lower ranks
 *            first (one pass per rank);
 *   merge    the first half of the pruned row, then the reverse edges, then
 *            the rest of the pruned row, without duplicates.
 */
#include "optimize.cuh"
#include "sort.cuh"

namespace cagra_gpu {

namespace {

constexpr uint32_t kPruneThreads = 64;

__global__ void prune_kernel(const uint32_t *knn, uint32_t n, uint32_t k, uint32_t kp, uint32_t degree,
                             uint32_t *pruned)
{
    extern __shared__ uint64_t smem[];
    uint64_t *by_id = smem;                                  /* (id << 32 | rank), sorted */
    uint32_t *row = reinterpret_cast<uint32_t *>(smem + kp); /* A's list */
    uint32_t *detours = row + k;
    const uint32_t a = blockIdx.x;
    const uint32_t *arow = knn + (uint64_t)a * k;
    for (uint32_t j = threadIdx.x; j < kp; j += blockDim.x) {
        uint32_t id = j < k ? arow[j] : kInvalid;
        by_id[j] = ((uint64_t)id << 32) | j;
        if (j < k) {
            row[j] = id;
            detours[j] = 0;
        }
    }
    __syncthreads();
    block_sort(by_id, kp);

    const uint32_t lane = threadIdx.x & 31, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    for (uint32_t i = warp; i < k; i += warps) {
        uint32_t d = row[i];
        if (d == kInvalid)
            continue;
        const uint32_t *drow = knn + (uint64_t)d * k;
        for (uint32_t kdb = lane; kdb < k; kdb += 32) {
            uint32_t b = drow[kdb];
            if (b == kInvalid)
                continue;
            /* rank of b in A's list, by binary search over the sorted ids */
            uint32_t lo = 0, hi = kp;
            while (lo < hi) {
                uint32_t mid = (lo + hi) / 2;
                if ((uint32_t)(by_id[mid] >> 32) < b)
                    lo = mid + 1;
                else
                    hi = mid;
            }
            if (lo < kp && (uint32_t)(by_id[lo] >> 32) == b) {
                uint32_t j = (uint32_t)by_id[lo];
                if (max(i, kdb) < j)
                    atomicAdd(&detours[j], 1u);
            }
        }
    }
    __syncthreads();

    /* position of each edge in (detours, rank) order */
    for (uint32_t j = threadIdx.x; j < k; j += blockDim.x) {
        uint64_t key = row[j] == kInvalid ? ~0ULL : ((uint64_t)detours[j] << 32) | j;
        uint32_t pos = 0;
        for (uint32_t t = 0; t < k; t++) {
            uint64_t other = row[t] == kInvalid ? ~0ULL : ((uint64_t)detours[t] << 32) | t;
            pos += other < key || (other == key && t < j);
        }
        if (pos < degree)
            pruned[(uint64_t)a * degree + pos] = row[j];
    }
}

__global__ void reverse_kernel(const uint32_t *pruned, uint32_t n, uint32_t degree, uint32_t rank, uint32_t *rev,
                               uint32_t *rev_cnt)
{
    uint32_t a = blockIdx.x * blockDim.x + threadIdx.x;
    if (a >= n)
        return;
    uint32_t b = pruned[(uint64_t)a * degree + rank];
    if (b == kInvalid)
        return;
    uint32_t slot = atomicAdd(&rev_cnt[b], 1u);
    if (slot < degree)
        rev[(uint64_t)b * degree + slot] = a;
}

__device__ inline bool row_contains(const uint32_t *row, uint32_t count, uint32_t id)
{
    for (uint32_t t = 0; t < count; t++)
        if (row[t] == id)
            return true;
    return false;
}

__global__ void merge_rows_kernel(const uint32_t *pruned, const uint32_t *rev, const uint32_t *rev_cnt, uint32_t n,
                                  uint32_t degree, uint32_t *graph)
{
    uint32_t a = blockIdx.x * blockDim.x + threadIdx.x;
    if (a >= n)
        return;
    const uint32_t *p = pruned + (uint64_t)a * degree;
    const uint32_t *r = rev + (uint64_t)a * degree;
    uint32_t *out = graph + (uint64_t)a * degree;
    uint32_t cnt = 0;
    const uint32_t half = degree / 2;
    for (uint32_t j = 0; j < half; j++)
        if (p[j] != kInvalid)
            out[cnt++] = p[j];
    uint32_t nr = min(rev_cnt[a], degree);
    for (uint32_t j = 0; j < nr && cnt < degree; j++)
        if (r[j] != a && !row_contains(out, cnt, r[j]))
            out[cnt++] = r[j];
    for (uint32_t j = half; j < degree && cnt < degree; j++)
        if (p[j] != kInvalid && !row_contains(out, cnt, p[j]))
            out[cnt++] = p[j];
    for (; cnt < degree; cnt++)
        out[cnt] = kInvalid;
}

} // namespace

uint64_t optimize_phase_bytes(uint64_t n, uint32_t k, uint32_t degree)
{
    /* knn, pruned, reverse lists and counts, the final graph */
    return n * k * 4 + n * degree * 4 * 3 + n * 4 + 4096;
}

void optimize_graph(const uint32_t *knn, uint64_t n64, uint32_t k, uint32_t degree, uint32_t *graph,
                    cudaStream_t stream)
{
    const uint32_t n = (uint32_t)n64;
    DeviceBuffer<uint32_t> pruned((uint64_t)n * degree);
    DeviceBuffer<uint32_t> rev((uint64_t)n * degree);
    DeviceBuffer<uint32_t> rev_cnt(n);
    const uint32_t kp = pow2_at_least(k);
    size_t smem = kp * sizeof(uint64_t) + 2 * k * sizeof(uint32_t);
    prune_kernel<<<n, kPruneThreads, smem, stream>>>(knn, n, k, kp, degree, pruned.get());
    check_launch("prune_kernel");
    check(cudaMemsetAsync(rev_cnt.get(), 0, rev_cnt.bytes(), stream), "cudaMemset");
    const unsigned blocks = (unsigned)div_up(n, 256);
    for (uint32_t rank = 0; rank < degree; rank++) {
        reverse_kernel<<<blocks, 256, 0, stream>>>(pruned.get(), n, degree, rank, rev.get(), rev_cnt.get());
        check_launch("reverse_kernel");
    }
    merge_rows_kernel<<<blocks, 256, 0, stream>>>(pruned.get(), rev.get(), rev_cnt.get(), n, degree, graph);
    check_launch("merge_rows_kernel");
    check(cudaStreamSynchronize(stream), "graph optimisation");
}

} // namespace cagra_gpu
