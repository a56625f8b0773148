/*
 * cagra_gpu.h — the plain C interface of libcagra_gpu.so: device queries,
 * CAGRA graph builds on the device, device-resident indexes and batched
 * searches.  The GPU worker process opens the library with dlopen() and
 * resolves these names; nothing here uses C++ or PostgreSQL types.
 *
 * Conventions
 *   - Every call returns a cagra_gpu_status.  On failure the thread's last
 *     error message (cagra_gpu_last_error) says what went wrong.
 *   - Vectors are row-major and already prepared for the metric the way
 *     src/core's prepare_vector() does it (cosine: normalised to unit
 *     length, distance = 1 - dot).  Metric values equal cagra::Metric.
 *   - A graph is n rows of `degree` uint32 ids, row-major, no self edge,
 *     no duplicate; CAGRA_GPU_INVALID_NODE pads rows only when n <= degree.
 *   - An index handle may be used by one thread at a time.
 */
#ifndef CAGRA_GPU_H
#define CAGRA_GPU_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define CAGRA_GPU_EXPORT __attribute__((visibility("default")))
#else
#define CAGRA_GPU_EXPORT
#endif

/* Bumped whenever a signature, struct or enum below changes (5: the L1
 * metric; 6: device time of a search, searches of a node list; 7:
 * ctas_per_query; 8: resident; 10: each query's answer as it is final,
 * lone queries started and collected; 12: a build's result struct; 13: the
 * image a device runs; 14: updates of a loaded index; 15: distances of
 * given pairs); compare cagra_gpu_api_version() with this after dlopen(). */
#define CAGRA_GPU_API_VERSION 15

#define CAGRA_GPU_INVALID_NODE 0xFFFFFFFFu
#define CAGRA_GPU_MAX_K 512
#define CAGRA_GPU_MAX_ITOPK 512
#define CAGRA_GPU_MAX_STEP_CANDIDATES 4096 /* search_width x graph degree */
#define CAGRA_GPU_MAX_CTAS_PER_QUERY 64

typedef enum {
    CAGRA_GPU_OK = 0,
    CAGRA_GPU_NO_DEVICE = 1,        /* no usable CUDA device or driver */
    CAGRA_GPU_OUT_OF_MEMORY = 2,    /* the device has too little free memory */
    CAGRA_GPU_INVALID_ARGUMENT = 3, /* a parameter out of range; nothing was done */
    CAGRA_GPU_DEVICE_ERROR = 4,     /* any other CUDA failure */
    CAGRA_GPU_CANCELLED = 5         /* the caller's cancel flag stopped a build */
} cagra_gpu_status;

typedef enum {
    CAGRA_GPU_L2 = 0,            /* squared Euclidean distance */
    CAGRA_GPU_INNER_PRODUCT = 1, /* negative inner product */
    CAGRA_GPU_COSINE = 2,        /* 1 - dot of unit vectors */
    CAGRA_GPU_L1 = 3             /* sum of absolute differences (taxicab) */
} cagra_gpu_metric;

typedef enum {
    CAGRA_GPU_FLOAT32 = 0,
    CAGRA_GPU_FLOAT16 = 1 /* IEEE half, stored as uint16_t */
} cagra_gpu_dtype;

typedef struct {
    char name[256];
    uint64_t total_memory; /* bytes */
    uint64_t free_memory;  /* bytes, at the time of the call */
    int compute_major;
    int compute_minor;
    int multiprocessors;
    /* The image of the library's kernels this device runs, as major * 10 +
     * minor: the cubin's architecture (binary_version) and the PTX it came
     * from (ptx_version); binary_version above ptx_version means the driver
     * compiled the PTX for this device at load. */
    int binary_version;
    int ptx_version;
} cagra_gpu_device_info;

typedef struct {
    uint32_t graph_degree;              /* out-degree of the final graph */
    uint32_t intermediate_degree;       /* out-degree of the kNN graph, >= graph_degree */
    uint32_t nn_descent_max_iterations; /* >= 1 */
    float nn_descent_termination;       /* stop when updates < this * n * intermediate_degree */
    uint64_t seed;
    /* NULL, or a flag another thread sets to non-zero to stop the build: it
     * is read between NN-descent iterations and between the build's steps,
     * and the build then returns CAGRA_GPU_CANCELLED. */
    const volatile int *cancel;
} cagra_gpu_build_params;

