/*
 * client.cpp — the backend's use of the GPU worker: searches (with the
 * upload of an index copy when the worker lacks one, and the exact search
 * of nodes appended after the copy was made), and graph builds.  Every
 * failure becomes "run it on the CPU", announced once per backend with a
 * NOTICE; where the user demanded the GPU it is an ERROR instead.
 *
 * Frames here hold no C++ object: PostgreSQL errors may longjmp through
 * them.  The few core calls are wrapped in noexcept helpers.
 */
#include "worker/client.h"
#include "worker/ipc.h"
#include "worker/search.h"

#include <cmath>

#include "core/distance.h"

extern "C" {
#include "miscadmin.h"
#include "storage/bufmgr.h"
}

/* ---- fallbacks ---- */

static bool cagra_fallback_noticed = false;

void
cagra_worker_note_fallback(const char *what, const char *why)
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
cagra_worker_wanted(const char *what)
{
	if (cagra_device == CAGRA_SEARCH_CPU)
		return false;
	if (cagra_worker_running(NULL))
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
	cagra_worker_note_fallback("search", why);
}

void
cagra_worker_search_fallback(CagraOffload r, const char *why)
{
	if (r == CAGRA_OFFLOAD_FAILED || cagra_device == CAGRA_SEARCH_GPU)
		cagra_search_failed(why);
	else
		pg_atomic_fetch_add_u64(&cagra_worker_shared->fallbacks, 1);
}

float *
cagra_worker_prepare_query(const CagraMetaData *meta, const float *raw)
{
	float	   *q = (float *) palloc(sizeof(float) * meta->dims);

	cagra_prepare((cagra::Metric) meta->metric, raw, q, meta->dims);
	return q;
}

static float
cagra_distance_noexcept(cagra::Metric metric, const float *a, const float *b, uint32 dims) noexcept
{
	try
	{
		return cagra::distance(metric, a, b, dims);
	}
	catch (...)
	{
		return INFINITY;
	}
}

/* ---- uploading an index copy ---- */

static void
cagra_read_group(Relation index, const CagraMetaData *meta, uint32 group, char *dst)
{
	uint64		group_bytes = (uint64) meta->nodes_per_page * meta->record_size;

	for (uint32 p = 0; p < meta->pages_per_node; p++)
	{
		BlockNumber blkno = 1 + (BlockNumber) group * meta->pages_per_node + p;
		uint64		start = (uint64) p * CAGRA_PAGE_USABLE;
		uint64		len = Min(group_bytes - start, (uint64) CAGRA_PAGE_USABLE);
		Buffer		buf = ReadBuffer(index, blkno);

		LockBuffer(buf, BUFFER_LOCK_SHARE);
		memcpy(dst + start, (char *) BufferGetPage(buf) + CAGRA_PAGE_DATA_START, len);
		UnlockReleaseBuffer(buf);
	}
}

static bool
cagra_node_live(const CagraNodeHeader *h)
{
	return (h->flags & CAGRA_NODE_LIVE) && !(h->flags & CAGRA_NODE_DELETED);
}

/* Nodes [first, first + count) of the index into an UPLOAD payload. */
static void
cagra_fill_upload(Relation index, const CagraMetaData *meta, uint32 n, CagraUploadPayload *p,
				  char *group)
{
	float	   *vecs = cagra_upload_vectors(p);
	uint32	   *rows = cagra_upload_rows(p);
	uint8	   *live = cagra_upload_live(p);
	uint64	   *tids = cagra_upload_tids(p);
	uint32		degree = meta->graph_degree;

	for (uint32 i = 0; i < p->count; i++)
	{
		uint32		id = p->first + i;
		uint32		in_group = id % meta->nodes_per_page;

		if (i == 0 || in_group == 0)
			cagra_read_group(index, meta, id / meta->nodes_per_page, group);

		const char *rec = group + (uint64) in_group * meta->record_size;
		CagraNodeHeader hdr;

		memcpy(&hdr, rec, sizeof(hdr));
		live[i] = cagra_node_live(&hdr) ? 1 : 0;
		tids[i] = cagra_pack_tid(&hdr.heap_tid);
		memcpy(rows + (uint64) i * degree, rec + CAGRA_ROW_OFFSET, degree * sizeof(uint32));
		for (uint32 j = 0; j < degree; j++)
			if (rows[(uint64) i * degree + j] >= n)
				rows[(uint64) i * degree + j] = cagra::kInvalidNode;	/* appended later */
		memcpy(vecs + (uint64) i * meta->dims, rec + cagra_vector_offset(degree),
			   meta->dims * sizeof(float));
		if ((i & 4095) == 4095)
			CHECK_FOR_INTERRUPTS();
	}
}

