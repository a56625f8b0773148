/*
 * client.h — the backend's side of the GPU worker protocol: what the access
 * method calls to search through the worker and to build a graph on it.
 * Every function either serves the request through the worker or says it
 * did not (the caller then runs the CPU path): a failed offload never
 * raises an error, except where the user demanded the GPU (cagra.device =
 * gpu, build_device = gpu).  A backend says once, with a NOTICE, that it
 * fell back to the CPU because the worker failed.
 *
 * The client knows node ids, vectors and rows, not index pages: the access
 * method fills an index copy's upload chunks (CagraCopySource) and turns
 * the returned ids into heap rows.
 */
#pragma once

#include "boundary/boundary.h"
#include "client/ipc.h"
#include "protocol/protocol.h"

extern "C" {
#include "utils/palloc.h"
}

typedef enum CagraOffload
{
	CAGRA_OFFLOAD_OK,
	CAGRA_OFFLOAD_SKIPPED,		/* not offloaded for an ordinary reason (copy loading, no slot) */
	CAGRA_OFFLOAD_FAILED		/* the worker failed: fall back and tell */
} CagraOffload;

/* True when this search should go to the worker (cagra.device and worker
 * state); ERROR when cagra.device = gpu and it cannot. */
bool		cagra_client_wants_worker(const char *what);

/* Whether searches go to the worker now, without an error (the planner's
 * question). */
bool		cagra_client_worker_serves_searches(void);

/* Count a fallback; the first of the session also gets a NOTICE. */
void		cagra_client_note_fallback(const char *what, const char *why);

/* The search did not run on the worker: an ERROR with cagra.device = gpu,
 * else counted (and, for a failure, the session's first NOTICE). */
void		cagra_client_search_fallback(CagraOffload r, const char *why);

/* ---- searches ---- */

/*
 * Where the nodes of an index copy come from when the worker has none of
 * this generation: the access method reads them from its pages.
 */
typedef struct CagraCopySource
{
	cagra::VectorFormat format;
	uint32		degree;
	uint32		entry_count;
	const uint32 *entries;
	uint32		chunk_nodes;	/* chunks start at multiples of this many nodes */
	/* Fill nodes [p->first, p->first + p->count) of the n the copy holds:
	 * vectors, rows (edges to nodes >= n as kInvalidNode), live flags and
	 * heap TIDs (cagra_pack_tid).  May ereport. */
	void		(*fill) (void *arg, uint32 n, CagraUploadPayload *p);
	void	   *arg;
} CagraCopySource;

/* The rows a filtered search may return: their heap TIDs as the index
 * holds them (HOT chains' roots), packed (cagra_pack_tid) and ascending. */
typedef struct CagraAllowedTids
{
	const uint64 *tids;
	uint32		count;
} CagraAllowedTids;

