/*
 * batch.cpp — the worker's queue loop: takes the oldest queued request;
 * for a search, waits until the batch window has passed since it was
 * queued (unless a full batch is already there), then takes
 * every queued search of the same index copy and search plan as one
 * batch and hands it to a search thread (search_pool.h, running
 * search_job.h); a lone unfiltered query may start on the resident kernel
 * at once.  Uploads and builds wait until no batch is running, since they
 * may evict the copies that batches search.
 *
 * Payload segments are attached and detached in frames that hold no C++
 * object (dsm_attach may raise an error); the C++ work between runs in
 * noexcept functions.
 */
#include "worker/cache.h"
#include "worker/batch.h"
#include "worker/offload_build.h"
#include "worker/search_job.h"
#include "worker/slots.h"

#include <algorithm>
#include <cstring>

extern "C" {
#include "miscadmin.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"
}


/*
 * How searches are batched: constants of the worker, not settings, each a
 * trade of latency against launches (docs/worker.md, "Batching").  A batch
 * holds at most kBatchMaxQueries queries.  While another batch runs, a
 * search waits up to the window after it was queued for others to join
 * it: on the GPU a launch costs more than the wait; the CPU engine runs one
 * batch at a time, whose searches queue meanwhile anyway, so it does not
 * wait, and neither do inserts, whose plans (made on the host after the
 * search) cost more than a launch saves.  The GPU engine runs
 * kGpuBatchThreads batches at once, each on a stream of its own, and
 * kGpuFilteredThreads filtered searches (each a launch alone) on threads
 * besides them; the CPU engine one thread, whose searches use every core
 * already.
 */
static const uint64 kBatchMaxQueries = 4096;
static const int kGpuBatchWindowUs = 100;
static const int kGpuBatchThreads = 4;
static const int kGpuFilteredThreads = 8;

static int
cagra_batch_window_us(void)
{
	return cagra_engine_is_gpu() ? kGpuBatchWindowUs : 0;
}

/* Search threads running (0: batches run in the main loop). */
static int	search_threads = 0;

/* Whether the resident kernel refused a lone query in this turn of the
 * queue: the rest of the turn forms batches. */
static bool start_refused = false;

/* Searches queued at the last look over the slots, less those started
 * alone since.  Each lone start costs the main loop a start of its own;
 * with more than kLoneStartQueueMax waiting, batches serve them with
 * fewer.  The bound trades a lone query's latency against the main loop's
 * time under many clients (docs/benchmarks.md, "Constants"). */
static int	queued_searches = 0;
static const int kLoneStartQueueMax = 64;

/* Whether a queued search may start on the resident kernel at once, without
 * a batch window or a search thread: a lone unfiltered query while few
 * wait. */
static bool
cagra_startable(const CagraRequestSlot *s)
{
	return search_threads > 0 && !start_refused && queued_searches <= kLoneStartQueueMax && s->nq == 1 &&
		!s->search.filtered && !s->search.plans_inserts && cagra_engine_can_start_resident() &&
		cagra_search_pool_collects();
}

/* Whether two searches go into one launch: the same index and request, and
 * no filter (the kernel takes one bitset for the whole launch, and each
 * filtered search brings its own); cagra_same_copy says whether they
 * search the same copy of it. */
static bool
cagra_same_search(const CagraRequestSlot *a, const CagraRequestSlot *b)
{
	return !a->search.filtered && !b->search.filtered && a->key.db == b->key.db && a->key.index == b->key.index &&
		a->key.relfilenode == b->key.relfilenode && cagra_same_search_request(&a->search, &b->search);
}

/* Whether search `s` is served by the copy that search `f` asked for
 * (`copy`; NULL: none cached yet): the same key, or another key that this
 * copy serves.  Concurrent inserts each count a node, so their neighbour
 * searches carry different keys that one copy serves. */
static bool
cagra_same_copy(const CagraRequestSlot *f, const CagraRequestSlot *s, const CagraIndexCopy *copy)
{
	if (f->key.generation == s->key.generation && f->key.n == s->key.n)
		return true;
	return copy != nullptr && cagra_cache_lookup(s->key) == copy;
}

