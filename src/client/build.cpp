/*
 * build.cpp — CREATE INDEX offload, backend side: after the heap
 * scan the prepared vectors go to the worker in chunks, the worker builds
 * the graph, and its rows come back in chunks into a BuiltGraph that the
 * access method writes exactly as it writes a CPU-built one.  A failure
 * means a CPU build with a NOTICE, or an ERROR with build_device = gpu;
 * nothing is written before the whole graph is back.
 */
#include "client/client.h"
#include "client/ipc.h"

#include <memory>

extern "C" {
#include "miscadmin.h"
}

void
cagra_worker_require_gpu_build(const char *index_name)
{
	int			backend;

	if (cagra_worker_running(&backend) && backend == CAGRA_BACKEND_GPU)
		return;
	ereport(ERROR,
			(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
			 errmsg("cannot build index \"%s\" on the GPU: no cagra GPU worker is available", index_name),
			 errhint("Use build_device = auto or build_device = cpu.")));
}

static cagra::BuiltGraph *
cagra_new_built_graph(uint64 n, uint32 degree) noexcept
{
	cagra::BuiltGraph *g = nullptr;
	CagraStatus st;

	if (cagra_guard(&st, [&] {
			std::unique_ptr<cagra::BuiltGraph> fresh(new cagra::BuiltGraph());

			fresh->graph.degree = degree;
			fresh->graph.edges.resize(n * degree);
			g = fresh.release();
		}))
		return g;
	return nullptr;
}

typedef struct CagraBuildRequest
{
	uint64		build_id;
	uint64		n;
	dsm_segment *vectors_seg;	/* holds the vectors, or NULL */
	cagra::VectorFormat format;
	cagra::BuildParams params;
} CagraBuildRequest;

/* One BUILD_* call with `body` bytes after the header; the answered call
 * stays attached (caller detaches). */
static bool
cagra_build_call(const CagraBuildRequest *req, CagraRequestKind kind, uint32 first, uint32 count,
				 Size body, const void *in, int timeout_ms, CagraCall *call, char *why, size_t whylen)
{
	if (!cagra_call_init(call, kind, MAXALIGN(sizeof(CagraBuildPayload)) + body))
	{
		strlcpy(why, "no dynamic shared memory segment for the build", whylen);
		return false;
	}
	CagraBuildPayload *p = (CagraBuildPayload *) call->payload;

	p->n = req->n;
	p->format = req->format;
	p->params = req->params;
	p->first = first;
	p->count = count;
	p->segment = DSM_HANDLE_INVALID;
	p->segment_offset = 0;
	if (kind == CAGRA_REQ_BUILD_DATA && req->vectors_seg)
	{
		p->segment = dsm_segment_handle(req->vectors_seg);
		p->segment_offset = (uint64) ((const char *) in - (const char *) dsm_segment_address(req->vectors_seg));
		in = NULL;
	}
	if (in)
		memcpy(cagra_build_body(p), in, body);
	call->build_id = req->build_id;

	CagraCallOutcome o = cagra_call_run(call, timeout_ms);

	if (o != CAGRA_CALL_ANSWERED)
		strlcpy(why, cagra_call_outcome_text(o), whylen);
	else if (call->reply != CAGRA_REPLY_OK)
		strlcpy(why, call->message[0] ? call->message : "the worker refused the build", whylen);
	if (o == CAGRA_CALL_ANSWERED && call->reply == CAGRA_REPLY_OK)
		return true;
	cagra_call_done(call);
	return false;
}