/* Stream nodes 0..key->n-1 to the worker in chunks; false with `why` set. */
static bool
cagra_upload_index(Relation index, const CagraMetaData *meta, const CagraIndexKey *key,
				   char *why, size_t whylen)
{
	Size		node_bytes = cagra_upload_node_bytes(meta->dims, meta->graph_degree);
	Size		header = MAXALIGN(sizeof(CagraUploadPayload)) + sizeof(uint64);
	uint64		per_chunk = (CAGRA_CHUNK_BYTES - header) / node_bytes;
	char	   *group = (char *) palloc((Size) meta->nodes_per_page * meta->record_size);

	per_chunk = Max(per_chunk - per_chunk % meta->nodes_per_page, (uint64) meta->nodes_per_page);
	for (uint64 first = 0; first < key->n; first += per_chunk)
	{
		uint32		count = (uint32) Min(per_chunk, key->n - first);
		CagraCall	call;

		if (!cagra_call_init(&call, CAGRA_REQ_UPLOAD, cagra_upload_payload_size(count, meta->dims, meta->graph_degree)))
		{
			strlcpy(why, "no dynamic shared memory segment for the index copy", whylen);
			return false;
		}
		CagraUploadPayload *p = (CagraUploadPayload *) call.payload;

		p->dim = meta->dims;
		p->degree = meta->graph_degree;
		p->metric = meta->metric;
		p->entry_count = meta->entry_count;
		memcpy(p->entries, meta->entries, sizeof(p->entries));
		p->first = (uint32) first;
		p->count = count;
		cagra_fill_upload(index, meta, key->n, p, group);
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
	pfree(group);
	return true;
}

/* ---- searches ---- */

CagraIndexKey
cagra_worker_index_key(Relation index, const CagraMetaData *meta)
{
	CagraIndexKey key;

	memset(&key, 0, sizeof(key));
	key.db = MyDatabaseId;
	key.index = RelationGetRelid(index);
	key.relfilenode = index->rd_node.relNode;
	key.generation = meta->generation;
	key.n = meta->n;
	return key;
}

/* One SEARCH request for up to a chunk of queries. */
static CagraOffload
cagra_search_chunk(Relation index, const CagraMetaData *meta, const CagraIndexKey *key,
				   const CagraSearchConfig *cfg, uint32 nq, const float *queries,
				   uint32 *ids, float *dists, uint64 *tids, uint32 *copy_n, char *why, size_t whylen)
{
	for (int attempt = 0; attempt < 2; attempt++)
	{
		CagraCall	call;

		if (!cagra_call_init(&call, CAGRA_REQ_SEARCH, cagra_search_payload_size(nq, meta->dims, cfg->k)))
		{
			strlcpy(why, "no dynamic shared memory segment for the queries", whylen);
			return CAGRA_OFFLOAD_FAILED;
		}
		CagraSearchPayload *p = (CagraSearchPayload *) call.payload;

		p->nq = nq;
		p->dim = meta->dims;
		p->k = cfg->k;
		memcpy(cagra_search_queries(p), queries, (Size) nq * meta->dims * sizeof(float));
		call.key = *key;
		call.search = *cfg;
		call.nq = nq;

		CagraCallOutcome o = cagra_call_run(&call, cagra_worker_timeout_ms);

		if (o == CAGRA_CALL_ANSWERED && call.reply == CAGRA_REPLY_OK)
		{
			memcpy(ids, cagra_search_ids(p), (Size) nq * cfg->k * sizeof(uint32));
			memcpy(dists, cagra_search_distances(p), (Size) nq * cfg->k * sizeof(float));
			if (tids)
				memcpy(tids, cagra_search_tids(p), (Size) nq * cfg->k * sizeof(uint64));
			*copy_n = call.copy_n;
			cagra_call_done(&call);
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
		if (call.reply == CAGRA_REPLY_LOADING)
		{
			strlcpy(why, "another session is loading the index copy", whylen);
			return CAGRA_OFFLOAD_SKIPPED;
		}
		if (call.reply != CAGRA_REPLY_NEED_INDEX || attempt > 0)
		{
			strlcpy(why, call.message[0] ? call.message : "the worker refused the search", whylen);
			return CAGRA_OFFLOAD_FAILED;
		}
		if (!cagra_upload_index(index, meta, key, why, whylen))
			return CAGRA_OFFLOAD_FAILED;
	}
	return CAGRA_OFFLOAD_FAILED;	/* not reached */
}

CagraOffload
cagra_worker_search(Relation index, const CagraMetaData *meta, const CagraSearchConfig *cfg,
					uint32 nq, const float *queries, uint32 *ids, float *dists, uint64 *tids,
					uint32 *copy_n, char *why, size_t whylen)
{
	CagraIndexKey key = cagra_worker_index_key(index, meta);
	Size		per_query = (Size) meta->dims * sizeof(float) + (Size) cfg->k * 16;
	uint32		chunk = (uint32) Max((Size) 1, (CAGRA_CHUNK_BYTES - 64) / per_query);

	*copy_n = meta->n;
	for (uint32 first = 0; first < nq; first += chunk)
	{
		uint32		count = Min(chunk, nq - first);
		uint32		got_n;
		CagraOffload r = cagra_search_chunk(index, meta, &key, cfg, count,
											queries + (Size) first * meta->dims,
											ids + (Size) first * cfg->k, dists + (Size) first * cfg->k,
											tids ? tids + (Size) first * cfg->k : NULL, &got_n, why, whylen);

		if (r != CAGRA_OFFLOAD_OK)
			return r;
		*copy_n = Min(*copy_n, got_n);
	}
	return CAGRA_OFFLOAD_OK;
}

/* The `k` nearest live nodes among [from, to) by exact distance, sorted,
 * merged into the worker's sorted row (ids/dists, k entries, padded). */
void
cagra_worker_merge_tail(Relation index, const CagraMetaData *meta, uint32 from, uint32 to,
						const float *query, uint32 k, uint32 *ids, float *dists)
{
	cagra::Metric metric = (cagra::Metric) meta->metric;
	float	   *vec = (float *) palloc(sizeof(float) * meta->dims);
	uint32		voff = cagra_vector_offset(meta->graph_degree);

	for (uint32 id = from; id < to; id++)
	{
		CagraNodeHeader hdr;
		bool		dup = false;

		cagra_read_record_bytes(index, meta, id, 0, sizeof(hdr), &hdr);
		if (!cagra_node_live(&hdr))
			continue;
		for (uint32 i = 0; i < k && ids[i] != CAGRA_INVALID_ID; i++)
			dup |= ids[i] == id;
		if (dup)
			continue;
		cagra_read_record_bytes(index, meta, id, voff, meta->dims * sizeof(float), vec);
		float		d = cagra_distance_noexcept(metric, query, vec, meta->dims);

		if (!(d < dists[k - 1]))
			continue;
		/* insert into the sorted row, dropping the last */
		uint32		pos = k - 1;

		while (pos > 0 && dists[pos - 1] > d)
		{
			ids[pos] = ids[pos - 1];
			dists[pos] = dists[pos - 1];
			pos--;
		}
		ids[pos] = id;
		dists[pos] = d;
		CHECK_FOR_INTERRUPTS();
	}
	pfree(vec);
}

/* ---- index scans ---- */

struct CagraWorkerScan
{
	Relation	index;
	CagraMetaData meta;
	uint32		count;
	uint32		pos;
	uint32	   *ids;
	float	   *dists;
	uint64	   *tids;			/* the copy's heap TIDs, or NULL: read the headers */
	ItemPointerData *returned;
	uint32		nreturned;
	double		last_value;
};

CagraWorkerScan *
cagra_worker_scan_begin(Relation index, const CagraMetaData *meta, const float *raw_query, uint32 want,
						bool mvcc_snapshot)
{
	CagraSearchConfig cfg;
	char		why[256];
	uint32		copy_n;

	if (!cagra_worker_wanted("search"))
		return NULL;

	want = Max(want, (uint32) 1);
	cfg.k = Min(want, (uint32) CAGRA_WORKER_MAX_K);
	cfg.itopk_size = Max((uint32) cagra_itopk_size, cfg.k);
	cfg.search_width = (uint32) cagra_search_width;
	cfg.max_iterations = (uint32) cagra_max_iterations;
	if (cfg.itopk_size > CAGRA_WORKER_MAX_K)
	{
		if (cagra_device == CAGRA_SEARCH_GPU)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("cagra.itopk_size %d is larger than the GPU allows (%d)",
							cagra_itopk_size, CAGRA_WORKER_MAX_K)));
		return NULL;
	}

	CagraWorkerScan *ws = (CagraWorkerScan *) palloc0(sizeof(CagraWorkerScan));
	float	   *query = cagra_worker_prepare_query(meta, raw_query);

	ws->index = index;
	ws->meta = *meta;
	ws->ids = (uint32 *) palloc(sizeof(uint32) * cfg.k);
	ws->dists = (float *) palloc(sizeof(float) * cfg.k);
	ws->tids = (uint64 *) palloc(sizeof(uint64) * cfg.k);
	ws->returned = (ItemPointerData *) palloc(sizeof(ItemPointerData) * cfg.k);
	ws->count = cfg.k;

	CagraOffload r = cagra_worker_search(index, meta, &cfg, 1, query, ws->ids, ws->dists, ws->tids,
										 &copy_n, why, sizeof(why));

	if (r != CAGRA_OFFLOAD_OK)
	{
		cagra_worker_search_fallback(r, why);
		cagra_worker_scan_end(ws);
		pfree(query);
		return NULL;
	}
	/* the tail's nodes have no copy TID; other snapshots want the headers */
	if (copy_n < meta->n || !mvcc_snapshot)
	{
		pfree(ws->tids);
		ws->tids = NULL;
	}
	if (copy_n < meta->n)
		cagra_worker_merge_tail(index, meta, copy_n, meta->n, query, cfg.k, ws->ids, ws->dists);
	pfree(query);
	return ws;
}