typedef struct {
    uint32_t itopk_size;     /* candidates kept, k <= itopk_size <= 512 */
    uint32_t search_width;   /* parents expanded per iteration, >= 1 */
    uint32_t max_iterations; /* 0: chosen from itopk_size and search_width */
    uint32_t random_entries; /* random entry nodes besides the fixed ones */
    uint64_t seed;
    /* Thread blocks that search each query together.  0: the library
     * chooses: for batches of up to 64 queries with itopk_size <= 128
     * (which one block per query leaves the device idle for), 16 blocks
     * per query up to 16 queries and 8 beyond, each expanding
     * search_width parents a step but at most an eighth of its buffer and
     * at most 512 KB of vectors; else one block per query.
     * 1: one block per query; 2..CAGRA_GPU_MAX_CTAS_PER_QUERY: that many
     * at search_width each, raised to itopk_size / the block's own buffer
     * and lowered where k asks for large hand-ins.  With several blocks
     * per query, each keeps a buffer of its own (itopk_size rounded up to
     * a power of two, 32 to 128), expands no parent farther than the
     * blocks' itopk_size-th nearest so far, and stops after at most
     * max_iterations steps (0: chosen from its buffer and width).  Results
     * then may differ between runs: which block measures a node first
     * varies. */
    uint32_t ctas_per_query;
    /* 1: an unfiltered batch of cagra_gpu_search_in over rows of at most
     * 1 KB (256 float32 or 512 float16 dimensions) goes to the device's
     * resident kernel, which stays running between searches: a thread
     * block on each of half the multiprocessors (the others stay free for
     * any other kernel), each serving one query at a time at
     * search_width (as ctas_per_query 1 would), with no launch or copy
     * through the driver; the caller spins on the answer.  One such kernel
     * runs per device, for the index and settings that used it first (an
     * idle one gives way after 200 ms); a batch it cannot take now (more
     * queries than free blocks, another index's kernel busy, an allocation
     * of the library under way) is launched as with 0.  The kernel stops
     * while the library allocates or frees device memory, and when the
     * index is freed.  0: every batch is launched. */
    uint32_t resident;
} cagra_gpu_search_params;

typedef struct cagra_gpu_index cagra_gpu_index;
typedef struct cagra_gpu_search_context cagra_gpu_search_context;

/* Library version, e.g. "0.1.0", and CAGRA_GPU_API_VERSION it was built with. */
CAGRA_GPU_EXPORT const char *cagra_gpu_version(void);
CAGRA_GPU_EXPORT int cagra_gpu_api_version(void);

/* The message of the last failed call on this thread ("" after success). */
CAGRA_GPU_EXPORT const char *cagra_gpu_last_error(void);

/* Defaults: those of cagra::BuildParams and cagra::SearchParams
 * (src/core/types.h), the one place each default is set; search_width as
 * cagra::gpu_search_params resolves the automatic one (1: this API has no
 * automatic width). */
CAGRA_GPU_EXPORT void cagra_gpu_default_build_params(cagra_gpu_build_params *params);
CAGRA_GPU_EXPORT void cagra_gpu_default_search_params(cagra_gpu_search_params *params);

/* Number of usable devices.  Any CUDA error (no driver, driver too old)
 * gives *count = 0 and CAGRA_GPU_NO_DEVICE; it never aborts. */
CAGRA_GPU_EXPORT cagra_gpu_status cagra_gpu_device_count(int *count);
/* What device `device` is and the image it runs.  CAGRA_GPU_NO_DEVICE, with
 * the reason in cagra_gpu_last_error(), when the library has no image the
 * device can run (an architecture it was not built for, PTX newer than the
 * driver). */
CAGRA_GPU_EXPORT cagra_gpu_status cagra_gpu_get_device_info(int device, cagra_gpu_device_info *info);

/* Device bytes a build or a loaded index needs (estimates from the same
 * formulas the calls check against free memory before allocating). */
CAGRA_GPU_EXPORT cagra_gpu_status cagra_gpu_build_memory(uint64_t n, uint32_t dim, const cagra_gpu_build_params *params,
                                                         uint64_t *bytes);
CAGRA_GPU_EXPORT cagra_gpu_status cagra_gpu_index_memory(uint64_t n, uint32_t dim, uint32_t degree,
                                                         cagra_gpu_dtype dtype, uint64_t *bytes);

