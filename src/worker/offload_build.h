/*
 * offload_build.h — CREATE INDEX offload, worker side (offload_build.cpp):
 * the build requests and the build thread.  Worker process only.
 */
#pragma once

#include "protocol/protocol.h"

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

/* Stop the running build if its backend gave up or exited; when it has
 * finished, write its answer and return its slot for the caller to answer
 * (-1: none).  A build out of device memory is retried once after
 * drain_searches() and the cache's copies are freed. */
int			cagra_worker_poll_build(void (*drain_searches) (void));

/* Drop build state of backends that are gone. */
void		cagra_worker_forget_builds(void);
