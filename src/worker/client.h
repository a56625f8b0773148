/*
 * client.h — what the access method and the SQL functions call to use the
 * GPU worker.  Every function either serves the request through the worker
 * or says it did not (the caller then runs the CPU path): a failed offload
 * never raises an error, except where the user demanded the GPU
 * (cagra.device = gpu, build_device = gpu).  A backend says once, with a
 * NOTICE, that it fell back to the CPU because the worker failed.
 */
#pragma once

#include "am/cagra_am.h"
#include "core/build.h"

/* ---- index scans ---- */

/* The worker's answer for one ORDER BY query: heap TIDs in distance order,
 * the copy's own (under an MVCC snapshot), else mapped lazily from node ids
 * through the index pages. */
typedef struct CagraWorkerScan CagraWorkerScan;

/* Ask the worker for the `want` nearest nodes of `raw_query` (not yet
 * prepared for the metric).  NULL: search on the CPU. */
CagraWorkerScan *cagra_worker_scan_begin(Relation index, const CagraMetaData *meta,
										 const float *raw_query, uint32 want, bool mvcc_snapshot);

/* Next live result (TID and operator value); false when exhausted. */
bool		cagra_worker_scan_next(CagraWorkerScan *ws, ItemPointer tid, double *value);

/* After the worker's results: true when a CPU continuation result must be
 * skipped (already returned, or closer than the last one returned). */
bool		cagra_worker_scan_skip(CagraWorkerScan *ws, ItemPointer tid, double value);

/* The meta page the worker's search was made for (the CPU continuation
 * uses the same). */
const CagraMetaData *cagra_worker_scan_meta(const CagraWorkerScan *ws);

/* NULL is allowed. */
void		cagra_worker_scan_end(CagraWorkerScan *ws);

/* ---- builds ---- */

/* ERROR unless build_device = gpu can be served (called before the heap scan). */
void		cagra_worker_check_build_device(Relation index, int build_device);

/*
 * Build the graph of n prepared vectors on the worker.  On success returns
 * a BuiltGraph owned by memory context `cxt` (deleted with it) and sets
 * *device to CAGRA_DEVICE_GPU or CAGRA_DEVICE_CPU (the worker's engine).
 * NULL: build on the CPU in the backend (a NOTICE said why, when the worker
 * failed); with build_device = gpu a failure is an ERROR instead.
 */
cagra::BuiltGraph *cagra_worker_build_graph(Relation index, const float *vectors, uint64 n,
											uint32 dims, cagra::Metric metric, uint32 graph_degree,
											uint32 intermediate_degree, int build_device,
											MemoryContext cxt, uint32 *device);
