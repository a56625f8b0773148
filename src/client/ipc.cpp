/*
 * ipc.cpp — the backend's side of the request queue.  A request is a
 * slot in main shared memory plus a DSM segment for its data; the backend
 * queues it, sets the worker's latch and sleeps on its own latch until the
 * slot is answered, the deadline passes, or the worker generation changes
 * (the worker exited or restarted).  The slot is always given back: on an
 * answer, on a timeout, and on an error (cancel, statement_timeout) through
 * PG_FINALLY; a slot the worker is still running is marked abandoned and
 * freed by the worker when it finishes.
 */
#include "client/ipc.h"

extern "C" {
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/proc.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"
}

/*
 * Read without the worker's lock: a hint, taken before a request that
 * looks again under the lock (cagra_queue_request), so that a search does
 * not take that lock, which every backend shares, more than once.  It can
 * be stale either way, as a locked read could be a moment later.
 */
bool
cagra_client_worker_running(int *backend)
{
	volatile CagraWorkerShared *sh = cagra_worker_shared;

	if (!sh)
		return false;
	if (backend)
		*backend = sh->backend;
	return sh->state == CAGRA_WS_RUNNING && sh->pid != 0;
}

/* The backend's reusable segment (session lifetime), NULL until needed or
 * after a request in it was abandoned while the worker ran it. */
static dsm_segment *cagra_mailbox = NULL;
static Size cagra_mailbox_size = 0;

/* The mailbox, grown (doubling from CAGRA_MAILBOX_BYTES) to hold `size`;
 * NULL for requests beyond `max_size`.  The worker unmaps a backend's old
 * mailbox when it maps the new one. */
static dsm_segment *
cagra_get_mailbox(Size size, Size max_size)
{
	if (cagra_mailbox && cagra_mailbox_size >= size)
		return cagra_mailbox;
	if (size > max_size)
		return NULL;

	Size		want = CAGRA_MAILBOX_BYTES;

	while (want < size)
		want *= 2;
	if (cagra_mailbox)
		dsm_detach(cagra_mailbox);
	cagra_mailbox = dsm_create(want, DSM_CREATE_NULL_IF_MAXSEGMENTS);
	cagra_mailbox_size = cagra_mailbox ? want : 0;
	if (cagra_mailbox)
		dsm_pin_mapping(cagra_mailbox);
	return cagra_mailbox;
}

/* The worker may still write into it: never reuse it (the worker unmaps
 * it when it finishes the abandoned request). */
static void
cagra_forget_mailbox(CagraCall *call)
{
	if (!call->in_mailbox || !cagra_mailbox)
		return;
	dsm_detach(cagra_mailbox);
	cagra_mailbox = NULL;
	call->seg = NULL;
	call->payload = NULL;
	call->in_mailbox = false;
}

bool
cagra_call_init(CagraCall *call, CagraRequestKind kind, Size size)
{
	memset((void *) call, 0, sizeof(*call));
	call->kind = kind;
	call->size = size;
	/* the chunks of a build or of an index copy's upload reuse one large
	 * mailbox (cagra_mailbox_trim gives it back after them): a fresh segment
	 * per chunk cost more in page faults on both sides than the copies
	 * themselves */
	bool		chunked = kind == CAGRA_REQ_BUILD_DATA || kind == CAGRA_REQ_BUILD_FETCH || kind == CAGRA_REQ_UPLOAD;

	if (cagra_get_mailbox(size, chunked ? CAGRA_CHUNK_BYTES : CAGRA_MAILBOX_MAX_BYTES))
	{
		call->seg = cagra_mailbox;
		call->in_mailbox = true;
		call->payload = dsm_segment_address(call->seg);
		return true;
	}
	call->seg = dsm_create(size, DSM_CREATE_NULL_IF_MAXSEGMENTS);
	if (!call->seg)
		return false;
	call->payload = dsm_segment_address(call->seg);
	return true;
}

void
cagra_mailbox_trim(void)
{
	if (cagra_mailbox && cagra_mailbox_size > CAGRA_MAILBOX_MAX_BYTES)
	{
		dsm_detach(cagra_mailbox);
		cagra_mailbox = NULL;
		cagra_mailbox_size = 0;
	}
}