/*
 * The queued slots for this worker that may be served now, oldest first,
 * into `order`; returns how many.  A BUILD_RUN waits while the build
 * thread is busy, a search while no search thread is free for its kind (a
 * shared batch or a filtered search) unless it can start on the resident
 * kernel.  The fields of a queued slot may change under the reader (its
 * backend may give it up and queue another request): whoever acts on them
 * takes the slot first (cagra_take_slot).
 *
 * One look serves a whole turn of lone starts: with 64 clients the slots
 * that backends keep writing miss the cache at each look, and a look
 * before every start cost the main loop more than the start itself.
 */
static int
cagra_queued_in_order(CagraWorkerShared *sh, uint64 my_generation, int *order)
{
	int			n = 0;
	int			searches = 0;

	for (int i = 0; i < sh->nslots; i++)
	{
		CagraRequestSlot *s = &sh->slots[i];

		if (cagra_slot_state(s) != CAGRA_SLOT_QUEUED || s->worker_generation != my_generation)
			continue;
		searches += s->kind == CAGRA_REQ_SEARCH;
		if (!(s->kind == CAGRA_REQ_BUILD_RUN && cagra_worker_build_busy()) &&
			!(s->kind == CAGRA_REQ_SEARCH && search_threads > 0 && !cagra_startable(s) &&
			  !cagra_search_pool_has_room(s->search.filtered)))
			order[n++] = i;
	}
	queued_searches = searches;
	std::sort(order, order + n, [sh](int a, int b) { return sh->slots[a].seq < sh->slots[b].seq; });
	return n;
}

/* Take the queued searches like the taken slot `first`, up to
 * kBatchMaxQueries queries in all (at least `first`).  Returns the count
 * (first included), fills picked. */
static int
cagra_collect_batch(CagraWorkerShared *sh, int first, int *picked, uint64 *queries)
{
	CagraRequestSlot *f = &sh->slots[first];
	const CagraIndexCopy *copy = cagra_cache_lookup(f->key);
	int			n = 0;
	uint64		total = 0;

	picked[n++] = first;
	total += f->nq;
	for (int i = 0; i < sh->nslots; i++)
	{
		CagraRequestSlot *s = &sh->slots[i];

		if (i == first || cagra_slot_state(s) != CAGRA_SLOT_QUEUED || s->kind != CAGRA_REQ_SEARCH ||
			s->worker_generation != f->worker_generation || !cagra_same_search(f, s) ||
			!cagra_same_copy(f, s, copy))
			continue;
		if (total + s->nq > kBatchMaxQueries || !cagra_take_slot(s))
			continue;
		/* taken: its fields are stable now, look again */
		if (s->kind != CAGRA_REQ_SEARCH || s->worker_generation != f->worker_generation ||
			!cagra_same_search(f, s) || !cagra_same_copy(f, s, copy) || total + s->nq > kBatchMaxQueries)
		{
			cagra_untake_slot(s);
			continue;
		}
		picked[n++] = i;
		total += s->nq;
	}
	*queries = total;
	return n;
}

/* Start the taken lone query of slot `first` on the resident kernel and
 * hand its job to the collector thread, which answers it as soon as it is
 * done: no batch window, no search thread.  False, with nothing done, when
 * it cannot start now (no copy yet, a bad payload, the kernel busy or
 * serving another index): it then goes the way of a batch. */
static bool
cagra_start_lone_search(CagraWorkerShared *sh, int first)
{
	CagraRequestSlot *f = &sh->slots[first];
	CagraIndexCopy *copy = cagra_cache_lookup(f->key);
	CagraSearchJob *job = copy ? cagra_new_search_job(&first, 1, 1, false) : nullptr;

	start_refused = true;		/* until it starts */
	if (!job)
		return false;
	job->copy = copy;
	job->payloads[0] = cagra_attach_payload(f, &job->segs[0]);

	CagraSearchPayload *p = (CagraSearchPayload *) job->payloads[0];
	TimestampTz now = GetCurrentTimestamp();

	/* set before the start: the collector may answer it at once */
	job->started_at = now;
	if (cagra_search_payload_problem(p, f->search, copy) ||
		!cagra_engine_start_resident(*copy, cagra_search_queries(p), f->search, (uint64) (uintptr_t) job))
	{
		cagra_drop_search_job(job);
		return false;
	}
	start_refused = false;
	cagra_add_timing(sh, CAGRA_TIMING_QUEUE, (uint64) Max(now - f->queued_at, 0), 1);
	cagra_search_pool_track_started();
	return true;
}

