/*
 * ipc.h — one request from a backend to the worker: a DSM payload segment,
 * a queue slot, and an interruptible wait with a deadline that notices a
 * worker that died or restarted.  Backend side; plain C data only.
 */
#pragma once

#include "protocol/protocol.h"

typedef enum CagraCallOutcome
{
	CAGRA_CALL_ANSWERED,		/* the worker answered; see reply */
	CAGRA_CALL_NOT_RUNNING,		/* no worker to ask */
	CAGRA_CALL_NO_SLOT,			/* every slot busy */
	CAGRA_CALL_WORKER_GONE,		/* the worker exited or restarted meanwhile */
	CAGRA_CALL_TIMEOUT			/* no answer within the deadline */
} CagraCallOutcome;

typedef struct CagraCall
{
	dsm_segment *seg;
	void	   *payload;
	Size		size;
	bool		in_mailbox;		/* seg is the backend's reusable segment */
	/* the request (filled by the caller before cagra_call_run) */
	CagraRequestKind kind;
	CagraIndexKey key;
	CagraSearchRequest search;
	uint32		nq;
	uint64		build_id;
	/* the answer */
	CagraReply	reply;
	CagraCopyExtent copy;
	char		message[256];
} CagraCall;

/* Is the worker running (and with which backend)? */
bool		cagra_client_worker_running(int *backend);

/* A payload segment of `size` bytes (<= CAGRA_CHUNK_BYTES); false when no
 * segment can be had. */
bool		cagra_call_init(CagraCall *call, CagraRequestKind kind, Size size);

/* Queue the request and wait for the answer, at most timeout_ms (-1: as
 * long as the worker lives).  Cancel and statement_timeout interrupt the
 * wait with an ERROR after the slot was given back. */
CagraCallOutcome cagra_call_run(CagraCall *call, int timeout_ms);

/*
 * The same in two steps, so that the backend works while the worker does:
 * cagra_call_start queues the request (false, with the outcome in *why,
 * when it could not), cagra_call_finish waits for its answer as
 * cagra_call_run does.  Between the two the caller must give the request
 * back with cagra_call_abandon should it leave by an error.
 */
typedef struct CagraPendingCall
{
	bool		queued;
	int			slot;
	uint64		generation;
	int			timeout_ms;
	TimestampTz deadline;
} CagraPendingCall;

bool		cagra_call_start(CagraCall *call, int timeout_ms, CagraPendingCall *pending, CagraCallOutcome *why);
CagraCallOutcome cagra_call_finish(CagraCall *call, CagraPendingCall *pending);
void		cagra_call_abandon(CagraCall *call, CagraPendingCall *pending);

/* Detach the payload segment. */
void		cagra_call_done(CagraCall *call);

/* Give back a mailbox grown past CAGRA_MAILBOX_MAX_BYTES for the chunks of
 * a build or an upload (the worker unmaps it at this backend's next
 * request). */
void		cagra_mailbox_trim(void);

const char *cagra_call_outcome_text(CagraCallOutcome outcome);
