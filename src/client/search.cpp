/*
 * search.cpp — searches through the GPU worker, backend side: the request
 * round trip, and the upload of an index copy (from the access method's
 * CagraCopySource) when the worker has none of this generation.  Every
 * failure becomes "run it on the CPU", announced once per backend with a
 * NOTICE; where the user demanded the GPU it is an ERROR instead.
 *
 * Frames here hold no C++ object: PostgreSQL errors may longjmp through them.
 */
#include "client/client.h"
#include "client/ipc.h"

#include <cmath>

extern "C" {
#include "miscadmin.h"
#include "storage/latch.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"
}

/* ---- fallbacks ---- */

static bool cagra_fallback_noticed = false;

void
cagra_client_note_fallback(const char *what, const char *why)
{
	if (cagra_worker_shared)
		pg_atomic_fetch_add_u64(&cagra_worker_shared->fallbacks, 1);
	if (cagra_fallback_noticed)
		return;
	cagra_fallback_noticed = true;
	ereport(NOTICE,
			(errmsg("cagra %s runs on the CPU: %s", what, why),
			 errdetail("Further fallbacks of this session are counted in cagra_status, not reported.")));
}

bool
cagra_client_worker_serves_searches(void)
{
	return cagra_device != CAGRA_SEARCH_CPU && cagra_client_worker_running(NULL);
}

bool
cagra_client_wants_worker(const char *what)
{
	if (cagra_device == CAGRA_SEARCH_CPU)
		return false;
	if (cagra_client_worker_running(NULL))
		return true;
	if (cagra_device == CAGRA_SEARCH_GPU)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("cagra.device is gpu but the cagra GPU worker is not running, so this %s cannot run on the GPU", what),
				 cagra_worker_shared ?
				 errhint("SELECT * FROM cagra_status says why; or SET cagra.device = auto.") :
				 errhint("Add cagra to shared_preload_libraries and restart, or SET cagra.device = auto.")));
	return false;
}

/* A failed offload: ERROR with cagra.device = gpu, else a (first) NOTICE. */
static void
cagra_search_failed(const char *why)
{
	if (cagra_device == CAGRA_SEARCH_GPU)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("cagra search could not run on the GPU worker: %s", why),
				 errhint("SET cagra.device = auto to search on the CPU when the worker fails.")));
	cagra_client_note_fallback("search", why);
}

void
cagra_client_search_fallback(CagraOffload r, const char *why)
{
	if (r == CAGRA_OFFLOAD_FAILED || cagra_device == CAGRA_SEARCH_GPU)
		cagra_search_failed(why);
	else
		pg_atomic_fetch_add_u64(&cagra_worker_shared->fallbacks, 1);
}

/* ---- uploading an index copy ---- */

/* Stream nodes 0..key->n-1 to the worker in chunks; false with `why` set. */
static bool
cagra_upload_chunks(const CagraIndexKey *key, const CagraCopySource *src, char *why, size_t whylen)
{
	Size		node_bytes = cagra_upload_node_bytes(src->format, src->degree);
	Size		header = cagra_upload_payload_size(0, src->format, src->degree);
	uint64		per_chunk = (CAGRA_CHUNK_BYTES - header) / node_bytes;

	per_chunk = Max(per_chunk - per_chunk % src->chunk_nodes, (uint64) src->chunk_nodes);
	for (uint64 first = 0; first < key->n; first += per_chunk)
	{
		uint32		count = (uint32) Min(per_chunk, key->n - first);
		CagraCall	call;

		if (!cagra_call_init(&call, CAGRA_REQ_UPLOAD, cagra_upload_payload_size(count, src->format, src->degree)))
		{
			strlcpy(why, "no dynamic shared memory segment for the index copy", whylen);
			return false;
		}
		CagraUploadPayload *p = (CagraUploadPayload *) call.payload;

		p->format = src->format;
		p->degree = src->degree;
		p->entry_count = Min(src->entry_count, (uint32) CAGRA_MAX_ENTRY_NODES);
		memcpy(p->entries, src->entries, p->entry_count * sizeof(uint32));
		p->first = (uint32) first;
		p->count = count;
		src->fill(src->arg, key->n, p);
		call.key = *key;

		CagraCallOutcome o = cagra_call_run(&call, cagra_worker_timeout_ms);

		cagra_call_done(&call);
		if (o != CAGRA_CALL_ANSWERED)
		{
			strlcpy(why, cagra_call_outcome_text(o), whylen);
			return false;
		}
		if (call.reply != CAGRA_REPLY_OK)
		{
			snprintf(why, whylen, "the index copy was not loaded: %s", call.message);
			return false;
		}
	}
	return true;
}