/* Answer every batch the search threads have finished; returns how many. */
static int
cagra_finish_searches(CagraWorkerShared *sh)
{
	int			n = 0;

	for (CagraSearchJob *job; (job = cagra_search_pool_take_finished()) != nullptr; n++)
		cagra_finish_search_job(sh, job);
	return n;
}

/* Wait for and answer every running batch (the timing step `drain`). */
void
cagra_worker_drain_searches(void)
{
	CagraWorkerShared *sh = cagra_worker_shared;

	if (cagra_search_pool_in_flight() == 0)
		return;

	TimestampTz start = GetCurrentTimestamp();

	while (cagra_search_pool_in_flight() > 0)
	{
		cagra_search_pool_wait();
		cagra_finish_searches(sh);
	}
	cagra_add_timing(sh, CAGRA_TIMING_DRAIN, (uint64) Max(GetCurrentTimestamp() - start, 0), 1);
}

/* While another batch runs, wait until the batch window of the slot
 * queued at `queued_at` ends, for more searches to join; answer batches
 * that finish meanwhile.  With no other batch running, start at once. */
static void
cagra_wait_batch_window(CagraWorkerShared *sh, TimestampTz queued_at)
{
	TimestampTz until = queued_at + cagra_batch_window_us();

	for (;;)
	{
		TimestampTz now = GetCurrentTimestamp();

		if (now >= until || (search_threads > 0 && cagra_search_pool_batches_in_flight() == 0))
			return;
		pg_usleep((long) Min(until - now, 20));
		if (search_threads > 0)
			cagra_finish_searches(sh);
	}
}

/* Serve the queued search `first` with every search that can join it.
 * True when the queue is still as the last look saw it but for this slot
 * (it started alone on the resident kernel, or its backend gave it up). */
static bool
cagra_serve_searches(CagraWorkerShared *sh, int first, int *picked)
{
	CagraRequestSlot *f = &sh->slots[first];
	uint64		total;
	int			n;

	if (!cagra_take_slot(f))
		return true;			/* its backend gave up: nothing changed */
	if (f->kind != CAGRA_REQ_SEARCH ||
		(search_threads > 0 && !cagra_startable(f) && !cagra_search_pool_has_room(f->search.filtered)))
	{
		cagra_untake_slot(f);	/* and queued another request since */
		return false;
	}

	uint64		pickup_us = (uint64) Max(GetCurrentTimestamp() - f->queued_at, 0);

	if (cagra_startable(f) && cagra_start_lone_search(sh, first))
	{
		cagra_add_timing(sh, CAGRA_TIMING_PICKUP, pickup_us, 1);
		queued_searches--;
		return true;
	}
	if (search_threads > 0 && !cagra_search_pool_has_room(f->search.filtered))
	{
		cagra_untake_slot(f);	/* the kernel refused it and no thread is free */
		return false;
	}
	cagra_add_timing(sh, CAGRA_TIMING_PICKUP, pickup_us, 1);
	/* a filtered search never shares its launch: nothing to wait for; an
	 * insert takes the inserts queued already */
	if (f->nq < kBatchMaxQueries && cagra_batch_window_us() > 0 && !f->search.filtered &&
		!f->search.plans_inserts)
		cagra_wait_batch_window(sh, f->queued_at);
	n = cagra_collect_batch(sh, first, picked, &total);

	TimestampTz now = GetCurrentTimestamp();
	uint64		queued_us = 0;

	for (int i = 0; i < n; i++)
		queued_us += (uint64) Max(now - sh->slots[picked[i]].queued_at, 0);
	cagra_add_timing(sh, CAGRA_TIMING_QUEUE, queued_us, (uint64) n);

	CagraSearchJob *job = cagra_new_search_job(picked, n, total, f->search.filtered);

	if (!job)
	{
		for (int i = 0; i < n; i++)
		{
			sh->slots[picked[i]].reply = CAGRA_REPLY_OUT_OF_MEMORY;
			strlcpy(sh->slots[picked[i]].message, "out of memory in the cagra worker",
					sizeof(sh->slots[picked[i]].message));
		}
		cagra_answer(sh, picked, n);
		return false;
	}
	if (!cagra_pick_copy(sh, job))
	{
		cagra_finish_search_job(sh, job);
		return false;
	}
	for (int i = 0; i < n; i++)
		job->payloads[i] = cagra_attach_payload(&sh->slots[picked[i]], &job->segs[i]);
	if (search_threads > 0)
		cagra_search_pool_submit(job);
	else
	{
		cagra_run_search_job(job, nullptr);
		cagra_finish_search_job(sh, job);
	}
	return false;
}

