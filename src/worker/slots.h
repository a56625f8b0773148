/*
 * slots.h — a request slot in the worker (slots.cpp): taking it, attaching
 * its payload, answering it, freeing it when its backend gave it up.
 * Worker process only.
 */
#pragma once

#include "protocol/protocol.h"

/* Take a queued slot (QUEUED -> RUNNING); false when its backend gave it
 * up meanwhile. */
bool		cagra_take_slot(CagraRequestSlot *s);

/* Put a taken slot back in the queue (its backend queued another request
 * between the look and the take). */
void		cagra_untake_slot(CagraRequestSlot *s);

/* The request's payload, or NULL when its segment is gone; *seg is set when
 * it must be detached afterwards (one-off segments; mailboxes stay mapped). */
void	   *cagra_attach_payload(const CagraRequestSlot *s, dsm_segment **seg);

/* Answer taken slots and wake their backends; those whose backend left go
 * to `abandoned` (returns how many).  No PostgreSQL call but SetLatch and
 * the clock: search threads may call it. */
int			cagra_answer_slots(CagraWorkerShared *sh, const int *picked, int n, int *abandoned) noexcept;

/* Free abandoned slots, unmapping the mailboxes they were abandoned in. */
void		cagra_free_abandoned(CagraWorkerShared *sh, const int *slots, int n);

/* Answer taken slots and free those abandoned meanwhile. */
void		cagra_answer(CagraWorkerShared *sh, const int *picked, int n);

/* The same, in the worker's shared memory (the main loop's builds). */
void		cagra_worker_answer(const int *slots, int n);

/* Unmap the reusable segments of backends that are gone. */
void		cagra_worker_forget_mailboxes(void);
