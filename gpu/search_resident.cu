/*
 * search_resident.cu — the resident search kernel (search_resident.cuh).
 *
 * One kernel per device at a time, for one index and one set of search
 * settings, one thread block per multiprocessor.  Block b owns job slot b
 * in mapped host memory: the caller writes a query and k into it and
 * publishes the slot READY; thread 0 of the block, polling the slot, takes
 * the job, the block walks the graph (search_single_cta.cuh, as a launch of
 * the batched kernel would), writes the answer into the slot's rows of
 * host memory and publishes DONE, which the caller is spinning on.  STOP
 * ends the block.  So a search costs the walk, reads of the query and
 * writes of the answer across PCIe, and no driver call.
 *
 * Blocks on half the multiprocessors, each of a few tens of KB of shared
 * memory: other kernels of the library (large batches, builds) run beside
 * them, and one that needs a whole multiprocessor (the build's 1,024-thread
 * entry selection takes every register of one) finds the other half free;
 * on every multiprocessor such a kernel would wait for ever.  Jobs are bounded walks, so a caller waits
 * at most one walk per job; a kernel that stops answering (a device fault)
 * is noticed through its stream and the search fails as a device error.
 */
#include <cuda/atomic>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>
#include <numeric>
#include <sched.h>
#include <thread>
#include <vector>

#include "search_resident.cuh"
#include "search_single_cta.cuh"

