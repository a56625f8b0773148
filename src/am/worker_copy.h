/*
 * worker_copy.h — the access method's side of searches through the GPU
 * worker: the worker's copy of an index is filled from the index pages
 * here, what the copy cannot know (nodes inserted after it was made) is
 * searched here, exactly, and merged into its answers, and sent to the
 * copy once it has grown long.  Scans, cagra_search and inserts call
 * these; the client (src/client) never reads a page.
 */
#pragma once

#include "am/cagra_am.h"
#include "client/client.h"

/* nq prepared queries through the worker (client.h, cagra_client_search;
 * allowed: NULL, or the rows that may be returned), the index copy
 * uploaded from the pages of `index` when the worker asks, and the nodes
 * inserted since sent to it when they are at least cagra_copy_update_at;
 * plans as cagra_client_search's. */
CagraOffload cagra_search_through_worker(Relation index, const CagraMetaData *meta,
										 const CagraSearchRequest *req, uint32 nq, const float *queries,
										 const CagraAllowedTids *allowed, uint32 *ids, float *dists,
										 uint64 *tids, uint32 *plans, CagraCopyExtent *copy, char *why,
										 size_t whylen);

/* A request for the same, to be queued without waiting for the answer
 * (client.h, cagra_client_search_begin): no upload, no filter; returns
 * where the nq prepared queries go, NULL when there is no request. */
float	   *cagra_search_begin_through_worker(Relation index, const CagraMetaData *meta,
											  const CagraSearchRequest *req, uint32 nq,
											  CagraSearchPending *pending);

/*
 * What the worker's copy lacks (cagra_copy_is_partial): nodes [copy->n,
 * meta->n), appended after it was made, the nodes from copy->linked on it
 * holds unlinked (cagra_copy_holds_linked), and the slots of inserts
 * copy->reused + 1 .. meta->reused (reuse_log).  Read their vectors once
 * (kept by the backend for its next merge), then merge
 * the exact nearest of the live ones (of the rows `allowed` names, unless
 * it is NULL) into every present query's sorted row of kk (present NULL:
 * all), never twice the same id.
 */
void		cagra_merge_tail(Relation index, const CagraMetaData *meta, const CagraCopyExtent *copy, int nq,
							 const float *queries, const bool *present, const CagraAllowedTids *allowed,
							 uint32 kk, uint32 *ids, float *dists);
