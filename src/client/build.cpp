/*
 * build.cpp — CREATE INDEX offload, backend side: while the heap scan runs,
 * the backend and its parallel scan workers send the prepared vectors to
 * the worker in chunks (a stream); after the scan the worker builds the
 * graph, and its rows come back in chunks into a BuiltGraph that the
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
cagra_client_require_gpu_build(const char *index_name)
{
	int			backend;

	if (cagra_client_worker_running(&backend) && backend == CAGRA_BACKEND_GPU)
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

/* A chunk of a stream: about a megabyte, so that a 1,024-dimension build
 * of a million rows takes a few thousand round trips, each a small part of
 * the scan's time, and the backend's buffer stays small. */
#define CAGRA_STREAM_CHUNK_BYTES ((Size) 1024 * 1024)

uint32
cagra_build_stream_rows(uint32 dim)
{
	return (uint32) Max(CAGRA_STREAM_CHUNK_BYTES / ((Size) dim * sizeof(float)), (Size) 1);
}

bool
cagra_client_build_open(const cagra::VectorFormat &format, const cagra::BuildParams &params,
						CagraBuildStream *stream)
{
	static uint64 builds_started = 0;
	int			backend;

	if (!cagra_client_worker_running(&backend))
		return false;
	stream->owner = MyProcPid;
	stream->build_id = ++builds_started;
	stream->backend = backend;
	stream->format = format;
	stream->params = params;
	return true;
}

/* One BUILD_RUN or BUILD_FETCH call with `body` bytes after the header for
 * the answer; the answered call stays attached (caller detaches). */