/* The chunks share one mailbox of a chunk's size, given back after them. */
static bool
cagra_upload_index(const CagraIndexKey *key, const CagraCopySource *src, char *why, size_t whylen)
{
	bool		done = cagra_upload_chunks(key, src, why, whylen);

	cagra_mailbox_trim();
	return done;
}

/* ---- updating an index copy ---- */

bool
cagra_client_claim_update(void)
{
	CagraWorkerShared *sh = cagra_worker_shared;
	uint32		holder = 0;
	TimestampTz now = GetCurrentTimestamp();

	if (!sh)
		return false;
	if (!pg_atomic_compare_exchange_u32(&sh->update_claim, &holder, (uint32) MyProcPid) &&
		!(now - (TimestampTz) pg_atomic_read_u64(&sh->update_claimed_at) > (int64) cagra_worker_timeout_ms * 1000 &&
		  pg_atomic_compare_exchange_u32(&sh->update_claim, &holder, (uint32) MyProcPid)))
		return false;
	pg_atomic_write_u64(&sh->update_claimed_at, (uint64) now);
	return true;
}

void
cagra_client_release_update(void)
{
	uint32		mine = (uint32) MyProcPid;

	if (cagra_worker_shared)
		(void) pg_atomic_compare_exchange_u32(&cagra_worker_shared->update_claim, &mine, 0);
}

bool
cagra_client_update_copy(const CagraIndexKey *key, const CagraCopyExtent *base, const cagra::VectorFormat &format,
						 uint32 degree, uint32 nodes, uint32 rows, void (*fill) (void *arg, CagraUpdatePayload *p),
						 void *arg)
{
	Size		size = cagra_update_payload_size(nodes, rows, format, degree);
	CagraCall	call;

	if (size > CAGRA_CHUNK_BYTES || !cagra_call_init(&call, CAGRA_REQ_UPDATE, size))
		return false;

	CagraUpdatePayload *p = (CagraUpdatePayload *) call.payload;

	p->format = format;
	p->degree = degree;
	p->base = *base;
	p->nodes = nodes;
	p->rows = rows;
	PG_TRY();
	{
		fill(arg, p);
	}
	PG_CATCH();
	{
		cagra_call_done(&call);
		PG_RE_THROW();
	}
	PG_END_TRY();
	call.key = *key;

	CagraCallOutcome o = cagra_call_run(&call, cagra_worker_timeout_ms);

	cagra_call_done(&call);
	if (o == CAGRA_CALL_ANSWERED && call.reply != CAGRA_REPLY_OK)
		elog(DEBUG1, "cagra: the worker's copy did not take %u inserted nodes: %s", nodes, call.message);
	return o == CAGRA_CALL_ANSWERED && call.reply == CAGRA_REPLY_OK;
}

/* ---- searches ---- */

/*
 * Drop from nq rows of k the nodes the key does not count: a copy that an
 * update made after this backend read its meta page holds them, and the
 * caller's arrays end at key->n.  Each row stays sorted, padded at its end.
 */
static void
cagra_drop_uncounted(const CagraIndexKey *key, uint32 nq, uint32 k, uint32 *ids, float *dists, uint64 *tids)
{
	for (Size q = 0; q < nq; q++)
	{
		uint32	   *row = ids + q * k;
		float	   *rowd = dists + q * k;
		uint64	   *rowt = tids ? tids + q * k : NULL;
		uint32		kept = 0;

		for (uint32 i = 0; i < k; i++)
		{
			if (row[i] != cagra::kInvalidNode && row[i] >= key->n)
				continue;
			row[kept] = row[i];
			rowd[kept] = rowd[i];
			if (rowt)
				rowt[kept] = rowt[i];
			kept++;
		}
		for (; kept < k; kept++)
		{
			row[kept] = cagra::kInvalidNode;
			rowd[kept] = INFINITY;
			if (rowt)
				rowt[kept] = 0;
		}
	}
}

/* Sleep before asking again for a copy another session is loading: 1 ms,
 * doubling to 64 ms (an upload takes milliseconds to seconds). */
static void
cagra_wait_for_load(int waits)
{
	(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, 1L << Min(waits, 6),
					 PG_WAIT_EXTENSION);
	ResetLatch(MyLatch);
	CHECK_FOR_INTERRUPTS();
}

