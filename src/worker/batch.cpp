/*
 * batch.cpp — the worker's queue loop: takes the oldest queued request;
 * for a search, waits until the batch window has passed since it was
 * queued (unless a full batch is already there), then takes
 * every queued search of the same index copy and search plan as one
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

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <vector>

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
 * wait.  The GPU engine runs kGpuBatchThreads batches at once, each on a
 * stream of its own, and kGpuFilteredThreads filtered searches (each a
 * launch alone) on threads besides them; the CPU engine one thread, whose
 * searches use every core already.
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
		!s->search.filtered && cagra_engine_can_start_resident() && cagra_search_pool_collects();
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

/* Take a queued slot (QUEUED -> RUNNING); false when its backend gave it
 * up meanwhile. */
static bool
cagra_take_slot(CagraRequestSlot *s)
{
	return cagra_slot_move(s, CAGRA_SLOT_QUEUED, CAGRA_SLOT_RUNNING);
}

/* Put back a taken slot that does not belong in the batch after all (its
 * backend queued another request between the look and the take). */
static void
cagra_untake_slot(CagraRequestSlot *s)
{
	if (!cagra_slot_move(s, CAGRA_SLOT_RUNNING, CAGRA_SLOT_QUEUED))
		pg_atomic_write_u32(&s->state, CAGRA_SLOT_FREE);	/* abandoned meanwhile */
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

	for (int i = 0; i < sh->nslots && !used; i++)
	{
		CagraRequestSlot *s = &sh->slots[i];
		CagraSlotState st = cagra_slot_state(s);

		used = (st == CAGRA_SLOT_RUNNING || st == CAGRA_SLOT_ABANDONED) && s->mailbox && s->handle == handle;
	}
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

/* Answer taken slots (RUNNING -> DONE) and wake their backends; a slot
 * whose backend left meanwhile (ABANDONED) goes to `abandoned` instead, for
 * the main loop to free.  Returns how many did.  Calls nothing of
 * PostgreSQL but SetLatch of another process's latch and the clock, so the
 * search threads answer their own batches. */
static int
cagra_answer_slots(CagraWorkerShared *sh, const int *picked, int n, int *abandoned) noexcept
{
	TimestampTz now = GetCurrentTimestamp();
	int			nabandoned = 0;
	uint64		errors = 0;

	for (int i = 0; i < n; i++)
	{
		CagraRequestSlot *s = &sh->slots[picked[i]];
		/* read before DONE: from then on the slot is the backend's */
		Latch	   *latch = s->backend_latch;

		if (s->reply != CAGRA_REPLY_OK && s->reply != CAGRA_REPLY_NEED_INDEX && s->reply != CAGRA_REPLY_LOADING)
			errors++;
		s->answered_at = now;
		if (cagra_slot_move(s, CAGRA_SLOT_RUNNING, CAGRA_SLOT_DONE))
			SetLatch(latch);
		else
			abandoned[nabandoned++] = picked[i];
	}
	pg_atomic_fetch_add_u64(&sh->errors, errors);
	pg_atomic_fetch_add_u64(&sh->requests, n);
	return nabandoned;
}

/* Free abandoned slots; the mailbox a request was abandoned in is never
 * used again (the backend makes a new one), so it is unmapped. */
static void
cagra_free_abandoned(CagraWorkerShared *sh, const int *slots, int n)
{
	for (int i = 0; i < n; i++)
	{
		CagraRequestSlot *s = &sh->slots[slots[i]];
		bool		mailbox = s->mailbox;
		dsm_handle	handle = s->handle;

		pg_atomic_write_u32(&s->state, CAGRA_SLOT_FREE);
		if (mailbox)
			cagra_drop_mailbox(handle);
	}
}

static void
cagra_answer(CagraWorkerShared *sh, const int *picked, int n)
{
	static int *abandoned = NULL;

	if (!abandoned)
		abandoned = (int *) MemoryContextAlloc(TopMemoryContext, sizeof(int) * sh->nslots);
	cagra_free_abandoned(sh, abandoned, cagra_answer_slots(sh, picked, n, abandoned));
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
	return NULL;
}

/* Write request i of the job its answer: the reply r (with msg), or its
 * payload's problem, and when OK its rows (ids, dists: the request's own, k
 * a query; in_place: already in its payload) with their heap TIDs; then
 * answer its slot.  Returns 1 when its backend had left (the slot then is
 * in *abandoned), else 0. */
static int
cagra_answer_request(CagraWorkerShared *sh, CagraSearchJob *job, int i, uint32 k, const uint32 *ids,
					 const float *dists, bool in_place, CagraReply r, const char *msg, int *abandoned) noexcept
{
	CagraRequestSlot *s = &sh->slots[job->picked[i]];
	CagraSearchPayload *p = (CagraSearchPayload *) job->payloads[i];
	const char *problem = cagra_search_payload_problem(p, sh->slots[job->picked[0]].search, job->copy);

	if (problem)
	{
		s->reply = CAGRA_REPLY_ERROR;
		strlcpy(s->message, problem, sizeof(s->message));
	}
	else
	{
		s->reply = r;
		s->copy.n = job->copy->key.n;
		s->copy.reused = job->copy->key.reused;
		s->copy.takes_updates = job->copy->takes_updates;
		strlcpy(s->message, msg, sizeof(s->message));
	}
	if (!problem && r == CAGRA_REPLY_OK)
	{
		const size_t rows = (size_t) p->nq * k;
		const std::vector<uint64_t> &copy_tids = job->copy->tids;
		uint64	   *tids = cagra_search_tids(p);

		if (!in_place)
		{
			memcpy(cagra_search_ids(p), ids, rows * sizeof(uint32));
			memcpy(cagra_search_distances(p), dists, rows * sizeof(float));
		}
		for (size_t j = 0; j < rows; j++)
			tids[j] = ids[j] < copy_tids.size() ? copy_tids[ids[j]] : 0;
	}
	return cagra_answer_slots(sh, &job->picked[i], 1, abandoned);
}

/* Where the requests of a running batch stand: the rows of the batch's
 * answers that are each request's, and which requests are answered. */
struct CagraBatchAnswers
{
	CagraWorkerShared *sh;
	CagraSearchJob *job;
	uint32		k;
	const uint32 *ids;			/* the batch's rows of answers */
	const float *dists;
	bool		in_place;		/* the only request's payload holds the rows */
	std::vector<uint32> first;	/* request i's first row (a request with a
								 * problem has none) */
	std::vector<uint32> left;	/* its rows not yet final */
	std::vector<int> request_of;	/* each row's request */
	std::vector<bool> answered;
	int			nabandoned = 0;	/* of job->abandoned, sized for every request */

	void		answer(int i, CagraReply r, const char *msg) noexcept
	{
		nabandoned += cagra_answer_request(sh, job, i, k, ids + (size_t) first[i] * k,
										   dists + (size_t) first[i] * k, in_place, r, msg,
										   job->abandoned.data() + nabandoned);
		answered[i] = true;
	}
};

/* Run one batch (on a search thread, or here when there is none): gather
 * the queries of every payload, search, write each answer into its payload
 * and slot.  A request is answered as soon as its queries' answers are
 * final (CagraSearchLane::query_done), the rest when the search returns.
 * A filtered search is a batch of its own: the nodes of its allowed rows
 * are the batch's filter.  No PostgreSQL call but GetCurrentTimestamp (a
 * clock read), so that its times compare with the backends'. */
static void
cagra_run_search_job(CagraSearchJob *job, CagraSearchLane *lane) noexcept
{
	CagraWorkerShared *sh = cagra_worker_shared;
	int			n = (int) job->picked.size();
	const CagraSearchRequest &req = sh->slots[job->picked[0]].search;
	CagraIndexCopy *copy = job->copy;
	uint32		dim = copy->format.dim;
	CagraBatchAnswers b;

	TimestampTz job_started = GetCurrentTimestamp();

	b.sh = sh;
	b.job = job;
	b.k = req.k;
	/* before the try: its handler answers through them */
	b.answered.assign(n, false);
	try
	{
		std::string msg;
		CagraReply	r;
		double		device_ms = -1.0;
		uint32		nq = 0;
		/* A batch of one request (a cagra_search call, a lone client) is
		 * searched in its payload in place; others are gathered into the
		 * thread's scratch, kept between batches (fresh allocations cost
		 * page faults, which at 40 MB of queries took longer than the GPU) */
		static thread_local std::vector<float> gathered_queries;
		static thread_local std::vector<uint32> gathered_ids;
		static thread_local std::vector<float> gathered_dists;
		static thread_local std::vector<uint32> allowed_nodes;
		CagraSearchPayload *only = (CagraSearchPayload *) job->payloads[0];
		const float *queries;
		uint32	   *ids;
		float	   *dists;
		const std::vector<uint32> *allowed = NULL;

		b.first.assign(n, 0);
		b.left.assign(n, 0);
		b.request_of.clear();
		b.in_place = n == 1 && !cagra_search_payload_problem(only, req, copy);
		gathered_queries.clear();
		for (int i = 0; i < n; i++)
		{
			CagraSearchPayload *p = (CagraSearchPayload *) job->payloads[i];

			if (cagra_search_payload_problem(p, req, copy))
				continue;
			b.first[i] = nq;
			b.left[i] = p->nq;
			b.request_of.insert(b.request_of.end(), p->nq, i);
			if (!b.in_place)
				gathered_queries.insert(gathered_queries.end(), cagra_search_queries(p),
										cagra_search_queries(p) + (size_t) p->nq * dim);
			nq += p->nq;
		}
		if (b.in_place)
		{
			queries = cagra_search_queries(only);
			ids = cagra_search_ids(only);
			dists = cagra_search_distances(only);
			if (req.filtered)
			{
				cagra_engine_allowed_nodes(*copy, cagra_search_filter(only), only->filter_tids, allowed_nodes);
				allowed = &allowed_nodes;
			}
		}
		else
		{
			gathered_ids.resize((size_t) nq * b.k);
			gathered_dists.resize((size_t) nq * b.k);
			queries = gathered_queries.data();
			ids = gathered_ids.data();
			dists = gathered_dists.data();
		}
		b.ids = ids;
		b.dists = dists;

		TimestampTz engine_started = GetCurrentTimestamp();

		if (lane)
		{
			lane->last_resident = false;
			lane->query_done = [&b](uint32_t q) {
				int			i = b.request_of[q];

				if (--b.left[i] == 0)
					b.answer(i, CAGRA_REPLY_OK, "");
			};
		}
		r = nq > 0 ? cagra_engine_search(*copy, lane, queries, nq, req, allowed, ids, dists, &device_ms, &msg)
			: CAGRA_REPLY_OK;
		if (lane)
			lane->query_done = nullptr;

		uint64		engine_us = (uint64) Max(GetCurrentTimestamp() - engine_started, 0);

		cagra_add_timing(sh, CAGRA_TIMING_ENGINE, engine_us, 1);
		if (lane && lane->last_resident)
			cagra_add_timing(sh, CAGRA_TIMING_RESIDENT, engine_us, 1);
		if (device_ms >= 0.0)
			cagra_add_timing(sh, CAGRA_TIMING_DEVICE, (uint64) (device_ms * 1000.0), 1);

		for (int i = 0; i < n; i++)
			if (!b.answered[i])
				b.answer(i, r, msg.c_str());
		job->searched = nq;
		pg_atomic_fetch_add_u64(&sh->queries, nq);
		pg_atomic_fetch_add_u64(&sh->batches, 1);
	}
	catch (...)
	{
		if (lane)
			lane->query_done = nullptr;
		for (int i = 0; i < n; i++)
		{
			CagraRequestSlot *s = &sh->slots[job->picked[i]];

			if (b.answered[i])
				continue;
			s->reply = CAGRA_REPLY_OUT_OF_MEMORY;
			strlcpy(s->message, "out of memory in the cagra worker", sizeof(s->message));
			b.nabandoned += cagra_answer_slots(sh, &job->picked[i], 1, job->abandoned.data() + b.nabandoned);
		}
	}
	job->abandoned.resize(b.nabandoned);
	job->answered = true;
	job->done_at = GetCurrentTimestamp();
	cagra_add_timing(sh, CAGRA_TIMING_JOB, (uint64) Max(job->done_at - job_started, 0), 1);
}

/* A job for the n picked slots, or NULL when memory is short. */
static CagraSearchJob *
cagra_new_search_job(const int *picked, int n, uint64 queries, bool filtered) noexcept
{
	try
	{
		CagraSearchJob *job = new CagraSearchJob();

		job->picked.assign(picked, picked + n);
		job->payloads.assign(n, nullptr);
		job->segs.assign(n, nullptr);
		job->abandoned.assign(n, -1);	/* as many as may leave, so answering allocates nothing */
		job->queries = queries;
		job->filtered = filtered;
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

/* The collector thread's turn (search_pool.h): every started lone query
 * that is done answered, its job finished.  No PostgreSQL call but
 * GetCurrentTimestamp and SetLatch, as on the search threads. */
static void
cagra_collect_started(std::vector<CagraSearchJob *> &finished) noexcept
{
	CagraWorkerShared *sh = cagra_worker_shared;
	static thread_local std::vector<CagraResidentAnswer> answers;

	cagra_engine_collect_resident(answers);
	for (const CagraResidentAnswer &a : answers)
	{
		CagraSearchJob *job = (CagraSearchJob *) a.tag;
		const uint32 k = sh->slots[job->picked[0]].search.k;

		job->abandoned.resize(cagra_answer_request(sh, job, 0, k, a.ids, a.dists, false, a.reply,
												   a.message.c_str(), job->abandoned.data()));
		job->answered = true;
		job->done_at = GetCurrentTimestamp();
		job->searched = 1;

		uint64		engine_us = (uint64) Max(job->done_at - job->started_at, 0);

		cagra_add_timing(sh, CAGRA_TIMING_ENGINE, engine_us, 1);
		cagra_add_timing(sh, CAGRA_TIMING_JOB, engine_us, 1);
		if (a.reply == CAGRA_REPLY_OK)
		{
			cagra_add_timing(sh, CAGRA_TIMING_RESIDENT, engine_us, 1);
			cagra_add_timing(sh, CAGRA_TIMING_DEVICE, (uint64) (a.device_ms * 1000.0), 1);
		}
		pg_atomic_fetch_add_u64(&sh->queries, 1);
		pg_atomic_fetch_add_u64(&sh->batches, 1);
		finished.push_back(job);
	}
}

static void
cagra_detach_job_segments(CagraSearchJob *job)
{
	for (dsm_segment *seg : job->segs)
		if (seg)
			dsm_detach(seg);
}

/* A job never started: its one-off segments detached, freed. */
static void
cagra_drop_search_job(CagraSearchJob *job)
{
	cagra_detach_job_segments(job);
	delete job;
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

/* Detach a job's one-off segments, answer its slots (unless the job did),
 * free it. */
static void
cagra_finish_search_job(CagraWorkerShared *sh, CagraSearchJob *job)
{
	cagra_detach_job_segments(job);
	if (job->done_at != 0)
		cagra_add_timing(sh, CAGRA_TIMING_HANDBACK, (uint64) Max(GetCurrentTimestamp() - job->done_at, 0), 1);
	if (job->copy)
		job->copy->searches += job->searched;
	if (job->answered)
		cagra_free_abandoned(sh, job->abandoned.data(), (int) job->abandoned.size());
	else
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
	/* a filtered search never shares its launch: nothing to wait for */
	if (f->nq < kBatchMaxQueries && cagra_batch_window_us() > 0 && !f->search.filtered)
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
		s->reply = cagra_cache_update(s->key, (CagraUpdatePayload *) payload, s->message, sizeof(s->message));
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
