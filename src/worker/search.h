/*
 * search.h — the backend's search round trip to the worker, shared by
 * index scans (client.cpp) and cagra_search() (search_sql.cpp).
 */
#pragma once

#include "worker/worker.h"

/* Largest k and itopk_size a worker search takes (the GPU kernel's limit). */
#define CAGRA_WORKER_MAX_K 512
#define CAGRA_INVALID_ID 0xFFFFFFFFu

typedef enum CagraOffload
{
	CAGRA_OFFLOAD_OK,
	CAGRA_OFFLOAD_SKIPPED,		/* not offloaded for an ordinary reason (copy loading, no slot) */
	CAGRA_OFFLOAD_FAILED		/* the worker failed: fall back and tell */
} CagraOffload;

/* True when this search should go to the worker (cagra.device and worker
 * state); ERROR when cagra.device = gpu and it cannot. */
bool		cagra_worker_wanted(const char *what);

/* Count a fallback; the first of the session also gets a NOTICE. */
void		cagra_worker_note_fallback(const char *what, const char *why);

/* The search did not run on the worker: an ERROR with cagra.device = gpu,
 * else counted (and, for a failure, the session's first NOTICE). */
void		cagra_worker_search_fallback(CagraOffload r, const char *why);

/* A prepared (palloc'd) copy of a raw query. */
float	   *cagra_worker_prepare_query(const CagraMetaData *meta, const float *raw);

CagraIndexKey cagra_worker_index_key(Relation index, const CagraMetaData *meta);

/* nq prepared queries: nq x cfg->k node ids (CAGRA_INVALID_ID padding),
 * distances and, unless tids is NULL, the heap TIDs the worker's copy has
 * for them (cagra_pack_tid); *copy_n: nodes the copy holds (nodes from
 * there to meta->n must be searched with cagra_worker_merge_tail).
 *
 * The copy is of the generation the meta page showed after the caller's
 * snapshot was taken, so under an MVCC snapshot its TIDs may be used
 * without reading the node headers: a node vacuum removed since then has a
 * dead tuple, or a line pointer reused by a tuple newer than the snapshot,
 * which the heap check rejects either way. */
CagraOffload cagra_worker_search(Relation index, const CagraMetaData *meta,
								 const CagraSearchConfig *cfg, uint32 nq, const float *queries,
								 uint32 *ids, float *dists, uint64 *tids, uint32 *copy_n,
								 char *why, size_t whylen);

void		cagra_worker_merge_tail(Relation index, const CagraMetaData *meta, uint32 from, uint32 to,
									const float *query, uint32 k, uint32 *ids, float *dists);