/* One SEARCH request for up to a chunk of queries. */
static CagraOffload
cagra_search_chunk(const CagraIndexKey *key, const CagraCopySource *src, const CagraSearchRequest *req,
				   uint32 nq, const float *queries, const CagraAllowedTids *allowed, uint32 *ids, float *dists,
				   uint64 *tids, uint32 *plans, CagraCopyExtent *copy, char *why, size_t whylen)
{
	uint32		dim = src->format.dim;
	Size		filter_tids = allowed ? allowed->count : 0;
	uint32		plan_degree = req->plans_inserts ? src->degree : 0;

	for (int uploads = 0, waits = 0;;)
	{
		CagraCall	call;

		if (!cagra_call_init(&call, CAGRA_REQ_SEARCH,
							 cagra_search_payload_size(nq, dim, req->k, filter_tids, plan_degree)))
		{
			strlcpy(why, "no dynamic shared memory segment for the queries", whylen);
			return CAGRA_OFFLOAD_FAILED;
		}
		CagraSearchPayload *p = (CagraSearchPayload *) call.payload;

		p->nq = nq;
		p->dim = dim;
		p->k = req->k;
		p->filter_tids = (uint32) filter_tids;
		p->plan_degree = plan_degree;
		if (allowed)
			memcpy(cagra_search_filter(p), allowed->tids, filter_tids * sizeof(uint64));
		memcpy(cagra_search_queries(p), queries, (Size) nq * dim * sizeof(float));
		call.key = *key;
		call.search = *req;
		call.search.filtered = allowed != NULL;
		call.nq = nq;

		CagraCallOutcome o = cagra_call_run(&call, cagra_worker_timeout_ms);

		if (o == CAGRA_CALL_ANSWERED && call.reply == CAGRA_REPLY_OK)
		{
			memcpy(ids, cagra_search_ids(p), (Size) nq * req->k * sizeof(uint32));
			memcpy(dists, cagra_search_distances(p), (Size) nq * req->k * sizeof(float));
			if (tids)
				memcpy(tids, cagra_search_tids(p), (Size) nq * req->k * sizeof(uint64));
			if (plan_degree)
				memcpy(plans, cagra_search_plans(p), (Size) nq * cagra_insert_plan_words(plan_degree) * sizeof(uint32));
			*copy = call.copy;
			cagra_call_done(&call);
			if (copy->n > key->n)
				cagra_drop_uncounted(key, nq, req->k, ids, dists, tids);
			return CAGRA_OFFLOAD_OK;
		}
		cagra_call_done(&call);
		if (o == CAGRA_CALL_NOT_RUNNING || o == CAGRA_CALL_NO_SLOT)
		{
			strlcpy(why, cagra_call_outcome_text(o), whylen);
			return CAGRA_OFFLOAD_SKIPPED;
		}
		if (o != CAGRA_CALL_ANSWERED)
		{
			strlcpy(why, cagra_call_outcome_text(o), whylen);
			return CAGRA_OFFLOAD_FAILED;
		}
		if (call.reply == CAGRA_REPLY_LOADING && cagra_device != CAGRA_SEARCH_GPU)
		{
			strlcpy(why, "another session is loading the index copy", whylen);
			return CAGRA_OFFLOAD_SKIPPED;
		}
		if (call.reply == CAGRA_REPLY_LOADING)
		{
			/* the GPU was demanded: wait for the other session's upload.  The
			 * worker answers LOADING only while that session is alive and
			 * sending, so this ends (or this session takes the upload over) */
			cagra_wait_for_load(waits++);
			continue;
		}
		if (call.reply != CAGRA_REPLY_NEED_INDEX || uploads++ > 0)
		{
			strlcpy(why, call.message[0] ? call.message : "the worker refused the search", whylen);
			return CAGRA_OFFLOAD_FAILED;
		}
		if (!cagra_upload_index(key, src, why, whylen))
			return CAGRA_OFFLOAD_FAILED;
	}
}

float *
cagra_client_search_begin(const CagraIndexKey *key, uint32 dim, const CagraSearchRequest *req, uint32 nq,
						  CagraSearchPending *pending)
{
	Size		size = cagra_search_payload_size(nq, dim, req->k, 0, 0);

	memset((void *) pending, 0, sizeof(*pending));
	if (size > CAGRA_MAILBOX_MAX_BYTES || !cagra_call_init(&pending->call, CAGRA_REQ_SEARCH, size))
		return NULL;

	CagraSearchPayload *p = (CagraSearchPayload *) pending->call.payload;

	p->nq = nq;
	p->dim = dim;
	p->k = req->k;
	p->filter_tids = 0;
	p->plan_degree = 0;
	pending->call.key = *key;
	pending->call.search = *req;
	pending->call.search.filtered = false;
	pending->call.nq = nq;
	pending->nq = nq;
	pending->k = req->k;
	return cagra_search_queries(p);
}

bool
cagra_client_search_queue(CagraSearchPending *pending)
{
	CagraCallOutcome why;

	return cagra_call_start(&pending->call, cagra_worker_timeout_ms, &pending->wait, &why);
}