static inline bool
cagra_allowed_tid(const CagraAllowedTids *allowed, uint64 packed)
{
	uint32		lo = 0,
				hi = allowed->count;

	while (lo < hi)
	{
		uint32		mid = lo + (hi - lo) / 2;

		if (allowed->tids[mid] < packed)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < allowed->count && allowed->tids[lo] == packed;
}

/*
 * nq prepared queries against the copy of `key` (uploaded from `source`
 * first when the worker asks for it): nq x req->k node ids
 * (cagra::kInvalidNode padding), distances and, unless tids is NULL, the
 * heap TIDs the worker's copy has for them (cagra_pack_tid); *copy: what
 * the copy holds (nodes from copy->n to key->n, and slots reused after
 * copy->reused, are the caller's to search).  With `allowed` only nodes of
 * the rows it names are returned: the worker maps their TIDs to its copy's
 * nodes and searches such a request alone, widened for its pass rate
 * (docs/worker.md).
 *
 * The copy is of the generation the meta page showed after the caller's
 * snapshot was taken, so under an MVCC snapshot its TIDs may be used
 * without reading the node headers: a node vacuum removed since then has a
 * dead tuple, or a line pointer reused by a tuple newer than the snapshot,
 * which the heap check rejects either way.
 *
 * With req->plans_inserts each query is a new node's vector, and `plans`
 * takes the worker's insert plan of each (nq x cagra_insert_plan_words of
 * the index's degree; protocol.h), made from its copy: its nodes only.
 */
CagraOffload cagra_client_search(const CagraIndexKey *key, const CagraCopySource *source,
								 const CagraSearchRequest *req, uint32 nq, const float *queries,
								 const CagraAllowedTids *allowed, uint32 *ids, float *dists, uint64 *tids,
								 uint32 *plans, CagraCopyExtent *copy, char *why, size_t whylen);

/* Whether this backend may read an update for the worker (one backend at a
 * time: others would read the same nodes, and the worker take only the
 * first); true until cagra_client_release_update.  A claim held longer
 * than cagra.worker_timeout (its backend gone) is taken over. */
bool		cagra_client_claim_update(void);
void		cagra_client_release_update(void);

/*
 * Send the worker's copy of extent `base` what inserts changed since, to
 * bring it to `key` without a whole upload (docs/worker.md): `nodes` nodes
 * whole and `rows` rows alone, filled into the UPDATE payload by
 * fill(arg, p) (everything after its header but the entry nodes; the
 * header's counts, format, degree and base are set).  True when the copy
 * took them; false when it did not (another backend's update came first,
 * the copy has grown too much, a whole upload is due, no worker): the
 * caller merges the tail as before.  Never an ERROR but fill's.
 */
bool		cagra_client_update_copy(const CagraIndexKey *key, const CagraCopyExtent *base,
									 const cagra::VectorFormat &format, uint32 degree, uint32 nodes, uint32 rows,
									 void (*fill) (void *arg, CagraUpdatePayload *p), void *arg);

/*
 * One search request queued without waiting for it, so that the backend
 * works (settles an earlier batch's rows) while the worker searches.
 * cagra_client_search_begin makes a request for nq queries as
 * cagra_client_search would send them, when they fit the backend's mailbox
 * in one request and no filter goes with them, and returns where the
 * caller writes the nq prepared queries (nq x dim floats; NULL: no
 * request).  Writing them there saves a copy of every query: 40 MB for
 * 10,000 queries of 1,024 dimensions.  cagra_client_search_queue queues it
 * (false: not queued).  cagra_client_search_finish waits for the answer:
 * OK with ids, dists, tids and *copy as cagra_client_search gives them,
 * SKIPPED when the worker did not search (no copy of this generation,
 * another session loading it, no slot, no worker: the caller searches the
 * usual way, which uploads the copy or searches on the CPU), FAILED with
 * `why` when it failed (time-out, worker gone, error).  The queries stay
 * readable until cagra_client_search_release gives the request back (and
 * takes it from the worker, when still queued): on every path, errors
 * included, and before any other request of the backend, which may reuse
 * the mailbox.  Releasing twice, or a request never begun that was zeroed,
 * is harmless.
 */
typedef struct CagraSearchPending
{
	CagraCall	call;
	CagraPendingCall wait;
	uint32		nq;
	uint32		k;
} CagraSearchPending;

float	   *cagra_client_search_begin(const CagraIndexKey *key, uint32 dim, const CagraSearchRequest *req,
									  uint32 nq, CagraSearchPending *pending);
bool		cagra_client_search_queue(CagraSearchPending *pending);
CagraOffload cagra_client_search_finish(CagraSearchPending *pending, uint32 *ids, float *dists, uint64 *tids,
										CagraCopyExtent *copy, char *why, size_t whylen);
void		cagra_client_search_release(CagraSearchPending *pending);

/* ---- builds ---- */

/* ERROR unless the GPU worker can build index `index_name` (build_device =
 * gpu; called before the heap scan). */
void		cagra_client_require_gpu_build(const char *index_name);

/* The steps of a build on the worker, as the backend sees them. */
typedef enum CagraWorkerBuildStep
{
	CAGRA_WORKER_BUILD_GRAPH,	/* the worker builds (kNN graph and pruning) */
	CAGRA_WORKER_RECEIVE_GRAPH	/* the graph's rows back into the backend */
} CagraWorkerBuildStep;

/*
 * A build whose vectors go to the worker in chunks while the heap scan
 * runs: what every participant of the scan needs to send its own.  Plain
 * data, so a parallel scan keeps it in its shared memory.
 */
typedef struct CagraBuildStream
{
	int32		owner;			/* the backend that leads the build */
	uint64		build_id;
	int			backend;		/* CAGRA_BACKEND_* of the worker it streams to */
	cagra::VectorFormat format;
	cagra::BuildParams params;
} CagraBuildStream;

/* Rows of `dim` dimensions one chunk of a stream carries. */
uint32		cagra_build_stream_rows(uint32 dim);

/* Start streaming a build's vectors: false when no worker runs. */
bool		cagra_client_build_open(const cagra::VectorFormat &format, const cagra::BuildParams &params,
									CagraBuildStream *stream);

/* Nodes first .. first + count - 1 to the worker: copied into a request
 * that is queued, so the caller may reuse `vectors` and go on while the
 * worker takes them; the answer is read at the next send or flush.  false,
 * with why set, when the worker did not take these or the chunk before
 * (the build then goes on without the stream). */
bool		cagra_client_build_send(const CagraBuildStream *stream, uint64 first, uint32 count,
									const float *vectors, char *why, size_t whylen);

/* Wait for the answer to this process's last chunk: at the end of its part
 * of the scan.  false, with why set, when the worker did not take it. */
bool		cagra_client_build_flush(char *why, size_t whylen);

/* Give back the chunk in flight, unanswered: on an error of the scan. */
void		cagra_client_build_abandon(void);

/*
 * Build the graph of the n vectors streamed to the worker.  On success
 * returns a BuiltGraph owned by memory context `cxt` (deleted with it) and
 * sets *on_gpu (false: the worker's CPU engine built it).  NULL: build on
 * the CPU in the backend (a NOTICE said why); with gpu_required a failure
 * is an ERROR instead.  stream_failure: why the stream broke during the
 * scan, else NULL.  report_step(step) is called as each step starts.
 */
cagra::BuiltGraph *cagra_client_build_graph(const char *index_name, const CagraBuildStream *stream, uint64 n,
											const char *stream_failure, bool gpu_required,
											void (*report_step) (CagraWorkerBuildStep step),
											MemoryContext cxt, bool *on_gpu);