void
cagra_call_done(CagraCall *call)
{
	if (call->seg && !call->in_mailbox)
		dsm_detach(call->seg);
	call->seg = NULL;
	call->payload = NULL;
}

/* Put the request in a free slot; -1 when none or no worker.  The lock is
 * taken shared, for the worker's state only: slots move by compare-and-swap
 * (protocol.h), so backends queueing at once do not wait for each other. */
static int
cagra_queue_request(CagraCall *call, uint64 *generation, CagraCallOutcome *why)
{
	CagraWorkerShared *sh = cagra_worker_shared;
	Latch	   *worker_latch;
	int			idx = -1;

	LWLockAcquire(sh->lock, LW_SHARED);
	if (sh->state != CAGRA_WS_RUNNING || sh->pid == 0)
	{
		LWLockRelease(sh->lock);
		*why = CAGRA_CALL_NOT_RUNNING;
		return -1;
	}
	/* start where this backend's own slot would be: claims rarely collide */
	for (int j = 0; j < sh->nslots && idx < 0; j++)
	{
		int			i = (MyProcPid + j) % sh->nslots;

		if (pg_atomic_read_u32(&sh->slots[i].state) == CAGRA_SLOT_FREE &&
			cagra_slot_move(&sh->slots[i], CAGRA_SLOT_FREE, CAGRA_SLOT_CLAIMED))
			idx = i;
	}
	if (idx < 0)
	{
		LWLockRelease(sh->lock);
		*why = CAGRA_CALL_NO_SLOT;
		return -1;
	}
	CagraRequestSlot *s = &sh->slots[idx];

	s->kind = call->kind;
	s->backend_pid = MyProcPid;
	s->backend_latch = MyLatch;
	s->worker_generation = sh->generation;
	s->seq = pg_atomic_add_fetch_u64(&sh->next_seq, 1);
	s->queued_at = GetCurrentTimestamp();
	s->answered_at = 0;
	s->reply = CAGRA_REPLY_OK;
	s->copy = CagraCopyExtent{};
	s->message[0] = '\0';
	s->handle = dsm_segment_handle(call->seg);
	s->mailbox = call->in_mailbox;
	s->key = call->key;
	s->search = call->search;
	s->nq = call->nq;
	s->build_id = call->build_id;
	*generation = sh->generation;
	worker_latch = sh->latch;
	LWLockRelease(sh->lock);
	(void) cagra_slot_move(s, CAGRA_SLOT_CLAIMED, CAGRA_SLOT_QUEUED);	/* publishes the fields */

	SetLatch(worker_latch);
	return idx;
}

/* The worker of `generation` is gone (lock not held: a stale read only
 * delays the answer by one poll). */
static bool
cagra_client_worker_gone(CagraWorkerShared *sh, uint64 generation)
{
	return *(volatile pid_t *) &sh->pid == 0 || *(volatile uint64 *) &sh->generation != generation;
}

/* Give the slot back without an answer. */
static void
cagra_abandon_slot(CagraCall *call, int idx, uint64 generation)
{
	CagraWorkerShared *sh = cagra_worker_shared;
	CagraRequestSlot *s = &sh->slots[idx];
	bool		running = false;

	if (cagra_client_worker_gone(sh, generation))
		pg_atomic_write_u32(&s->state, CAGRA_SLOT_FREE);	/* no worker will touch it again */
	else if (!cagra_slot_move(s, CAGRA_SLOT_QUEUED, CAGRA_SLOT_FREE))
	{
		/* taken by the worker: it frees the slot when done; an answer that
		 * came meanwhile is dropped */
		running = cagra_slot_move(s, CAGRA_SLOT_RUNNING, CAGRA_SLOT_ABANDONED);
		if (!running)
			pg_atomic_write_u32(&s->state, CAGRA_SLOT_FREE);
	}
	if (running)
	{
		Latch	   *worker_latch;

		LWLockAcquire(sh->lock, LW_SHARED);
		worker_latch = sh->latch;
		LWLockRelease(sh->lock);
		cagra_forget_mailbox(call);
		if (worker_latch)
			SetLatch(worker_latch);	/* a running build stops at once */
	}
}

