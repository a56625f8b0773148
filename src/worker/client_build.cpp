/*
 * client_build.cpp — CREATE INDEX offload, backend side: after the heap
 * scan the prepared vectors go to the worker in chunks, the worker builds
 * the graph, and its rows come back in chunks into a BuiltGraph that the
 * access method writes exactly as it writes a CPU-built one.  A failure
 * means a CPU build with a NOTICE, or an ERROR with build_device = gpu;
 * nothing is written before the whole graph is back.
 */
#include "worker/client.h"
#include "worker/ipc.h"
#include "worker/search.h"

extern "C" {
#include "commands/progress.h"
#include "miscadmin.h"
#include "pgstat.h"
}

void
cagra_worker_check_build_device(Relation index, int build_device)
{
	int			backend;

	if (build_device != CAGRA_DEVICE_GPU)
		return;
	if (cagra_worker_running(&backend) && backend == CAGRA_BACKEND_GPU)
		return;
	ereport(ERROR,
			(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
			 errmsg("cannot build index \"%s\" on the GPU: no cagra GPU worker is available",
					RelationGetRelationName(index)),
			 errhint("Use build_device = auto or build_device = cpu.")));
}

static cagra::BuiltGraph *
cagra_new_built_graph(uint64 n, uint32 degree) noexcept
{
	try
	{
		cagra::BuiltGraph *g = new cagra::BuiltGraph();

		try
		{
			g->graph.degree = degree;
			g->graph.edges.resize(n * degree);
		}
		catch (...)
		{
			delete g;
			return nullptr;
		}
		return g;
	}
	catch (...)
	{
		return nullptr;
	}
}

static bool
cagra_set_entries(cagra::BuiltGraph *g, const uint32 *entries, uint32 count) noexcept
{
	try
	{
		g->entry_nodes.assign(entries, entries + count);
		return true;
	}
	catch (...)
	{
		return false;
	}
}

typedef struct CagraBuildRequest
{
	uint64		build_id;
	uint64		n;
	uint32		dims;
	uint32		metric;
	uint32		graph_degree;
	uint32		intermediate_degree;
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
	p->dim = req->dims;
	p->metric = req->metric;
	p->graph_degree = req->graph_degree;
	p->intermediate_degree = req->intermediate_degree;
	p->first = first;
	p->count = count;
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
					  char *why, size_t whylen)
{
	Size		header = MAXALIGN(sizeof(CagraBuildPayload));
	uint64		per_chunk = Max((CAGRA_CHUNK_BYTES - header) / ((Size) req->dims * sizeof(float)), (Size) 1);
	CagraCall	call;

	for (uint64 first = 0; first < req->n; first += per_chunk)
	{
		uint32		count = (uint32) Min(per_chunk, req->n - first);

		if (!cagra_build_call(req, CAGRA_REQ_BUILD_DATA, (uint32) first, count,
							  (Size) count * req->dims * sizeof(float), vectors + first * req->dims,
							  cagra_worker_timeout_ms, &call, why, whylen))
			return false;
		cagra_call_done(&call);
	}

	pgstat_progress_update_param(PROGRESS_CREATEIDX_SUBPHASE, CAGRA_PHASE_KNN);
	/* no deadline: a build takes as long as it takes; cancel still works */
	if (!cagra_build_call(req, CAGRA_REQ_BUILD_RUN, 0, 0, 0, NULL, -1, &call, why, whylen))
		return false;

	CagraBuildPayload *run = (CagraBuildPayload *) call.payload;
	uint32		entries[CAGRA_MAX_ENTRY_NODES];
	uint32		nentries = Min(run->entry_count, (uint32) CAGRA_MAX_ENTRY_NODES);

	memcpy(entries, run->entries, nentries * sizeof(uint32));
	cagra_call_done(&call);
	if (!cagra_set_entries(g, entries, nentries))
	{
		strlcpy(why, "out of memory", whylen);
		return false;
	}

	Size		row_bytes = (Size) req->graph_degree * sizeof(uint32);
	uint64		rows_per_chunk = Max((CAGRA_CHUNK_BYTES - header) / row_bytes, (Size) 1);
	uint32	   *edges = g->graph.edges.data();

	for (uint64 first = 0; first < req->n; first += rows_per_chunk)
	{
		uint32		count = (uint32) Min(rows_per_chunk, req->n - first);

		if (!cagra_build_call(req, CAGRA_REQ_BUILD_FETCH, (uint32) first, count, (Size) count * row_bytes,
							  NULL, cagra_worker_timeout_ms, &call, why, whylen))
			return false;
		memcpy(edges + first * req->graph_degree, cagra_build_body((CagraBuildPayload *) call.payload),
			   (Size) count * row_bytes);
		cagra_call_done(&call);
	}
	/* never write a graph the core would reject */
	for (uint64 i = 0; i < req->n * req->graph_degree; i++)
		if (edges[i] >= req->n && edges[i] != cagra::kInvalidNode)
		{
			snprintf(why, whylen, "the worker returned an edge to node %u of %llu",
					 edges[i], (unsigned long long) req->n);
			return false;
		}
	return true;
}

cagra::BuiltGraph *
cagra_worker_build_graph(Relation index, const float *vectors, uint64 n, uint32 dims,
						 cagra::Metric metric, uint32 graph_degree, uint32 intermediate_degree,
						 int build_device, MemoryContext cxt, uint32 *device)
{
	static uint64 builds_started = 0;
	int			backend;
	char		why[256];

	if (build_device == CAGRA_DEVICE_CPU || n == 0)
		return NULL;
	if (!cagra_worker_running(&backend))
	{
		cagra_worker_check_build_device(index, build_device);
		return NULL;
	}

	cagra::BuiltGraph *g = cagra_new_built_graph(n, graph_degree);

	if (!g)
		ereport(ERROR,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("out of memory for the graph of index \"%s\"", RelationGetRelationName(index))));
	CagraOwner *owner = cagra_owner_new(cxt, g, cagra_delete_object<cagra::BuiltGraph>);
	CagraBuildRequest req;

	req.build_id = ++builds_started;
	req.n = n;
	req.dims = dims;
	req.metric = (uint32) metric;
	req.graph_degree = graph_degree;
	req.intermediate_degree = intermediate_degree;
	if (cagra_build_on_worker(&req, vectors, g, why, sizeof(why)))
	{
		*device = backend == CAGRA_BACKEND_GPU ? CAGRA_DEVICE_GPU : CAGRA_DEVICE_CPU;
		return g;
	}
	cagra_owner_free(owner);
	if (cagra_worker_shared)
		pg_atomic_fetch_add_u64(&cagra_worker_shared->fallbacks, 1);
	if (build_device == CAGRA_DEVICE_GPU)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("could not build index \"%s\" on the GPU: %s", RelationGetRelationName(index), why),
				 errhint("Use build_device = auto to build on the CPU when the GPU fails.")));
	ereport(NOTICE,
			(errmsg("building index \"%s\" on the CPU: the GPU worker failed: %s",
					RelationGetRelationName(index), why)));
	return NULL;
}