namespace cagra_gpu {

namespace {

enum : uint32_t { kSlotIdle = 0, kSlotReady = 1, kSlotDone = 2, kSlotStop = 3 };

/* a job slot, one cache line, in mapped host memory */
struct alignas(64) Slot {
    uint32_t state;
    uint32_t k;
    uint32_t qi; /* the query's place in its batch: seeds its random entries as a launch would */
    uint32_t unused;
    uint64_t started_ns, ended_ns; /* the device's global timer around the job */
};

/* A caller that has waited this long for a job takes the device for lost. */
constexpr auto kJobTimeout = std::chrono::seconds(10);
/* Another index's kernel idle this long gives way to a new one. */
constexpr auto kIdleBeforeReplace = std::chrono::milliseconds(200);

__device__ inline uint64_t global_timer_ns()
{
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

template <class T, int TEAM>
__global__ void __launch_bounds__(256, 1)
    resident_search_kernel(SearchArgs a, Slot *slots, const float *queries, uint32_t *ids, float *dists)
{
    __shared__ uint32_t s_state, s_k, s_qi;
    __shared__ uint64_t s_started;
    Slot &slot = slots[blockIdx.x];
    cuda::atomic_ref<uint32_t, cuda::thread_scope_system> state(slot.state);
    for (;;) {
        if (threadIdx.x == 0) {
            uint32_t st;
            while ((st = state.load(cuda::memory_order_acquire)) != kSlotReady && st != kSlotStop)
                __nanosleep(1000);
            s_state = st;
            s_k = *reinterpret_cast<volatile uint32_t *>(&slot.k);
            s_qi = *reinterpret_cast<volatile uint32_t *>(&slot.qi);
            s_started = global_timer_ns();
        }
        __syncthreads();
        if (s_state == kSlotStop)
            return;
        const uint64_t row = (uint64_t)blockIdx.x * CAGRA_GPU_MAX_K;
        search_one<T, TEAM>(a, queries + (uint64_t)blockIdx.x * a.stride, s_qi, s_k, ids + row, dists + row);
        cuda::atomic_thread_fence(cuda::memory_order_release, cuda::thread_scope_system);
        __syncthreads();
        if (threadIdx.x == 0) {
            slot.started_ns = s_started;
            slot.ended_ns = global_timer_ns();
            state.store(kSlotDone, cuda::memory_order_release);
        }
    }
}

template <class T, int TEAM>
void *kernel_for()
{
    return reinterpret_cast<void *>(&resident_search_kernel<T, TEAM>);
}

template <class T>
void *kernel_for_team(uint32_t stride)
{
    switch (distance_team<T>(stride)) {
    case 4:
        return kernel_for<T, 4>();
    case 8:
        return kernel_for<T, 8>();
    case 16:
        return kernel_for<T, 16>();
    default:
        return kernel_for<T, 32>();
    }
}

struct Resident {
    ResidentKey key;
    SearchArgs a{};
    void *kernel = nullptr;
    uint32_t threads = 0, slots = 0;
    cudaStream_t stream = nullptr;
    /* mapped host memory: slots, slots x stride query floats (zero padded),
     * slots x CAGRA_GPU_MAX_K ids and distances */
    Slot *slot = nullptr;
    float *queries = nullptr;
    uint32_t *ids = nullptr;
    float *dists = nullptr;
    bool running = false;
    bool broken = false; /* a job timed out or the kernel failed: never used again */
    uint32_t in_flight = 0;
    std::vector<uint32_t> free;
    /* queries of resident_start, until resident_collect takes them: per
     * slot, whether it holds one, its caller's tag and when it began */
    std::vector<uint8_t> started;
    std::vector<uint64_t> tag;
    std::vector<std::chrono::steady_clock::time_point> since;
    uint32_t started_count = 0;
    std::chrono::steady_clock::time_point last_used;

    ~Resident()
    {
        /* only under a pause (no kernel of the library's runs) */
        for (void *p : {(void *)slot, (void *)queries, (void *)ids, (void *)dists})
            if (p)
                cudaFreeHost(p);
        if (stream)
            cudaStreamDestroy(stream);
    }
};

struct Registry {
    std::mutex m;
    std::condition_variable cv;
    int pauses = 0;
    std::vector<std::unique_ptr<Resident>> residents; /* at most one per device */
};

/* never destroyed: at exit the driver ends whatever still runs */
Registry &registry()
{
    static Registry *r = new Registry;
    return *r;
}

/* Restores the calling thread's device. */
struct DeviceScope {
    int saved = 0;
    explicit DeviceScope(int device)
    {
        cudaGetDevice(&saved);
        cudaSetDevice(device);
    }
    ~DeviceScope() { cudaSetDevice(saved); }
};

void stop(Resident &x)
{
    if (!x.running || x.broken)
        return;
    for (uint32_t i = 0; i < x.slots; i++)
        __atomic_store_n(&x.slot[i].state, (uint32_t)kSlotStop, __ATOMIC_RELEASE);
    DeviceScope scope(x.key.device);
    if (cudaStreamSynchronize(x.stream) != cudaSuccess)
        x.broken = true;
    x.running = false;
}

/* With the registry locked: once no job is in flight, every resident
 * kernel is stopped (they start again with the next search). */
void quiesce(std::unique_lock<std::mutex> &lock)
{
    Registry &r = registry();
    r.cv.wait(lock, [&] {
        for (auto &x : r.residents)
            if ((x->in_flight && !x->broken) || x->started_count)
                return false; /* (a broken kernel's started queries end at the next collect) */
        return true;
    });
    for (auto &x : r.residents)
        stop(*x);
}

template <class T>
void host_alloc(T **p, uint64_t count)
{
    check(cudaHostAlloc(reinterpret_cast<void **>(p), count * sizeof(T), cudaHostAllocMapped | cudaHostAllocPortable),
          "allocating the resident search's host memory");
    std::memset(*p, 0, count * sizeof(T));
}

/* A resident for `key` (kernels stopped, registry locked); NULL when the
 * device cannot hold one block of it per multiprocessor. */
std::unique_ptr<Resident> make_resident(const ResidentKey &key, const SearchArgs &planned)
{
    DeviceScope scope(key.device);
    auto x = std::make_unique<Resident>();
    x->key = key;
    x->a = planned;
    x->threads = single_cta_threads(planned);
    x->kernel = key.half ? kernel_for_team<__half>(planned.stride) : kernel_for_team<float>(planned.stride);
    if (planned.smem_bytes > 48 * 1024)
        check(cudaFuncSetAttribute(x->kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)planned.smem_bytes),
              "raising the resident search kernel's shared memory limit");
    int per_sm = 0, sms = 0;
    check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, x->kernel, (int)x->threads, planned.smem_bytes),
          "cudaOccupancyMaxActiveBlocksPerMultiprocessor");
    check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, key.device), "cudaDeviceGetAttribute");
    if (per_sm < 1 || sms < 1)
        return nullptr;
    x->slots = (uint32_t)std::max(1, sms / 2);
    check(cudaStreamCreateWithFlags(&x->stream, cudaStreamNonBlocking), "cudaStreamCreate");
    host_alloc(&x->slot, x->slots);
    host_alloc(&x->queries, (uint64_t)x->slots * planned.stride);
    host_alloc(&x->ids, (uint64_t)x->slots * CAGRA_GPU_MAX_K);
    host_alloc(&x->dists, (uint64_t)x->slots * CAGRA_GPU_MAX_K);
    for (uint32_t i = x->slots; i-- > 0;)
        x->free.push_back(i);
    x->started.assign(x->slots, 0);
    x->tag.assign(x->slots, 0);
    x->since.assign(x->slots, {});
    return x;
}

