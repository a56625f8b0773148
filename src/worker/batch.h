/*
 * batch.h — the worker's side of the request queue (batch.cpp): batching
 * queued searches onto the search threads, running the other requests.
 * Worker process only.
 */
#pragma once

#include "protocol/protocol.h"

/* Start the search threads (batch.cpp says how many). */
void		cagra_worker_start_search_threads(void);

/* A descriptor readable when a batch has finished (-1: no threads). */
int			cagra_worker_search_event_fd(void);

/* Whether batches are being searched. */
bool		cagra_worker_searches_running(void);

/* Answer finished batches and serve queued requests until none is left or
 * every search thread is busy; returns how many were served. */
int			cagra_worker_serve_queue(void);

/* Wait for and answer every running search batch. */
void		cagra_worker_drain_searches(void);