static void
cagra_serve_one(CagraWorkerShared *sh, int idx)
{
	CagraRequestSlot *s = &sh->slots[idx];
	dsm_segment *seg;

	if (!cagra_take_slot(s))
		return;					/* its backend gave up */
	/* its backend may have queued another request in it since the look:
	 * serve it here only if the look would have let it through */
	if (s->kind == CAGRA_REQ_SEARCH || (s->kind == CAGRA_REQ_BUILD_RUN && cagra_worker_build_busy()))
	{
		cagra_untake_slot(s);
		return;
	}

	void	   *payload = cagra_attach_payload(s, &seg);

	if (!payload)
	{
		s->reply = CAGRA_REPLY_ERROR;
		strlcpy(s->message, "request segment gone", sizeof(s->message));
	}
	else if (s->kind == CAGRA_REQ_UPLOAD)
		s->reply = cagra_cache_upload(s->key, s->backend_pid, (CagraUploadPayload *) payload,
									  s->message, sizeof(s->message));
	else if (s->kind == CAGRA_REQ_UPDATE)
	{
		TimestampTz start = GetCurrentTimestamp();

		s->reply = cagra_cache_update(s->key, (CagraUpdatePayload *) payload, s->message, sizeof(s->message));
		cagra_add_timing(sh, CAGRA_TIMING_UPDATE, (uint64) Max(GetCurrentTimestamp() - start, 0), 1);
	}
	else if (s->kind == CAGRA_REQ_BUILD_RUN)
	{
		if (cagra_worker_start_build(s, idx, payload, seg))
			return;				/* answered when the build thread is done */
	}
	else
		s->reply = cagra_worker_run_build_request(s, payload);
	if (seg)
		dsm_detach(seg);
	cagra_answer(sh, &idx, 1);
}

void
cagra_worker_start_search_threads(void)
{
	bool		gpu = cagra_engine_is_gpu();
	int			batches = gpu ? kGpuBatchThreads : 1;
	int			filtered = gpu ? kGpuFilteredThreads : 0;
	int			want = batches + filtered;

	search_threads = cagra_search_pool_start(batches, filtered, cagra_run_search_job,
											 gpu ? cagra_collect_started : nullptr);
	if (search_threads < want)
		ereport(LOG,
				(errmsg("cagra gpu worker: %d of %d search threads started", search_threads, want)));
}

int
cagra_worker_search_event_fd(void)
{
	return search_threads > 0 ? cagra_search_pool_fd() : -1;
}

bool
cagra_worker_searches_running(void)
{
	return cagra_search_pool_in_flight() > 0;
}

int
cagra_worker_serve_queue(void)
{
	CagraWorkerShared *sh = cagra_worker_shared;
	static int *picked = NULL;
	static int *order = NULL;
	int			served = 0;

	if (!picked)
		picked = (int *) MemoryContextAlloc(TopMemoryContext, sizeof(int) * sh->nslots);
	if (!order)
		order = (int *) MemoryContextAlloc(TopMemoryContext, sizeof(int) * sh->nslots);
	start_refused = false;
	for (;;)
	{
		served += search_threads > 0 ? cagra_finish_searches(sh) : 0;
		int			n = cagra_queued_in_order(sh, sh->generation, order);

		if (n == 0)
			return served;		/* (searches waiting for a thread: a finishing one wakes the loop) */
		/* down the look's list while its searches start alone; anything
		 * else (a batch, another request) changes the queue: look again */
		for (int j = 0; j < n; j++)
		{
			int			first = order[j];
			bool		queue_as_seen = false;

			if (sh->slots[first].kind == CAGRA_REQ_SEARCH)
				queue_as_seen = cagra_serve_searches(sh, first, picked);
			else if (cagra_search_pool_in_flight() > 0)
			{
				cagra_worker_drain_searches();
				break;
			}
			else
				cagra_serve_one(sh, first);
			served++;
			CHECK_FOR_INTERRUPTS();
			if (!queue_as_seen)
				break;
		}
	}
}