/*
 * What a build made besides the graph, and what it did, for the caller's
 * logs (the library writes nothing to stderr).  The seconds are the host's
 * clock after the device finished each step; steps a build skipped take 0.
 */
typedef struct {
    uint32_t entry_count; /* entry nodes written to entries_out */
    /* 1: the navigation probe missed more than the core's kLongEdgeMissRate
     * of its nodes, and the build added long edges (the entries then are
     * long-edge nodes); 0: no long edges */
    int long_edges;
    float probe_miss_rate; /* the probe's misses on the graph without long edges; 0: not probed (n < 2048) */
    uint64_t connect_links; /* links the connect step added so that the entry reaches every node */
    /* nodes the first entry still does not reach after the connect step's
     * bounded passes; 0 for a final graph, else the caller must connect them */
    uint64_t unreached;
    double upload_seconds;     /* the rows to the device, as fp16 */
    double knn_seconds;        /* NN-descent (exact up to 1024 nodes) */
    double optimize_seconds;   /* pruning, reverse edges, merge */
    double connect_seconds;    /* the central entry and the connect steps */
    double entries_seconds;    /* the farthest-point entry nodes */
    double probe_seconds;      /* the navigation probe */
    double long_edges_seconds; /* the long edges */
    double download_seconds;   /* the graph to the host */
} cagra_gpu_build_result;

/*
 * Build a CAGRA graph on `device` from n x dim float32 host vectors.
 * graph_out: caller buffer of n * graph_degree uint32.
 * entries_out: caller buffer of entry_capacity uint32 (may be 0/NULL), the
 * entry nodes searches start from, the first the one every node is
 * connected to.  result: NULL, or what the build made and did.
 */
CAGRA_GPU_EXPORT cagra_gpu_status cagra_gpu_build(int device, const float *data, uint64_t n, uint32_t dim,
                                                  cagra_gpu_metric metric, const cagra_gpu_build_params *params,
                                                  uint32_t *graph_out, uint32_t *entries_out, uint32_t entry_capacity,
                                                  cagra_gpu_build_result *result);

/* Only the first step of a build: the kNN graph by NN-descent (exact up to
 * 1024 nodes), n x intermediate_degree ids into knn_out, nearest first,
 * CAGRA_GPU_INVALID_NODE padding when n - 1 < intermediate_degree. */
CAGRA_GPU_EXPORT cagra_gpu_status cagra_gpu_build_knn(int device, const float *data, uint64_t n, uint32_t dim,
                                                      cagra_gpu_metric metric, const cagra_gpu_build_params *params,
                                                      uint32_t *knn_out);

/* Copy vectors (n x dim, dtype) and the graph to the device.  The host
 * buffers may be freed after the call. */
CAGRA_GPU_EXPORT cagra_gpu_status cagra_gpu_index_load(int device, const void *vectors, cagra_gpu_dtype dtype,
                                                       uint64_t n, uint32_t dim, const uint32_t *graph, uint32_t degree,
                                                       cagra_gpu_metric metric, const uint32_t *entries,
                                                       uint32_t entry_count, cagra_gpu_index **index);

/*
 * Bring a loaded index to n nodes (n at least its count so far), as inserts
 * changed it: node_count nodes written whole, their vectors (node_count x
 * dim of the index's dtype, host) and rows (node_count x degree), first the
 * appended nodes (ids from the index's count to n - 1, in order), then any
 * others below n (slots taken again); row_count other rows replaced
 * (row_ids, rows: row_count x degree); and the entry nodes, as
 * cagra_gpu_index_load takes them.  Edges point below n or are
 * CAGRA_GPU_INVALID_NODE.  No search of the index may run during the call
 * (its resident kernel is stopped, and starts again with the next search).
 * The device buffers grow by at least a quarter when appended nodes need
 * room, so a stream of small updates rarely moves them.
 */
CAGRA_GPU_EXPORT cagra_gpu_status cagra_gpu_index_update(cagra_gpu_index *index, uint64_t n,
                                                         const uint32_t *node_ids, const void *node_vectors,
                                                         const uint32_t *node_rows, uint32_t node_count,
                                                         const uint32_t *row_ids, const uint32_t *rows,
                                                         uint32_t row_count, const uint32_t *entries,
                                                         uint32_t entry_count);

