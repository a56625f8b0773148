/*
 * queue.h — the worker's side of the request queue (batch.cpp): taking
 * queued slots, running them, answering.  Worker process only.
 */
#pragma once

#include "worker/worker.h"

/* Serve queued requests until none is left; returns how many were served. */
int			cagra_worker_serve_queue(void);

/* One non-search request, executed in place (offload_build.cpp, cache.cpp). */
CagraReply	cagra_worker_run_build_request(CagraRequestSlot *slot, void *payload);

/* Unmap the reusable segments of backends that are gone. */
void		cagra_worker_forget_mailboxes(void);

/* Drop build state of backends that are gone. */
void		cagra_worker_forget_builds(void);
