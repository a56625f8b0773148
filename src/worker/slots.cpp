/*
 * slots.cpp — a request slot in the worker: taken from the queue, its
 * payload attached (a backend's reusable mailbox stays mapped, a one-off
 * segment is detached by whoever attached it), answered (DONE and its
 * backend's latch set), or freed when its backend gave it up.
 */
#include "worker/slots.h"

#include <cerrno>
#include <csignal>

extern "C" {
#include "utils/memutils.h"
#include "utils/timestamp.h"
}

/* Take a queued slot (QUEUED -> RUNNING); false when its backend gave it
 * up meanwhile. */
bool
cagra_take_slot(CagraRequestSlot *s)
{
	return cagra_slot_move(s, CAGRA_SLOT_QUEUED, CAGRA_SLOT_RUNNING);
}

/* Put back a taken slot that does not belong in the batch after all (its
 * backend queued another request between the look and the take). */
void
cagra_untake_slot(CagraRequestSlot *s)
{
	if (!cagra_slot_move(s, CAGRA_SLOT_RUNNING, CAGRA_SLOT_QUEUED))
		pg_atomic_write_u32(&s->state, CAGRA_SLOT_FREE);	/* abandoned meanwhile */
}

/* Backends' reusable segments, kept mapped. */
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
int
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
void
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

void
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

/* The request's payload; *seg is set when it must be detached afterwards
 * (one-off segments; mailboxes stay mapped). */
void *
cagra_attach_payload(const CagraRequestSlot *s, dsm_segment **seg)
{
	*seg = NULL;
	if (s->mailbox)
		return cagra_attach_mailbox(s);
	*seg = dsm_attach(s->handle);
	return *seg ? dsm_segment_address(*seg) : NULL;
}