/*
 * Search nq prepared float32 queries (nq x dim, host) for their k nearest
 * nodes.  filter: NULL, or ceil(n / 64) uint64 words where bit (i % 64) of
 * word i / 64 set means node i may be returned; other nodes are traversed
 * but never returned (and leave the candidates once expanded, so that they
 * fill with nodes that pass; with a selective filter, raise itopk_size and
 * max_iterations by the inverse of the pass rate, or use
 * cagra_gpu_search_nodes).  ids_out / distances_out: nq x k, each row
 * sorted by exact float32 distance; rows with fewer than k results are
 * padded with CAGRA_GPU_INVALID_NODE and +infinity.
 */
CAGRA_GPU_EXPORT cagra_gpu_status cagra_gpu_search(cagra_gpu_index *index, const float *queries, uint32_t nq,
                                                   uint32_t k, const cagra_gpu_search_params *params,
                                                   const uint64_t *filter, uint32_t *ids_out, float *distances_out);

/*
 * A search context: a CUDA stream and the scratch buffers of one search at a
 * time on one device.  Searches through different contexts may run at the
 * same time, from different threads, on the same index (each index also has
 * a context of its own, which cagra_gpu_search uses).  One thread at a time
 * uses a context.  Launched searches through a created context wait for
 * the device without spinning, so threads that wait leave the host's cores
 * to others; resident ones (params.resident) spin, then yield.
 */
CAGRA_GPU_EXPORT cagra_gpu_status cagra_gpu_search_context_create(int device, cagra_gpu_search_context **context);
CAGRA_GPU_EXPORT void cagra_gpu_search_context_free(cagra_gpu_search_context *context);

/* cagra_gpu_search through `context`, which must be on the index's device. */
CAGRA_GPU_EXPORT cagra_gpu_status cagra_gpu_search_in(cagra_gpu_search_context *context, cagra_gpu_index *index,
                                                      const float *queries, uint32_t nq, uint32_t k,
                                                      const cagra_gpu_search_params *params, const uint64_t *filter,
                                                      uint32_t *ids_out, float *distances_out);

/*
 * Called as the answer of one query of a search through `context` is final:
 * its row of ids_out and distances_out will not change again.  The resident
 * kernel finishes each query on its own, so a caller may hand that row on
 * while the batch's other queries are still searched.  It runs on the
 * searching thread, inside cagra_gpu_search_in, at most once a query, in any
 * order; queries it was not called for are final when the search returns
 * CAGRA_GPU_OK (a launched batch finishes all at once and calls nothing).
 * It must not throw or call this library.
 */
typedef void (*cagra_gpu_query_done_fn)(void *arg, uint32_t query);

/* Set (fn NULL: clear) the hook of the searches through `context`. */
CAGRA_GPU_EXPORT void cagra_gpu_search_context_on_query_done(cagra_gpu_search_context *context,
                                                             cagra_gpu_query_done_fn fn, void *arg);

/*
 * Lone queries through the device's resident kernel without waiting, for a
 * caller that keeps many in flight and answers each as soon as it is done
 * (the worker's index scans): cagra_gpu_resident_start hands `query` to a
 * free block of the kernel, as cagra_gpu_search_in would search a batch of
 * one with params.resident, and returns at once; *started is 0 when the
 * kernel cannot take it now (rows above 1 KB, another index's or other
 * settings' kernel busy, every block busy, an allocation of the library
 * under way): search it with cagra_gpu_search_in then.  `tag` is the
 * caller's, given back with the answer.
 */
CAGRA_GPU_EXPORT cagra_gpu_status cagra_gpu_resident_start(cagra_gpu_index *index, const float *query, uint32_t k,
                                                           const cagra_gpu_search_params *params, uint64_t tag,
                                                           int *started);

/* One answer of cagra_gpu_resident_collect. */
typedef struct {
    uint64_t tag;    /* cagra_gpu_resident_start's */
    uint32_t k;      /* ids and distances in its rows; 0 when the kernel failed */
    float device_ms; /* its block's time on the device */
} cagra_gpu_resident_done;

/* Up to `max` queries started on `device` whose answers are done, never
 * waiting: their tags into done[], the i-th one's k ids and distances (as
 * cagra_gpu_search_in gives them) into the i-th row of ids_out and
 * distances_out, rows of CAGRA_GPU_MAX_K entries; *count: how many.  The
 * kernel ended, faulted or kept a query 10 s: CAGRA_GPU_DEVICE_ERROR (why:
 * cagra_gpu_last_error), and its started queries come back with k 0, up to
 * `max` a call.  Call it from one thread at a time, while any is started. */
