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

/* Mark answered slots DONE (or free abandoned ones) and wake their backends. */
void		cagra_worker_answer(const int *slots, int n);

/* Wait for and answer every running search batch. */
void		cagra_worker_drain_searches(void);

/* A BUILD_DATA or BUILD_FETCH request, executed in place (offload_build.cpp). */
CagraReply	cagra_worker_run_build_request(CagraRequestSlot *slot, void *payload);

/* BUILD_RUN: hand the build to the build thread; true when it runs (the
 * slot is answered by cagra_worker_poll_build), false with the slot's reply
 * set.  `seg` (NULL for a mailbox) stays attached until the answer. */
bool		cagra_worker_start_build(CagraRequestSlot *slot, int idx, void *payload, dsm_segment *seg);

/* Whether the build thread is busy (further BUILD_RUN requests wait). */
bool		cagra_worker_build_busy(void);

/* A descriptor readable when the build thread has finished (-1: none). */
int			cagra_worker_build_event_fd(void);

/* Stop the running build if its backend gave up or exited; answer it when
 * it has finished.  True when a build was answered. */
bool		cagra_worker_poll_build(void);

/* Unmap the reusable segments of backends that are gone. */
void		cagra_worker_forget_mailboxes(void);

/* Drop build state of backends that are gone. */
void		cagra_worker_forget_builds(void);