void start(Resident &x)
{
    DeviceScope scope(x.key.device);
    for (uint32_t i = 0; i < x.slots; i++)
        x.slot[i].state = kSlotIdle;
    Slot *slots = x.slot;
    const float *queries = x.queries;
    uint32_t *ids = x.ids;
    float *dists = x.dists;
    void *args[] = {&x.a, &slots, &queries, &ids, &dists};
    check(cudaLaunchKernel(x.kernel, dim3(x.slots), dim3(x.threads), args, x.a.smem_bytes, x.stream),
          "launching the resident search kernel");
    x.running = true;
}

Resident *find(Registry &r, int device)
{
    for (auto &x : r.residents)
        if (x->key.device == device)
            return x.get();
    return nullptr;
}

void drop(Registry &r, Resident *x)
{
    for (auto it = r.residents.begin(); it != r.residents.end(); ++it)
        if (it->get() == x) {
            r.residents.erase(it);
            return;
        }
}

/* Waits until every job of `mine` is DONE, calling take(i) for job i as
 * soon as its slot is: spins for the time of a short walk, then yields the
 * core, then sleeps in steps of 20 us, so that a long wait on a busy host
 * leaves the cores to the backends.  Fails on a kernel that ended or
 * faulted, or after kJobTimeout. */
template <class Take>
void wait_all_done(Resident &x, const std::vector<uint32_t> &mine, Take take)
{
    using std::chrono::microseconds;
    const auto since = std::chrono::steady_clock::now();
    std::vector<uint32_t> left(mine.size());
    std::iota(left.begin(), left.end(), 0u);
    for (uint64_t spins = 0;; spins++) {
        for (size_t j = 0; j < left.size();) {
            if (__atomic_load_n(&x.slot[mine[left[j]]].state, __ATOMIC_ACQUIRE) == kSlotDone) {
                take(left[j]);
                left[j] = left.back();
                left.pop_back();
            } else {
                j++;
            }
        }
        if (left.empty())
            return;
        const auto waited = std::chrono::steady_clock::now() - since;
        if (waited < kBriefWait)
            wait_step(waited);
        else
            std::this_thread::sleep_for(microseconds(20));
        if ((spins & 1023) == 1023 || waited >= kBriefWait) {
            const cudaError_t err = cudaStreamQuery(x.stream);
            if (err != cudaErrorNotReady)
                fail(CAGRA_GPU_DEVICE_ERROR, std::string("the resident search kernel ended: ") +
                                                 (err == cudaSuccess ? "no error" : cudaGetErrorString(err)));
            if (waited > kJobTimeout)
                fail(CAGRA_GPU_DEVICE_ERROR, "the resident search kernel did not answer within 10 s");
        }
    }
}

/* With the registry locked: the device's kernel for `key`, made or
 * replaced when it can be, running, with at least nq free slots; NULL when
 * it cannot take nq queries now (another index's kernel is busy, a pause
 * is on, too few free slots). */
