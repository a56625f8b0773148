/*
 * batch.cpp — the worker's queue loop: takes the oldest queued request;
 * for a search, waits until cagra.batch_window has passed since it was
 * queued (unless cagra.batch_max queries are already there), then takes
 * every queued search of the same index copy and search settings and runs
 * them as one launch; answers each slot and sets its backend's latch.
 *
 * Payload segments are attached and detached in frames that hold no C++
 * object (dsm_attach may raise an error); the C++ work between runs in
 * noexcept functions.
 */
#include "worker/cache.h"
#include "worker/queue.h"

#include <cerrno>
#include <csignal>
#include <cstring>
#include <vector>

extern "C" {
#include "miscadmin.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"
}

static bool
cagra_same_search(const CagraRequestSlot *a, const CagraRequestSlot *b)
{
	return a->key.db == b->key.db && a->key.index == b->key.index &&
		a->key.relfilenode == b->key.relfilenode && a->key.generation == b->key.generation &&
		a->key.n == b->key.n && memcmp(&a->search, &b->search, sizeof(a->search)) == 0;
}

/* The oldest queued slot for this worker (lock held), or -1. */
static int
cagra_oldest_queued(CagraWorkerShared *sh, uint64 my_generation)
{
	int			best = -1;

	for (int i = 0; i < sh->nslots; i++)
	{
		CagraRequestSlot *s = &sh->slots[i];

		if (s->state == CAGRA_SLOT_QUEUED && s->worker_generation == my_generation &&
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
	if (nmailboxes == sh->nslots)
		cagra_unmap_mailbox(0);

	dsm_segment *seg = dsm_attach(s->handle);

	if (!seg)
		return NULL;
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

/* Run a batch of searches whose payloads are attached (NULL: gone). */
static void
cagra_run_search_batch(CagraWorkerShared *sh, const int *picked, int n, void **payloads,
					   uint64 total) noexcept
{
	CagraRequestSlot *first = &sh->slots[picked[0]];

	try
	{
		CagraIndexCopy *copy = cagra_cache_lookup(first->key);

		if (!copy)
		{
			for (int i = 0; i < n; i++)
			{
				CagraRequestSlot *s = &sh->slots[picked[i]];

				s->reply = cagra_cache_miss_reply(s->key, s->backend_pid, s->message, sizeof(s->message));
			}
			return;
		}

		std::string msg;
		CagraReply	r;
		const CagraSearchConfig &cfg = first->search;
		uint32		dim = copy->dim;
		std::vector<float> queries;
		std::vector<uint32> ids;
		std::vector<float> dists;
		uint32		nq = 0;

		queries.reserve(total * dim);
		for (int i = 0; i < n; i++)
		{
			CagraSearchPayload *p = (CagraSearchPayload *) payloads[i];

			if (!p || p->dim != dim || p->k != cfg.k)
				continue;
			queries.insert(queries.end(), cagra_search_queries(p), cagra_search_queries(p) + (size_t) p->nq * dim);
			nq += p->nq;
		}
		ids.resize((size_t) nq * cfg.k);
		dists.resize((size_t) nq * cfg.k);
		r = nq > 0 ? cagra_engine_search(*copy, queries.data(), nq, cfg, ids.data(), dists.data(), &msg)
			: CAGRA_REPLY_OK;

		uint32		at = 0;

		for (int i = 0; i < n; i++)
		{
			CagraRequestSlot *s = &sh->slots[picked[i]];
			CagraSearchPayload *p = (CagraSearchPayload *) payloads[i];

			if (!p || p->dim != dim || p->k != cfg.k)
			{
				s->reply = CAGRA_REPLY_ERROR;
				strlcpy(s->message, p ? "query dimensions do not match the index copy" : "request segment gone",
						sizeof(s->message));
				continue;
			}
			s->reply = r;
			s->copy_n = copy->key.n;
			strlcpy(s->message, msg.c_str(), sizeof(s->message));
			if (r == CAGRA_REPLY_OK)
			{
				memcpy(cagra_search_ids(p), ids.data() + (size_t) at * cfg.k, (size_t) p->nq * cfg.k * sizeof(uint32));
				memcpy(cagra_search_distances(p), dists.data() + (size_t) at * cfg.k, (size_t) p->nq * cfg.k * sizeof(float));
			}
			at += p->nq;
		}
		copy->searches += nq;
		pg_atomic_fetch_add_u64(&sh->queries, nq);
		pg_atomic_fetch_add_u64(&sh->batches, 1);
	}
	catch (...)
	{
		for (int i = 0; i < n; i++)
		{
			CagraRequestSlot *s = &sh->slots[picked[i]];

			s->reply = CAGRA_REPLY_OUT_OF_MEMORY;
			strlcpy(s->message, "out of memory in the cagra worker", sizeof(s->message));
		}
	}
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

/* Sleep until the batch window of the slot queued at `queued_at` ends. */
static void
cagra_wait_batch_window(TimestampTz queued_at)
{
	TimestampTz until = queued_at + cagra_batch_window_us;
	TimestampTz now = GetCurrentTimestamp();

	if (until > now)
		pg_usleep((long) (until - now));
}

static void
cagra_serve_searches(CagraWorkerShared *sh, int first, int *picked, dsm_segment **segs, void **payloads)
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
	for (int i = 0; i < n; i++)
		sh->slots[picked[i]].state = CAGRA_SLOT_RUNNING;
	LWLockRelease(sh->lock);

	for (int i = 0; i < n; i++)
		payloads[i] = cagra_attach_payload(&sh->slots[picked[i]], &segs[i]);
	cagra_run_search_batch(sh, picked, n, payloads, total);
	for (int i = 0; i < n; i++)
		if (segs[i])
			dsm_detach(segs[i]);
	cagra_answer(sh, picked, n);
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
	else
		s->reply = cagra_worker_run_build_request(s, payload);
	if (seg)
		dsm_detach(seg);
	cagra_answer(sh, &idx, 1);
}

int
cagra_worker_serve_queue(void)
{
	CagraWorkerShared *sh = cagra_worker_shared;
	static int *picked = NULL;
	static dsm_segment **segs = NULL;
	static void **payloads = NULL;
	int			served = 0;

	if (!picked)
	{
		picked = (int *) MemoryContextAlloc(TopMemoryContext, sizeof(int) * sh->nslots);
		segs = (dsm_segment **) MemoryContextAlloc(TopMemoryContext, sizeof(dsm_segment *) * sh->nslots);
		payloads = (void **) MemoryContextAlloc(TopMemoryContext, sizeof(void *) * sh->nslots);
	}
	for (;;)
	{
		LWLockAcquire(sh->lock, LW_EXCLUSIVE);
		int			first = cagra_oldest_queued(sh, sh->generation);

		if (first < 0)
		{
			LWLockRelease(sh->lock);
			return served;
		}
		/* each branch releases the lock */
		if (sh->slots[first].kind == CAGRA_REQ_SEARCH)
			cagra_serve_searches(sh, first, picked, segs, payloads);
		else
			cagra_serve_one(sh, first);
		served++;
		CHECK_FOR_INTERRUPTS();
	}
}