void
cagra_client_search_release(CagraSearchPending *pending)
{
	if (pending->wait.queued)
		cagra_call_abandon(&pending->call, &pending->wait);
	cagra_call_done(&pending->call);
}

CagraOffload
cagra_client_search_finish(CagraSearchPending *pending, uint32 *ids, float *dists, uint64 *tids,
						   CagraCopyExtent *copy, char *why, size_t whylen)
{
	CagraCallOutcome o = cagra_call_finish(&pending->call, &pending->wait);
	CagraSearchPayload *p = (CagraSearchPayload *) pending->call.payload;
	CagraOffload r;

	if (o == CAGRA_CALL_ANSWERED && pending->call.reply == CAGRA_REPLY_OK)
	{
		memcpy(ids, cagra_search_ids(p), (Size) pending->nq * pending->k * sizeof(uint32));
		memcpy(dists, cagra_search_distances(p), (Size) pending->nq * pending->k * sizeof(float));
		if (tids)
			memcpy(tids, cagra_search_tids(p), (Size) pending->nq * pending->k * sizeof(uint64));
		*copy = pending->call.copy;
		if (copy->n > pending->call.key.n)
			cagra_drop_uncounted(&pending->call.key, pending->nq, pending->k, ids, dists, tids);
		r = CAGRA_OFFLOAD_OK;
	}
	else if (o == CAGRA_CALL_NOT_RUNNING || o == CAGRA_CALL_NO_SLOT ||
			 (o == CAGRA_CALL_ANSWERED && (pending->call.reply == CAGRA_REPLY_NEED_INDEX ||
										   pending->call.reply == CAGRA_REPLY_LOADING)))
		r = CAGRA_OFFLOAD_SKIPPED;
	else
	{
		strlcpy(why, o != CAGRA_CALL_ANSWERED ? cagra_call_outcome_text(o)
				: pending->call.message[0] ? pending->call.message : "the worker refused the search", whylen);
		r = CAGRA_OFFLOAD_FAILED;
	}
	return r;
}

CagraOffload
cagra_client_search(const CagraIndexKey *key, const CagraCopySource *source, const CagraSearchRequest *req,
					uint32 nq, const float *queries, const CagraAllowedTids *allowed, uint32 *ids, float *dists,
					uint64 *tids, uint32 *plans, CagraCopyExtent *copy, char *why, size_t whylen)
{
	uint32		plan_words = req->plans_inserts ? cagra_insert_plan_words(source->degree) : 0;
	Size		per_query = (Size) source->format.dim * sizeof(float) + (Size) req->k * 16 + plan_words * 4;
	/* every chunk carries all the allowed TIDs */
	Size		filter_bytes = allowed ? (Size) allowed->count * sizeof(uint64) : 0;

	if (filter_bytes + per_query + 64 > CAGRA_CHUNK_BYTES)
	{
		strlcpy(why, "the allowed rows' TIDs do not fit one request", whylen);
		return CAGRA_OFFLOAD_SKIPPED;
	}

	/* Chunks that fit the backend's mailbox reuse its mapped pages: a fresh
	 * segment of tens of MB cost the backend more in page faults (zeroing
	 * and mapping) than everything else of cagra_search on 1,024
	 * dimensions.  A large filter takes a chunk-sized segment of its own. */
	Size		budget = filter_bytes <= CAGRA_MAILBOX_MAX_BYTES / 2 ? CAGRA_MAILBOX_MAX_BYTES : CAGRA_CHUNK_BYTES;
	Size		fixed = cagra_search_payload_size(0, source->format.dim, req->k, filter_bytes / sizeof(uint64), 0);
	uint32		chunk = (uint32) Max((Size) 1, (budget - fixed) / per_query);

	/* at most what the key names: every node linked past its first
	 * unlinked one, until a chunk's copy says otherwise */
	memset(copy, 0, sizeof(*copy));
	copy->n = key->n;
	copy->reused = key->reused;
	copy->linked = key->linked;
	copy->takes_updates = true;
	memset(copy->linked_after, 0xFF, sizeof(copy->linked_after));
	for (uint32 first = 0; first < nq; first += chunk)
	{
		uint32		count = Min(chunk, nq - first);
		CagraCopyExtent got;
		Size		at = (Size) first * req->k;
		CagraOffload r = cagra_search_chunk(key, source, req, count,
											queries + (Size) first * source->format.dim, allowed,
											ids + at, dists + at, tids ? tids + at : NULL,
											plans ? plans + (Size) first * plan_words : NULL, &got, why, whylen);

		if (r != CAGRA_OFFLOAD_OK)
			return r;
		/* chunks may meet different copies: what all of them hold */
		*copy = cagra_copy_extent_meet(copy, &got);
	}
	return CAGRA_OFFLOAD_OK;
}