Resident *kernel_with_room(std::unique_lock<std::mutex> &lock, const ResidentKey &key, const SearchArgs &planned,
                           uint32_t nq)
{
    Registry &r = registry();
    if (r.pauses || nq == 0)
        return nullptr;
    Resident *x = find(r, key.device);
    if (!x || !(x->key == key)) {
        /* the device's kernel made or replaced with every kernel stopped */
        if (x && (x->broken || x->in_flight || std::chrono::steady_clock::now() - x->last_used < kIdleBeforeReplace))
            return nullptr;
        r.pauses++;
        quiesce(lock);
        /* another thread may have made or replaced it meanwhile */
        x = find(r, key.device);
        if (x && !(x->key == key) && !x->broken) {
            drop(r, x);
            x = nullptr;
        }
        std::unique_ptr<Resident> made;
        if (!x) {
            try {
                made = make_resident(key, planned);
            } catch (...) {
                r.pauses--;
                throw;
            }
        }
        r.pauses--;
        if (made) {
            x = made.get();
            r.residents.push_back(std::move(made));
        }
        if (!x || !(x->key == key))
            return nullptr;
    }
    if (x->broken || x->free.size() < nq || r.pauses)
        return nullptr;
    if (!x->running) {
        x->a = planned; /* the index may have grown or moved since it ran */
        start(*x);
    }
    return x;
}

/* Takes a free slot of x for one query (registry locked, room checked). */
uint32_t take_slot(Resident &x)
{
    const uint32_t s = x.free.back();
    x.free.pop_back();
    x.in_flight++;
    x.last_used = std::chrono::steady_clock::now();
    return s;
}

/* Hands a query to the block of slot s; qi, its place in its batch,
 * seeds its random entries as in a launch. */
void publish(Resident &x, uint32_t s, const float *query, uint32_t dim, uint32_t k, uint32_t qi)
{
    std::memcpy(x.queries + (uint64_t)s * x.a.stride, query, dim * sizeof(float));
    x.slot[s].k = k;
    x.slot[s].qi = qi;
    __atomic_store_n(&x.slot[s].state, (uint32_t)kSlotReady, __ATOMIC_RELEASE);
}

} // namespace

ResidentPause::ResidentPause()
{
    Registry &r = registry();
    std::unique_lock<std::mutex> lock(r.m);
    r.pauses++;
    quiesce(lock);
}

ResidentPause::~ResidentPause()
{
    Registry &r = registry();
    std::lock_guard<std::mutex> lock(r.m);
    r.pauses--;
}

void forget_resident(const void *index)
{
    Registry &r = registry();
    std::unique_lock<std::mutex> lock(r.m);
    Resident *target = nullptr;
    for (auto &x : r.residents)
        if (x->key.index == index)
            target = x.get();
    if (!target)
        return;
    r.pauses++;
    quiesce(lock);
    drop(r, target); /* (gone already if another thread dropped it meanwhile) */
    r.pauses--;
}

void stop_resident_for_update(const void *index)
{
    Registry &r = registry();
    std::unique_lock<std::mutex> lock(r.m);
    bool has = false;
    for (auto &x : r.residents)
        has = has || x->key.index == index;
    if (!has)
        return;
    r.pauses++;
    quiesce(lock);
    for (auto &x : r.residents)
        if (x->key.index == index && x->broken) {
            drop(r, x.get());
            break;
        }
    r.pauses--;
}

bool search_resident(const ResidentKey &key, const SearchArgs &planned, uint32_t dim, const float *queries,
                     uint32_t nq, uint32_t k, const QueryDone &done, uint32_t *ids_out, float *distances_out,
                     float *device_ms)
{
    Registry &r = registry();
    Resident *x = nullptr;
    std::vector<uint32_t> mine;
    {
        std::unique_lock<std::mutex> lock(r.m);
        if (k > CAGRA_GPU_MAX_K || !(x = kernel_with_room(lock, key, planned, nq)))
            return false;
        for (uint32_t i = 0; i < nq; i++)
            mine.push_back(take_slot(*x));
    }

    for (uint32_t i = 0; i < nq; i++)
        publish(*x, mine[i], queries + (uint64_t)i * dim, dim, k, i);
    uint64_t first = ~0ULL, last = 0;
    try {
        /* each answer goes out as its block finishes: a batch's first
         * answers need not wait for its slowest walk */
        wait_all_done(*x, mine, [&](uint32_t i) {
            const uint32_t s = mine[i];
            std::memcpy(ids_out + (uint64_t)i * k, x->ids + (uint64_t)s * CAGRA_GPU_MAX_K, k * sizeof(uint32_t));
            std::memcpy(distances_out + (uint64_t)i * k, x->dists + (uint64_t)s * CAGRA_GPU_MAX_K, k * sizeof(float));
            first = std::min(first, x->slot[s].started_ns);
            last = std::max(last, x->slot[s].ended_ns);
            x->slot[s].state = kSlotIdle;
            done(i);
        });
    } catch (...) {
        std::lock_guard<std::mutex> lock(r.m);
        x->broken = true; /* its slots stay taken; the kernel is not trusted again */
        x->in_flight -= nq;
        r.cv.notify_all();
        throw;
    }
    {
        std::lock_guard<std::mutex> lock(r.m);
        x->free.insert(x->free.end(), mine.begin(), mine.end());
        x->in_flight -= nq;
        x->last_used = std::chrono::steady_clock::now();
    }
    r.cv.notify_all();
    *device_ms = last > first ? (float)((last - first) / 1e6) : 0.0f;
    return true;
}