/* One look at the slot: true when the wait is over (outcome set). */
static bool
cagra_check_slot(CagraCall *call, int idx, uint64 generation, CagraCallOutcome *outcome)
{
	CagraWorkerShared *sh = cagra_worker_shared;
	CagraRequestSlot *s = &sh->slots[idx];
	bool		over = false;

	if (cagra_slot_state(s) == CAGRA_SLOT_DONE)
	{
		if (s->kind == CAGRA_REQ_SEARCH)
		{
			TimestampTz now = GetCurrentTimestamp();

			cagra_add_timing(sh, CAGRA_TIMING_WAKE, (uint64) Max(now - s->answered_at, 0), 1);
			cagra_add_timing(sh, CAGRA_TIMING_ROUND_TRIP, (uint64) Max(now - s->queued_at, 0), 1);
		}
		call->reply = s->reply;
		call->copy = s->copy;
		strlcpy(call->message, s->message, sizeof(call->message));
		pg_memory_barrier();	/* read all of it before another backend may claim it */
		pg_atomic_write_u32(&s->state, CAGRA_SLOT_FREE);
		*outcome = CAGRA_CALL_ANSWERED;
		over = true;
	}
	else if (cagra_client_worker_gone(sh, generation))
	{
		pg_atomic_write_u32(&s->state, CAGRA_SLOT_FREE);
		*outcome = CAGRA_CALL_WORKER_GONE;
		over = true;
	}
	return over;
}

bool
cagra_call_start(CagraCall *call, int timeout_ms, CagraPendingCall *pending, CagraCallOutcome *why)
{
	pending->queued = false;
	pending->slot = cagra_queue_request(call, &pending->generation, why);
	if (pending->slot < 0)
		return false;
	pending->queued = true;
	pending->timeout_ms = timeout_ms;
	pending->deadline = timeout_ms >= 0 ?
		TimestampTzPlusMilliseconds(GetCurrentTimestamp(), timeout_ms) : 0;
	return true;
}

void
cagra_call_abandon(CagraCall *call, CagraPendingCall *pending)
{
	if (!pending->queued)
		return;
	pending->queued = false;
	cagra_abandon_slot(call, pending->slot, pending->generation);
}

CagraCallOutcome
cagra_call_finish(CagraCall *call, CagraPendingCall *pending)
{
	CagraCallOutcome outcome = CAGRA_CALL_NOT_RUNNING;
	volatile bool finished = false;

	if (!pending->queued)
		return outcome;
	PG_TRY();
	{
		while (!cagra_check_slot(call, pending->slot, pending->generation, &outcome))
		{
			long		wait_ms = 100;	/* also polls, should a wakeup be lost */

			if (pending->timeout_ms >= 0)
			{
				long		left = TimestampDifferenceMilliseconds(GetCurrentTimestamp(), pending->deadline);

				if (left <= 0)
				{
					cagra_abandon_slot(call, pending->slot, pending->generation);
					outcome = CAGRA_CALL_TIMEOUT;
					break;
				}
				wait_ms = Min(wait_ms, left);
			}
			(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, wait_ms,
							 PG_WAIT_EXTENSION);
			ResetLatch(MyLatch);
			CHECK_FOR_INTERRUPTS();
		}
		finished = true;
	}
	PG_FINALLY();
	{
		pending->queued = false;
		if (!finished)
			cagra_abandon_slot(call, pending->slot, pending->generation);
	}
	PG_END_TRY();
	return outcome;
}

CagraCallOutcome
cagra_call_run(CagraCall *call, int timeout_ms)
{
	CagraPendingCall pending;
	CagraCallOutcome outcome;

	if (!cagra_call_start(call, timeout_ms, &pending, &outcome))
		return outcome;
	return cagra_call_finish(call, &pending);
}

const char *
cagra_call_outcome_text(CagraCallOutcome outcome)
{
	switch (outcome)
	{
		case CAGRA_CALL_ANSWERED:
			return "answered";
		case CAGRA_CALL_NOT_RUNNING:
			return "the cagra GPU worker is not running";
		case CAGRA_CALL_NO_SLOT:
			return "every request slot of the cagra GPU worker is busy";
		case CAGRA_CALL_WORKER_GONE:
			return "the cagra GPU worker exited or restarted during the request";
		case CAGRA_CALL_TIMEOUT:
			return "the cagra GPU worker did not answer within cagra.worker_timeout";
	}
	return "unknown";
}