CAGRA_GPU_EXPORT cagra_gpu_status cagra_gpu_resident_collect(int device, uint32_t max,
                                                             cagra_gpu_resident_done *done, uint32_t *ids_out,
                                                             float *distances_out, uint32_t *count);

/* Milliseconds the device spent on the last search (or measure of pairs)
 * through a created `context` (query copy, kernel, result copy, timed by
 * CUDA events; served by the resident kernel: from its first job's start
 * to its last one's end by the device's clock), or a negative value when
 * there was none. */
CAGRA_GPU_EXPORT float cagra_gpu_search_context_device_ms(cagra_gpu_search_context *context);

/* What the searches through `context` did since it was made, for
 * profiles: the queries of launched batches walked by one thread block
 * each, the distances those walks computed and the iterations they took.
 * Other searches (the resident kernel, several blocks per query, node
 * lists) are not counted. */
typedef struct {
    uint64_t queries;
    uint64_t distances;
    uint64_t iterations;
} cagra_gpu_search_stats;
CAGRA_GPU_EXPORT cagra_gpu_status cagra_gpu_search_context_stats(const cagra_gpu_search_context *context,
                                                                 cagra_gpu_search_stats *stats);
/* The same for the index's own context (cagra_gpu_search). */
CAGRA_GPU_EXPORT cagra_gpu_status cagra_gpu_index_search_stats(const cagra_gpu_index *index,
                                                               cagra_gpu_search_stats *stats);

/* 1 when the resident kernel served the last search through `context`
 * (params.resident), 0 when it was launched or there was none. */
CAGRA_GPU_EXPORT int cagra_gpu_search_context_resident(const cagra_gpu_search_context *context);

/*
 * The k nearest of `count` given nodes (distinct ids below the index's n,
 * host memory) for each of nq queries: every distance is computed, so the
 * answer is exact; for filters that let so few nodes pass that measuring
 * each costs less than a traversal.  Outputs as cagra_gpu_search.
 */
CAGRA_GPU_EXPORT cagra_gpu_status cagra_gpu_search_nodes(cagra_gpu_index *index, const float *queries, uint32_t nq,
                                                         uint32_t k, const uint32_t *nodes, uint32_t count,
                                                         uint32_t *ids_out, float *distances_out);
CAGRA_GPU_EXPORT cagra_gpu_status cagra_gpu_search_nodes_in(cagra_gpu_search_context *context, cagra_gpu_index *index,
                                                            const float *queries, uint32_t nq, uint32_t k,
                                                            const uint32_t *nodes, uint32_t count, uint32_t *ids_out,
                                                            float *distances_out);

/* The first end of a pair that is one of the call's queries rather than a
 * node: this bit set, the query's index in the low bits. */
#define CAGRA_GPU_PAIR_QUERY 0x80000000u

/*
 * The distances of `count` pairs of vectors, as the core's kernel of the
 * index's metric gives them (cagra::metric_kernel: squared L2, negative
 * inner product, 1 - dot, sum of absolute differences; the values the
 * searches return): pair i runs from from[i], a node id below the index's
 * n or CAGRA_GPU_PAIR_QUERY | q for the q-th of the nq prepared float32
 * queries (nq x dim, may be NULL when nq is 0), to the node to[i] (below
 * n); its distance into distances_out[i].  Every array in host memory;
 * every id checked before anything is copied.  For the worker's planning
 * of inserts (a new vector against nodes and nodes against each other).
 * Runs on the context's stream and waits for it; the context's buffers
 * are kept, so small calls allocate nothing after the first.
 */
CAGRA_GPU_EXPORT cagra_gpu_status cagra_gpu_measure_pairs_in(cagra_gpu_search_context *context, cagra_gpu_index *index,
                                                             const float *queries, uint32_t nq, const uint32_t *from,
                                                             const uint32_t *to, uint64_t count, float *distances_out);

/* Device bytes the index holds, and its shape. */
CAGRA_GPU_EXPORT uint64_t cagra_gpu_index_device_bytes(const cagra_gpu_index *index);

CAGRA_GPU_EXPORT void cagra_gpu_index_free(cagra_gpu_index *index);

#ifdef __cplusplus
}
#endif

#endif /* CAGRA_GPU_H */
