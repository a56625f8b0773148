/*
 * batch.cpp — the worker's queue loop: takes the oldest queued request;
 * for a search, waits until cagra.batch_window has passed since it was
 * queued (unless cagra.batch_max queries are already there), then takes
 * every queued search of the same index copy and search settings as one
 * batch and hands it to a search thread (search_pool.h); finished batches
 * are answered here: each slot marked done and its backend's latch set.
 * Uploads and builds wait until no batch is running, since they may evict
 * the copies that batches search.
 *
 * Payload segments are attached and detached in frames that hold no C++
 * object (dsm_attach may raise an error); the C++ work between runs in
 * noexcept functions.
 */
#include "worker/cache.h"
#include "worker/batch.h"
#include "worker/offload_build.h"
#include "worker/search_pool.h"

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <vector>

extern "C" {
#include "miscadmin.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"
}

/* Search threads running (0: batches run in the main loop). */
static int	search_threads = 0;

/* Whether two searches go into one launch: the same copy and request, and
 * no filter (the kernel takes one bitset for the whole launch, and each
 * filtered search brings its own). */
static bool
cagra_same_search(const CagraRequestSlot *a, const CagraRequestSlot *b)
{
	return !a->search.filtered && !b->search.filtered && a->key.db == b->key.db && a->key.index == b->key.index &&
		a->key.relfilenode == b->key.relfilenode && a->key.generation == b->key.generation &&
		a->key.n == b->key.n && cagra_same_search_request(&a->search, &b->search);
}

/* The oldest queued slot for this worker (lock held), or -1.  A BUILD_RUN
 * waits while the build thread is busy. */
static int
cagra_oldest_queued(CagraWorkerShared *sh, uint64 my_generation)
{
	int			best = -1;

	for (int i = 0; i < sh->nslots; i++)
	{
		CagraRequestSlot *s = &sh->slots[i];

		if (s->state == CAGRA_SLOT_QUEUED && s->worker_generation == my_generation &&
			!(s->kind == CAGRA_REQ_BUILD_RUN && cagra_worker_build_busy()) &&
			(best < 0 || s->seq < sh->slots[best].seq))
			best = i;
	}
	return best;
}

/* Queued searches like `first` (lock held), first included; up to max
 * queries in all (at least `first`).  Returns the count, fills picked. */
static int
cagra_collect_batch(CagraWorkerShared *sh, int first, int *picked, uint64 *queries)
{
	CagraRequestSlot *f = &sh->slots[first];
	int			n = 0;
	uint64		total = 0;

	picked[n++] = first;
	total += f->nq;
	for (int i = 0; i < sh->nslots; i++)
	{
		CagraRequestSlot *s = &sh->slots[i];

		if (i == first || s->state != CAGRA_SLOT_QUEUED || s->kind != CAGRA_REQ_SEARCH ||
			s->worker_generation != f->worker_generation || !cagra_same_search(f, s))
			continue;
		if (total + s->nq > (uint64) cagra_batch_max)
			continue;
		picked[n++] = i;
		total += s->nq;
	}
	*queries = total;
	return n;
}

/* ---- backends' reusable segments, kept mapped ---- */

typedef struct CagraMappedMailbox
{
	dsm_handle	handle;
	pid_t		pid;
	dsm_segment *seg;
} CagraMappedMailbox;

static CagraMappedMailbox *mailboxes = NULL;
static int	nmailboxes = 0;

static void
cagra_unmap_mailbox(int i)
{
	dsm_detach(mailboxes[i].seg);
	mailboxes[i] = mailboxes[--nmailboxes];
}

void
cagra_worker_forget_mailboxes(void)
{
	for (int i = nmailboxes - 1; i >= 0; i--)
		if (kill(mailboxes[i].pid, 0) != 0 && errno == ESRCH)
			cagra_unmap_mailbox(i);
}

/* A backend abandoned a request in its mailbox: it will use a new one. */
static void
cagra_drop_mailbox(dsm_handle handle)
{
	for (int i = 0; i < nmailboxes; i++)
		if (mailboxes[i].handle == handle)
		{
			cagra_unmap_mailbox(i);
			return;
		}
}

/* Whether a batch still running writes into this mailbox. */
static bool
cagra_mailbox_in_use(CagraWorkerShared *sh, dsm_handle handle)
{
	bool		used = false;

	LWLockAcquire(sh->lock, LW_SHARED);
	for (int i = 0; i < sh->nslots && !used; i++)
	{
		CagraRequestSlot *s = &sh->slots[i];

		used = s->mailbox && s->handle == handle &&
			(s->state == CAGRA_SLOT_RUNNING || s->state == CAGRA_SLOT_ABANDONED);
	}
	LWLockRelease(sh->lock);
	return used;
}

