/*
 * worker.h — what the files of the worker process share: the request
 * queue's worker side (batch.cpp: taking queued slots, running them,
 * answering) and the build requests (offload_build.cpp).  Worker process
 * only; backends use src/client.
 */
#pragma once

#include "protocol/protocol.h"

/* Start the search threads (cagra.concurrent_batches of them on the GPU,
 * one on the CPU, whose searches use every core already). */
void		cagra_worker_start_search_threads(void);

/* A descriptor readable when a batch has finished (-1: no threads). */
int			cagra_worker_search_event_fd(void);

/* Whether batches are being searched. */
bool		cagra_worker_searches_running(void);

/* Answer finished batches and serve queued requests until none is left or
 * every search thread is busy; returns how many were served. */
int			cagra_worker_serve_queue(void);

/* One non-search request, executed in place (offload_build.cpp, cache.cpp). */
CagraReply	cagra_worker_run_build_request(CagraRequestSlot *slot, void *payload);

/* Unmap the reusable segments of backends that are gone. */
void		cagra_worker_forget_mailboxes(void);

/* Drop build state of backends that are gone. */
void		cagra_worker_forget_builds(void);
