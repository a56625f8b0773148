/*
 * search_pool.h — the worker's search threads.  Several batches run at
 * once, each on a thread with its own GPU search contexts, so a launch no
 * longer waits for the one before it to come back, and the queue is read
 * again while the device works.  The main thread attaches payloads, picks
 * index copies, submits jobs and answers the finished ones; the threads run
 * only the search itself and call no PostgreSQL function.
 * Worker process only.
 */
#pragma once

#include <vector>

#include "worker/engine.h"

extern "C" {
#include "datatype/timestamp.h"
#include "storage/dsm.h"
}

/* One batch: the slots it answers, their payloads, the copy it searches. */
struct CagraSearchJob
{
	std::vector<int> picked;
	/* the picked requests' search, alike in all: copied, as the first
	 * slot is its backend's again, for its next request, once answered */
	CagraSearchRequest search;
	std::vector<void *> payloads;		/* NULL: the segment was gone */
	std::vector<dsm_segment *> segs;	/* one-off segments to detach */
	CagraIndexCopy *copy = nullptr;
	bool		filtered = false;	/* one filtered search, not a shared batch */
	uint64		queries = 0;		/* queued in the picked slots */
	uint64		searched = 0;		/* run by the thread */
	TimestampTz started_at = 0;		/* started on the resident kernel (0: a batch) */
	TimestampTz done_at = 0;		/* when the thread finished it */
	bool		answered = false;	/* the thread answered the slots */
	std::vector<int> abandoned;		/* picked slots whose backend had left: to free */
};

/* What a thread does with a job (search_job.h). */
typedef void (*CagraSearchJobRunner) (CagraSearchJob *job, CagraSearchLane *lane);

/* What the collector thread does while started jobs are out: answers those
 * whose queries are done and appends them to `finished` (search_job.h). */
typedef void (*CagraStartedCollector) (std::vector<CagraSearchJob *> &finished);

/* Start up to batch_threads + filtered_threads threads; run(job, lane)
 * executes each job.  At most batch_threads shared batches run at once, and
 * at most filtered_threads filtered searches (0: they share the batch
 * threads, at most batch_threads of them).  With `collect`, also the
 * collector thread of started jobs.  Returns how many search threads
 * started (0: the caller runs jobs itself).  They are joined before the
 * process detaches its shared memory. */
int			cagra_search_pool_start(int batch_threads, int filtered_threads, CagraSearchJobRunner run,
									CagraStartedCollector collect) noexcept;

/* A descriptor that is readable while finished jobs wait to be taken. */
int			cagra_search_pool_fd(void);

/* Whether a thread is free for another job of this kind. */
bool		cagra_search_pool_has_room(bool filtered);

/* Hand a job to a free thread (cagra_search_pool_has_room(job->filtered)
 * must hold). */
void		cagra_search_pool_submit(CagraSearchJob *job);

/* Count a job whose query was started on the device with the job as its
 * tag (cagra_engine_start_resident), so that the collector thread polls
 * until it comes back and hands it back finished as the others are.
 * Only while cagra_search_pool_collects(). */
void		cagra_search_pool_track_started(void);

/* Whether the collector thread runs. */
bool		cagra_search_pool_collects(void);

/* A finished job, or NULL; the caller owns it. */
CagraSearchJob *cagra_search_pool_take_finished(void);

/* Jobs submitted and not yet taken back. */
int			cagra_search_pool_in_flight(void);

/* Of them, the shared batches (not filtered searches, not started jobs). */
int			cagra_search_pool_batches_in_flight(void);

/* Block until a job finishes (none in flight: return at once). */
void		cagra_search_pool_wait(void);