/* Vectors to the worker, the build, rows back into g.  false: why set. */
static bool
cagra_build_on_worker(const CagraBuildRequest *req, const float *vectors, cagra::BuiltGraph *g,
					  void (*report_step) (CagraWorkerBuildStep), char *why, size_t whylen)
{
	Size		header = MAXALIGN(sizeof(CagraBuildPayload));
	Size		vector_bytes = (Size) req->format.dim * sizeof(float);
	uint64		per_chunk = Max((CAGRA_CHUNK_BYTES - header) / vector_bytes, (Size) 1);
	CagraCall	call;

	report_step(CAGRA_WORKER_SEND_VECTORS);
	if (req->vectors_seg)
	{
		/* one call: the worker copies them from where they are, at 2 ms a
		 * megabyte beyond the usual deadline */
		int			timeout = cagra_worker_timeout_ms < 0 ? -1 :
			(int) Min((double) cagra_worker_timeout_ms + (double) req->n * vector_bytes / 500000.0,
					  (double) INT_MAX);

		if (!cagra_build_call(req, CAGRA_REQ_BUILD_DATA, 0, (uint32) req->n, 0, vectors, timeout, &call, why,
							  whylen))
			return false;
		cagra_call_done(&call);
	}
	else
		for (uint64 first = 0; first < req->n; first += per_chunk)
		{
			uint32		count = (uint32) Min(per_chunk, req->n - first);

			if (!cagra_build_call(req, CAGRA_REQ_BUILD_DATA, (uint32) first, count,
								  (Size) count * vector_bytes, vectors + first * req->format.dim,
								  cagra_worker_timeout_ms, &call, why, whylen))
				return false;
			cagra_call_done(&call);
		}

	report_step(CAGRA_WORKER_BUILD_GRAPH);
	/* no deadline: a build takes as long as it takes; cancel still works */
	if (!cagra_build_call(req, CAGRA_REQ_BUILD_RUN, 0, 0, 0, NULL, -1, &call, why, whylen))
		return false;

	CagraBuildPayload *run = (CagraBuildPayload *) call.payload;
	uint32		entries[CAGRA_MAX_ENTRY_NODES];
	uint32		nentries = Min(run->entry_count, (uint32) CAGRA_MAX_ENTRY_NODES);

	CagraStatus st;

	memcpy(entries, run->entries, nentries * sizeof(uint32));
	g->long_edges = run->long_edges;
	cagra_call_done(&call);
	if (!cagra_guard(&st, [&] { g->entry_nodes.assign(entries, entries + nentries); }))
	{
		strlcpy(why, "out of memory", whylen);
		return false;
	}

	uint32		degree = req->params.graph_degree;
	Size		row_bytes = (Size) degree * sizeof(uint32);
	uint64		rows_per_chunk = Max((CAGRA_CHUNK_BYTES - header) / row_bytes, (Size) 1);
	uint32	   *edges = g->graph.edges.data();

	report_step(CAGRA_WORKER_RECEIVE_GRAPH);
	for (uint64 first = 0; first < req->n; first += rows_per_chunk)
	{
		uint32		count = (uint32) Min(rows_per_chunk, req->n - first);

		if (!cagra_build_call(req, CAGRA_REQ_BUILD_FETCH, (uint32) first, count, (Size) count * row_bytes,
							  NULL, cagra_worker_timeout_ms, &call, why, whylen))
			return false;
		memcpy(edges + first * degree, cagra_build_body((CagraBuildPayload *) call.payload),
			   (Size) count * row_bytes);
		cagra_call_done(&call);
	}
	/* never write a graph the core would reject */
	for (uint64 i = 0; i < req->n * degree; i++)
		if (edges[i] >= req->n && edges[i] != cagra::kInvalidNode)
		{
			snprintf(why, whylen, "the worker returned an edge to node %u of %llu",
					 edges[i], (unsigned long long) req->n);
			return false;
		}
	return true;
}

cagra::BuiltGraph *
cagra_worker_build_graph(const char *index_name, const float *vectors, dsm_segment *vectors_seg, uint64 n,
						 const cagra::VectorFormat &format, const cagra::BuildParams &params,
						 bool gpu_required, void (*report_step) (CagraWorkerBuildStep),
						 MemoryContext cxt, bool *on_gpu)
{
	static uint64 builds_started = 0;
	int			backend;
	char		why[256];

	if (n == 0)
		return NULL;
	if (!cagra_worker_running(&backend))
	{
		if (gpu_required)
			cagra_worker_require_gpu_build(index_name);
		return NULL;
	}

	cagra::BuiltGraph *g = cagra_new_built_graph(n, params.graph_degree);

	if (!g)
		ereport(ERROR,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("out of memory for the graph of index \"%s\"", index_name)));
	CagraOwner *owner = cagra_owner_new(cxt, g, cagra_delete_object<cagra::BuiltGraph>);
	CagraBuildRequest req;

	req.build_id = ++builds_started;
	req.n = n;
	req.vectors_seg = vectors_seg;
	req.format = format;
	req.params = params;
	bool		built = cagra_build_on_worker(&req, vectors, g, report_step, why, sizeof(why));

	cagra_mailbox_trim();
	if (built)
	{
		*on_gpu = backend == CAGRA_BACKEND_GPU;
		return g;
	}
	cagra_owner_free(owner);
	if (cagra_worker_shared)
		pg_atomic_fetch_add_u64(&cagra_worker_shared->fallbacks, 1);
	if (gpu_required)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("could not build index \"%s\" on the GPU: %s", index_name, why),
				 errhint("Use build_device = auto to build on the CPU when the GPU fails.")));
	ereport(NOTICE,
			(errmsg("building index \"%s\" on the CPU: the GPU worker failed: %s", index_name, why)));
	return NULL;
}