bool resident_start(const ResidentKey &key, const SearchArgs &planned, uint32_t dim, const float *query, uint32_t k,
                    uint64_t tag)
{
    Registry &r = registry();
    std::unique_lock<std::mutex> lock(r.m);
    Resident *x = k > CAGRA_GPU_MAX_K ? nullptr : kernel_with_room(lock, key, planned, 1);
    if (!x)
        return false;
    const uint32_t s = take_slot(*x);
    x->tag[s] = tag;
    x->since[s] = std::chrono::steady_clock::now();
    x->started[s] = 1;
    x->started_count++;
    publish(*x, s, query, dim, k, 0);
    return true;
}

uint32_t resident_collect(int device, uint32_t max, cagra_gpu_resident_done *done, uint32_t *ids_out,
                          float *distances_out, std::string *failure)
{
    Registry &r = registry();
    std::lock_guard<std::mutex> lock(r.m);
    Resident *x = find(r, device);
    if (!x || x->started_count == 0)
        return 0;
    const auto now = std::chrono::steady_clock::now();
    auto oldest = now;
    uint32_t n = 0;
    for (uint32_t s = 0; s < x->slots && n < max; s++) {
        if (!x->started[s])
            continue;
        const bool finished = __atomic_load_n(&x->slot[s].state, __ATOMIC_ACQUIRE) == kSlotDone;
        if (!finished && !x->broken) {
            oldest = std::min(oldest, x->since[s]);
            continue;
        }
        done[n].tag = x->tag[s];
        done[n].k = 0;
        done[n].device_ms = 0.0f;
        if (!x->broken) {
            /* the block published DONE after its rows: they are final */
            const Slot &slot = x->slot[s];
            done[n].k = slot.k;
            done[n].device_ms = slot.ended_ns > slot.started_ns ? (float)((slot.ended_ns - slot.started_ns) / 1e6) : 0.0f;
            std::memcpy(ids_out + (uint64_t)n * CAGRA_GPU_MAX_K, x->ids + (uint64_t)s * CAGRA_GPU_MAX_K,
                        slot.k * sizeof(uint32_t));
            std::memcpy(distances_out + (uint64_t)n * CAGRA_GPU_MAX_K, x->dists + (uint64_t)s * CAGRA_GPU_MAX_K,
                        slot.k * sizeof(float));
            x->slot[s].state = kSlotIdle;
            x->free.push_back(s);
        } /* else its slot stays taken: the kernel is not trusted again */
        x->started[s] = 0;
        x->started_count--;
        x->in_flight--;
        n++;
    }
    if (n > 0)
        r.cv.notify_all();
    if (x->broken) {
        *failure = "the resident search kernel failed";
        return n;
    }
    /* as a waiting caller checks: a kernel that ended, or a query kept too long */
    if (now - oldest >= kBriefWait) {
        DeviceScope scope(x->key.device);
        const cudaError_t err = cudaStreamQuery(x->stream);
        if (err != cudaErrorNotReady) {
            x->broken = true;
            *failure = std::string("the resident search kernel ended: ") +
                       (err == cudaSuccess ? "no error" : cudaGetErrorString(err));
        } else if (now - oldest > kJobTimeout) {
            x->broken = true;
            *failure = "the resident search kernel did not answer within 10 s";
        }
    }
    return n;
}

} // namespace cagra_gpu