bool
cagra_worker_scan_next(CagraWorkerScan *ws, ItemPointer tid, double *value)
{
	while (ws->pos < ws->count)
	{
		uint32		id = ws->ids[ws->pos];
		float		d = ws->dists[ws->pos];
		uint64		packed = ws->tids ? ws->tids[ws->pos] : 0;
		CagraNodeHeader hdr;

		ws->pos++;
		if (id == CAGRA_INVALID_ID)
			break;
		if (packed != 0)
			cagra_unpack_tid(packed, &hdr.heap_tid);	/* see cagra_worker_search */
		else
		{
			/* the page says whether vacuum removed it since the copy was made */
			cagra_read_record_bytes(ws->index, &ws->meta, id, 0, sizeof(hdr), &hdr);
			if (!cagra_node_live(&hdr))
				continue;
		}
		*tid = hdr.heap_tid;
		*value = cagra_operator_value((cagra::Metric) ws->meta.metric, d);
		ws->returned[ws->nreturned++] = hdr.heap_tid;
		ws->last_value = *value;
		return true;
	}
	ws->pos = ws->count;
	return false;
}

bool
cagra_worker_scan_skip(CagraWorkerScan *ws, ItemPointer tid, double value)
{
	if (ws->nreturned == 0)
		return false;
	if (value < ws->last_value)
		return true;
	for (uint32 i = 0; i < ws->nreturned; i++)
		if (ItemPointerEquals(&ws->returned[i], tid))
			return true;
	return false;
}

const CagraMetaData *
cagra_worker_scan_meta(const CagraWorkerScan *ws)
{
	return &ws->meta;
}

void
cagra_worker_scan_end(CagraWorkerScan *ws)
{
	if (!ws)
		return;
	pfree(ws->ids);
	pfree(ws->dists);
	if (ws->tids)
		pfree(ws->tids);
	pfree(ws->returned);
	pfree(ws);
}