static void *
cagra_attach_mailbox(const CagraRequestSlot *s)
{
	CagraWorkerShared *sh = cagra_worker_shared;

	if (!mailboxes)
		mailboxes = (CagraMappedMailbox *) MemoryContextAllocZero(TopMemoryContext,
																   sizeof(CagraMappedMailbox) * sh->nslots);
	for (int i = 0; i < nmailboxes; i++)
		if (mailboxes[i].handle == s->handle)
			return dsm_segment_address(mailboxes[i].seg);
	if (nmailboxes == sh->nslots)
		cagra_worker_forget_mailboxes();
	for (int i = 0; i < nmailboxes && nmailboxes == sh->nslots; i++)
		if (!cagra_mailbox_in_use(sh, mailboxes[i].handle))
			cagra_unmap_mailbox(i);
	if (nmailboxes == sh->nslots)
		return NULL;			/* cannot happen: one slot per mailbox */

	dsm_segment *seg = dsm_attach(s->handle);

	if (!seg)
		return NULL;
	/* a backend that grew its mailbox has left the old one */
	for (int i = nmailboxes - 1; i >= 0; i--)
		if (mailboxes[i].pid == s->backend_pid && !cagra_mailbox_in_use(sh, mailboxes[i].handle))
			cagra_unmap_mailbox(i);
	mailboxes[nmailboxes].handle = s->handle;
	mailboxes[nmailboxes].pid = s->backend_pid;
	mailboxes[nmailboxes].seg = seg;
	nmailboxes++;
	return dsm_segment_address(seg);
}

/* Mark answered slots DONE (or free abandoned ones) and wake their backends. */
static void
cagra_answer(CagraWorkerShared *sh, const int *picked, int n)
{
	static dsm_handle *abandoned = NULL;
	int			nabandoned = 0;

	if (!abandoned)
		abandoned = (dsm_handle *) MemoryContextAlloc(TopMemoryContext, sizeof(dsm_handle) * sh->nslots);
	LWLockAcquire(sh->lock, LW_EXCLUSIVE);
	for (int i = 0; i < n; i++)
	{
		CagraRequestSlot *s = &sh->slots[picked[i]];

		if (s->state == CAGRA_SLOT_ABANDONED)
		{
			if (s->mailbox)
				abandoned[nabandoned++] = s->handle;
			s->state = CAGRA_SLOT_FREE;
			continue;
		}
		s->state = CAGRA_SLOT_DONE;
		if (s->reply != CAGRA_REPLY_OK && s->reply != CAGRA_REPLY_NEED_INDEX &&
			s->reply != CAGRA_REPLY_LOADING)
			pg_atomic_fetch_add_u64(&sh->errors, 1);
		SetLatch(s->backend_latch);
	}
	LWLockRelease(sh->lock);
	pg_atomic_fetch_add_u64(&sh->requests, n);
	for (int i = 0; i < nabandoned; i++)
		cagra_drop_mailbox(abandoned[i]);
}

void
cagra_worker_answer(const int *slots, int n)
{
	cagra_answer(cagra_worker_shared, slots, n);
}

/* Why the worker cannot answer this payload of a batch of `req` against
 * `copy`, or NULL. */
static const char *
cagra_search_payload_problem(CagraSearchPayload *p, const CagraSearchRequest &req, const CagraIndexCopy *copy)
{
	if (!p)
		return "request segment gone";
	if (p->dim != copy->format.dim || p->k != req.k)
		return "query dimensions do not match the index copy";
	if (req.filtered && p->filter_words < cagra_node_bitset_words(copy->key.n))
		return "the allowed-node bitset is shorter than the index copy";
	return NULL;
}

/* Run one batch (on a search thread, or here when there is none): gather
 * the queries of every payload, search, write each answer into its payload
 * and slot.  A filtered search is a batch of its own: its bitset is the
 * batch's.  No PostgreSQL call. */
