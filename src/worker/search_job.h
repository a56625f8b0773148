/*
 * search_job.h — one batch of searches run and answered (search_job.cpp).
 * Worker process only.
 */
#pragma once

#include <vector>

#include "worker/search_pool.h"

/* Why the worker cannot answer this payload of a batch of `req` against
 * `copy` (NULL: the payload's segment was gone), or NULL. */
const char *cagra_search_payload_problem(CagraSearchPayload *p, const CagraSearchRequest &req,
										 const CagraIndexCopy *copy);

/* A job for the n picked slots, or NULL when memory is short. */
CagraSearchJob *cagra_new_search_job(const int *picked, int n, uint64 queries, bool filtered) noexcept;

/* The copy the job searches (touching it); false, with every slot's reply
 * set, when there is none yet. */
bool		cagra_pick_copy(CagraWorkerShared *sh, CagraSearchJob *job) noexcept;

/* Run a job with its payloads attached and answer its slots (a search
 * thread's CagraSearchJobRunner; lane NULL in the main loop). */
void		cagra_run_search_job(CagraSearchJob *job, CagraSearchLane *lane) noexcept;

/* The collector thread's turn (a CagraStartedCollector): answers the lone
 * queries started on the resident kernel that are done. */
void		cagra_collect_started(std::vector<CagraSearchJob *> &finished) noexcept;

/* A job never started: its one-off segments detached, freed. */
void		cagra_drop_search_job(CagraSearchJob *job);

/* Detach a job's one-off segments, answer its slots (unless the job did),
 * free it. */
void		cagra_finish_search_job(CagraWorkerShared *sh, CagraSearchJob *job);