static bool
cagra_build_call(const CagraBuildStream *stream, CagraRequestKind kind, uint64 n, uint32 first, uint32 count,
				 Size body, int timeout_ms, CagraCall *call, char *why, size_t whylen)
{
	if (!cagra_call_init(call, kind, MAXALIGN(sizeof(CagraBuildPayload)) + body))
	{
		strlcpy(why, "no dynamic shared memory segment for the build", whylen);
		return false;
	}
	CagraBuildPayload *p = (CagraBuildPayload *) call->payload;

	p->owner = stream->owner;
	p->n = n;
	p->format = stream->format;
	p->params = stream->params;
	p->first = first;
	p->count = count;
	call->build_id = stream->build_id;

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

/*
 * This process's chunk on its way to the worker: queued, its answer not yet
 * read, while the scan prepares the next one.  One at a time: the next
 * send reads its answer first (by then the worker has usually copied it),
 * so the backend's mailbox holds one chunk and the worker's copy of a chunk
 * overlaps the scan of the next.
 */
static CagraCall chunk_call;
static CagraPendingCall chunk_pending;
static bool chunk_in_flight = false;

/* The answer to the chunk in flight, if any; false, with why set, when the
 * worker did not take it. */
bool
cagra_client_build_flush(char *why, size_t whylen)
{
	if (!chunk_in_flight)
		return true;
	chunk_in_flight = false;

	CagraCallOutcome o = cagra_call_finish(&chunk_call, &chunk_pending);
	bool		ok = o == CAGRA_CALL_ANSWERED && chunk_call.reply == CAGRA_REPLY_OK;

	if (o != CAGRA_CALL_ANSWERED)
		strlcpy(why, cagra_call_outcome_text(o), whylen);
	else if (!ok)
		strlcpy(why, chunk_call.message[0] ? chunk_call.message : "the worker refused the build", whylen);
	cagra_call_done(&chunk_call);
	return ok;
}

void
cagra_client_build_abandon(void)
{
	if (!chunk_in_flight)
		return;
	chunk_in_flight = false;
	cagra_call_abandon(&chunk_call, &chunk_pending);
	cagra_call_done(&chunk_call);
}

bool
cagra_client_build_send(const CagraBuildStream *stream, uint64 first, uint32 count, const float *vectors,
						char *why, size_t whylen)
{
	Size		body = (Size) count * stream->format.dim * sizeof(float);
	CagraCallOutcome o;

	if (!cagra_client_build_flush(why, whylen))
		return false;
	if (!cagra_call_init(&chunk_call, CAGRA_REQ_BUILD_DATA, MAXALIGN(sizeof(CagraBuildPayload)) + body))
	{
		strlcpy(why, "no dynamic shared memory segment for the build", whylen);
		return false;
	}

	CagraBuildPayload *p = (CagraBuildPayload *) chunk_call.payload;

	p->owner = stream->owner;
	p->n = 0;
	p->format = stream->format;
	p->params = stream->params;
	p->first = (uint32) first;
	p->count = count;
	memcpy(cagra_build_body(p), vectors, body);
	chunk_call.build_id = stream->build_id;
	if (!cagra_call_start(&chunk_call, cagra_worker_timeout_ms, &chunk_pending, &o))
	{
		strlcpy(why, cagra_call_outcome_text(o), whylen);
		cagra_call_done(&chunk_call);
		return false;
	}
	chunk_in_flight = true;
	return true;
}

/* The build of the streamed vectors, its rows back into g.  false: why set. */
static bool
cagra_build_on_worker(const CagraBuildStream *stream, uint64 n, cagra::BuiltGraph *g,
					  void (*report_step) (CagraWorkerBuildStep), char *why, size_t whylen)
{
	Size		header = MAXALIGN(sizeof(CagraBuildPayload));
	CagraCall	call;

	report_step(CAGRA_WORKER_BUILD_GRAPH);
	/* no deadline: a build takes as long as it takes; cancel still works */
	if (!cagra_build_call(stream, CAGRA_REQ_BUILD_RUN, n, 0, 0, 0, -1, &call, why, whylen))
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

	uint32		degree = stream->params.graph_degree;
	Size		row_bytes = (Size) degree * sizeof(uint32);
	uint64		rows_per_chunk = Max((CAGRA_CHUNK_BYTES - header) / row_bytes, (Size) 1);
	uint32	   *edges = g->graph.edges.data();

	report_step(CAGRA_WORKER_RECEIVE_GRAPH);
	for (uint64 first = 0; first < n; first += rows_per_chunk)
	{
		uint32		count = (uint32) Min(rows_per_chunk, n - first);

		if (!cagra_build_call(stream, CAGRA_REQ_BUILD_FETCH, n, (uint32) first, count, (Size) count * row_bytes,
							  cagra_worker_timeout_ms, &call, why, whylen))
			return false;
		memcpy(edges + first * degree, cagra_build_body((CagraBuildPayload *) call.payload),
			   (Size) count * row_bytes);
		cagra_call_done(&call);
	}
	/* never write a graph the core would reject */
	for (uint64 i = 0; i < n * degree; i++)
		if (edges[i] >= n && edges[i] != cagra::kInvalidNode)
		{
			snprintf(why, whylen, "the worker returned an edge to node %u of %llu",
					 edges[i], (unsigned long long) n);
			return false;
		}
	return true;
}

cagra::BuiltGraph *
cagra_client_build_graph(const char *index_name, const CagraBuildStream *stream, uint64 n,
						 const char *stream_failure, bool gpu_required,
						 void (*report_step) (CagraWorkerBuildStep), MemoryContext cxt, bool *on_gpu)
{
	char		why[256];
	bool		built = false;
	CagraOwner *owner = NULL;
	cagra::BuiltGraph *g = NULL;

	if (stream_failure)
		strlcpy(why, stream_failure, sizeof(why));
	else
	{
		g = cagra_new_built_graph(n, stream->params.graph_degree);
		if (!g)
			ereport(ERROR,
					(errcode(ERRCODE_OUT_OF_MEMORY),
					 errmsg("out of memory for the graph of index \"%s\"", index_name)));
		owner = cagra_owner_new(cxt, g, cagra_delete_object<cagra::BuiltGraph>);
		built = cagra_build_on_worker(stream, n, g, report_step, why, sizeof(why));
	}
	cagra_mailbox_trim();
	if (built)
	{
		*on_gpu = stream->backend == CAGRA_BACKEND_GPU;
		return g;
	}
	if (owner)
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