static void
cagra_run_search_job(CagraSearchJob *job, CagraSearchLane *lane) noexcept
{
	CagraWorkerShared *sh = cagra_worker_shared;
	int			n = (int) job->picked.size();
	const CagraSearchRequest &req = sh->slots[job->picked[0]].search;
	const uint32 k = req.k;
	CagraIndexCopy *copy = job->copy;
	uint32		dim = copy->format.dim;

	try
	{
		std::string msg;
		CagraReply	r;
		std::vector<float> queries;
		std::vector<uint32> ids;
		std::vector<float> dists;
		uint32		nq = 0;
		const uint64 *allowed = NULL;

		queries.reserve(job->queries * dim);
		for (int i = 0; i < n; i++)
		{
			CagraSearchPayload *p = (CagraSearchPayload *) job->payloads[i];

			if (cagra_search_payload_problem(p, req, copy))
				continue;
			queries.insert(queries.end(), cagra_search_queries(p), cagra_search_queries(p) + (size_t) p->nq * dim);
			nq += p->nq;
			if (req.filtered)
				allowed = cagra_search_filter(p);
		}
		ids.resize((size_t) nq * k);
		dists.resize((size_t) nq * k);

		auto		started = std::chrono::steady_clock::now();

		r = nq > 0 ? cagra_engine_search(*copy, lane, queries.data(), nq, req, allowed, ids.data(), dists.data(),
										 &msg)
			: CAGRA_REPLY_OK;
		pg_atomic_fetch_add_u64(&sh->search_us, (uint64) std::chrono::duration_cast<std::chrono::microseconds>(
																						   std::chrono::steady_clock::now() - started).count());

		uint32		at = 0;

		for (int i = 0; i < n; i++)
		{
			CagraRequestSlot *s = &sh->slots[job->picked[i]];
			CagraSearchPayload *p = (CagraSearchPayload *) job->payloads[i];
			const char *problem = cagra_search_payload_problem(p, req, copy);

			if (problem)
			{
				s->reply = CAGRA_REPLY_ERROR;
				strlcpy(s->message, problem, sizeof(s->message));
				continue;
			}
			s->reply = r;
			s->copy.n = copy->key.n;
			s->copy.reused = copy->key.reused;
			strlcpy(s->message, msg.c_str(), sizeof(s->message));
			if (r == CAGRA_REPLY_OK)
			{
				const uint32 *from = ids.data() + (size_t) at * k;
				uint64	   *tids = cagra_search_tids(p);

				memcpy(cagra_search_ids(p), from, (size_t) p->nq * k * sizeof(uint32));
				memcpy(cagra_search_distances(p), dists.data() + (size_t) at * k, (size_t) p->nq * k * sizeof(float));
				for (size_t j = 0; j < (size_t) p->nq * k; j++)
					tids[j] = from[j] < copy->tids.size() ? copy->tids[from[j]] : 0;
			}
			at += p->nq;
		}
		job->searched = nq;
		pg_atomic_fetch_add_u64(&sh->queries, nq);
		pg_atomic_fetch_add_u64(&sh->batches, 1);
	}
	catch (...)
	{
		for (int i = 0; i < n; i++)
		{
			CagraRequestSlot *s = &sh->slots[job->picked[i]];

			s->reply = CAGRA_REPLY_OUT_OF_MEMORY;
			strlcpy(s->message, "out of memory in the cagra worker", sizeof(s->message));
		}
	}
}

/* A job for the n picked slots, or NULL when memory is short. */
static CagraSearchJob *
cagra_new_search_job(const int *picked, int n, uint64 queries) noexcept
{
	try
	{
		CagraSearchJob *job = new CagraSearchJob();

		job->picked.assign(picked, picked + n);
		job->payloads.assign(n, nullptr);
		job->segs.assign(n, nullptr);
		job->queries = queries;
		return job;
	}
	catch (...)
	{
		return nullptr;
	}
}

/* The copy the job searches (touching it); false, with every slot's reply
 * set, when there is none yet. */
static bool
cagra_pick_copy(CagraWorkerShared *sh, CagraSearchJob *job) noexcept
{
	try
	{
		const CagraRequestSlot *first = &sh->slots[job->picked[0]];

		job->copy = cagra_cache_lookup(first->key);
		if (job->copy)
			return true;
		for (int i : job->picked)
		{
			CagraRequestSlot *s = &sh->slots[i];

			s->reply = cagra_cache_miss_reply(s->key, s->backend_pid, s->message, sizeof(s->message));
		}
	}
	catch (...)
	{
		for (int i : job->picked)
		{
			CagraRequestSlot *s = &sh->slots[i];

			s->reply = CAGRA_REPLY_OUT_OF_MEMORY;
			strlcpy(s->message, "out of memory in the cagra worker", sizeof(s->message));
		}
	}
	return false;
}

/* The request's payload; *seg is set when it must be detached afterwards
 * (one-off segments; mailboxes stay mapped). */
static void *
cagra_attach_payload(const CagraRequestSlot *s, dsm_segment **seg)
{
	*seg = NULL;
	if (s->mailbox)
		return cagra_attach_mailbox(s);
	*seg = dsm_attach(s->handle);
	return *seg ? dsm_segment_address(*seg) : NULL;
}

/* Detach a job's one-off segments, answer its slots, free it. */
static void
cagra_finish_search_job(CagraWorkerShared *sh, CagraSearchJob *job)
{
	for (dsm_segment *seg : job->segs)
		if (seg)
			dsm_detach(seg);
	if (job->copy)
		job->copy->searches += job->searched;
	cagra_answer(sh, job->picked.data(), (int) job->picked.size());
	delete job;
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

/* Wait for and answer every running batch. */
void
cagra_worker_drain_searches(void)
{
	CagraWorkerShared *sh = cagra_worker_shared;

	while (cagra_search_pool_in_flight() > 0)
	{
		cagra_search_pool_wait();
		cagra_finish_searches(sh);
	}
}

/* Sleep until the batch window of the slot queued at `queued_at` ends. */
static void
cagra_wait_batch_window(TimestampTz queued_at)
{
	TimestampTz until = queued_at + cagra_batch_window_us;
	TimestampTz now = GetCurrentTimestamp();

	if (until > now)
		pg_usleep((long) (until - now));
}

/* Called with the lock held; releases it. */
static void
cagra_serve_searches(CagraWorkerShared *sh, int first, int *picked)
{
	uint64		total;
	int			n;

	n = cagra_collect_batch(sh, first, picked, &total);
	if (total < (uint64) cagra_batch_max && cagra_batch_window_us > 0)
	{
		TimestampTz queued_at = sh->slots[first].queued_at;

		LWLockRelease(sh->lock);
		cagra_wait_batch_window(queued_at);
		LWLockAcquire(sh->lock, LW_EXCLUSIVE);
		if (sh->slots[first].state != CAGRA_SLOT_QUEUED)
		{
			LWLockRelease(sh->lock);	/* abandoned meanwhile */
			return;
		}
		n = cagra_collect_batch(sh, first, picked, &total);
	}
	TimestampTz now = GetCurrentTimestamp();
	uint64		queued_us = 0;

	for (int i = 0; i < n; i++)
	{
		sh->slots[picked[i]].state = CAGRA_SLOT_RUNNING;
		queued_us += (uint64) Max(now - sh->slots[picked[i]].queued_at, 0);
	}
	LWLockRelease(sh->lock);
	pg_atomic_fetch_add_u64(&sh->queue_us, queued_us);

	CagraSearchJob *job = cagra_new_search_job(picked, n, total);

	if (!job)
	{
		for (int i = 0; i < n; i++)
		{
			sh->slots[picked[i]].reply = CAGRA_REPLY_OUT_OF_MEMORY;
			strlcpy(sh->slots[picked[i]].message, "out of memory in the cagra worker",
					sizeof(sh->slots[picked[i]].message));
		}
		cagra_answer(sh, picked, n);
		return;
	}
	if (!cagra_pick_copy(sh, job))
	{
		cagra_finish_search_job(sh, job);
		return;
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
}

static void
cagra_serve_one(CagraWorkerShared *sh, int idx)
{
	CagraRequestSlot *s = &sh->slots[idx];
	dsm_segment *seg;

	s->state = CAGRA_SLOT_RUNNING;
	LWLockRelease(sh->lock);

	void	   *payload = cagra_attach_payload(s, &seg);

	if (!payload)
	{
		s->reply = CAGRA_REPLY_ERROR;
		strlcpy(s->message, "request segment gone", sizeof(s->message));
	}
	else if (s->kind == CAGRA_REQ_UPLOAD)
		s->reply = cagra_cache_upload(s->key, s->backend_pid, (CagraUploadPayload *) payload,
									  s->message, sizeof(s->message));
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
	int			want = cagra_engine_is_gpu() ? cagra_concurrent_batches : 1;

	search_threads = cagra_search_pool_start(want, cagra_run_search_job);
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
	int			served = 0;

	if (!picked)
		picked = (int *) MemoryContextAlloc(TopMemoryContext, sizeof(int) * sh->nslots);
	for (;;)
	{
		served += search_threads > 0 ? cagra_finish_searches(sh) : 0;
		LWLockAcquire(sh->lock, LW_EXCLUSIVE);
		int			first = cagra_oldest_queued(sh, sh->generation);

		if (first < 0)
		{
			LWLockRelease(sh->lock);
			return served;
		}
		/* each branch releases the lock */
		if (sh->slots[first].kind == CAGRA_REQ_SEARCH)
		{
			if (search_threads > 0 && !cagra_search_pool_has_room())
			{
				LWLockRelease(sh->lock);	/* a finishing batch wakes the loop */
				return served;
			}
			cagra_serve_searches(sh, first, picked);
		}
		else if (cagra_search_pool_in_flight() > 0)
		{
			LWLockRelease(sh->lock);
			cagra_worker_drain_searches();
			continue;
		}
		else
			cagra_serve_one(sh, first);
		served++;
		CHECK_FOR_INTERRUPTS();
	}
}
