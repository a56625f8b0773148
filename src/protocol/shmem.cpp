/*
 * shmem.cpp — the worker's shared memory (requested and initialised through
 * PostgreSQL 15's shmem_request_hook / shmem_startup_hook) and the
 * registration of the static background worker.  Both happen only while
 * shared_preload_libraries is processed; otherwise cagra_worker_shared stays
 * NULL and every search runs in the backend, on the CPU.
 */
#include "protocol/protocol.h"

extern "C" {
#include "miscadmin.h"
#include "postmaster/bgworker.h"
#include "storage/ipc.h"
#include "storage/shmem.h"
}

CagraWorkerShared *cagra_worker_shared = NULL;

static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

/* One slot per backend that can wait at a time. */
static int
cagra_slot_count(void)
{
	return MaxBackends;
}

static Size
cagra_shared_size(void)
{
	return add_size(offsetof(CagraWorkerShared, slots),
					mul_size(cagra_slot_count(), sizeof(CagraRequestSlot)));
}

static void
cagra_shmem_request(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	RequestAddinShmemSpace(cagra_shared_size());
	RequestNamedLWLockTranche("cagra_worker", 2);
}

static void
cagra_shmem_startup(void)
{
	bool		found;

	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	cagra_worker_shared = (CagraWorkerShared *) ShmemInitStruct("cagra worker", cagra_shared_size(), &found);
	if (!found)
	{
		CagraWorkerShared *s = cagra_worker_shared;

		memset((void *) s, 0, cagra_shared_size());
		LWLockPadded *locks = GetNamedLWLockTranche("cagra_worker");

		s->lock = &locks[0].lock;
		s->linker_lock = &locks[1].lock;
		s->state = CAGRA_WS_NOT_STARTED;
		s->backend = cagra_worker_backend;
		s->nslots = cagra_slot_count();
		pg_atomic_init_u64(&s->requests, 0);
		pg_atomic_init_u64(&s->queries, 0);
		pg_atomic_init_u64(&s->batches, 0);
		for (int t = 0; t < CAGRA_TIMING_STEPS; t++)
		{
			pg_atomic_init_u64(&s->timing_us[t], 0);
			pg_atomic_init_u64(&s->timing_events[t], 0);
		}
		pg_atomic_init_u64(&s->uploads, 0);
		pg_atomic_init_u64(&s->builds, 0);
		pg_atomic_init_u64(&s->fallbacks, 0);
		pg_atomic_init_u64(&s->errors, 0);
		pg_atomic_init_u64(&s->next_seq, 0);
		pg_atomic_init_u32(&s->update_claim, 0);
		pg_atomic_init_u64(&s->update_claimed_at, 0);
		for (int i = 0; i < s->nslots; i++)
			pg_atomic_init_u32(&s->slots[i].state, CAGRA_SLOT_FREE);
	}
	LWLockRelease(AddinShmemInitLock);
}

/* The worker restarts 5 s after it was terminated or crashed; it exits 0
 * (and stays away) when there is no device or no GPU library. */
static void
cagra_register_bgworker(void)
{
	BackgroundWorker worker;

	memset(&worker, 0, sizeof(worker));
	/* connected to no database (shared catalogs only), as the logical
	 * replication launcher is: it is then a backend that pg_stat_activity
	 * lists and pg_terminate_backend can stop */
	worker.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	worker.bgw_start_time = BgWorkerStart_ConsistentState;
	worker.bgw_restart_time = 5;
	strlcpy(worker.bgw_library_name, "cagra", BGW_MAXLEN);
	strlcpy(worker.bgw_function_name, "cagra_worker_main", BGW_MAXLEN);
	strlcpy(worker.bgw_name, "cagra gpu worker", BGW_MAXLEN);
	strlcpy(worker.bgw_type, "cagra gpu worker", BGW_MAXLEN);
	RegisterBackgroundWorker(&worker);
}

void
cagra_worker_register(void)
{
	if (!process_shared_preload_libraries_in_progress)
		return;
	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = cagra_shmem_request;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = cagra_shmem_startup;
	cagra_register_bgworker();
}

const char *
cagra_worker_state_name(CagraWorkerState state)
{
	switch (state)
	{
		case CAGRA_WS_NOT_STARTED:
			return "not started";
		case CAGRA_WS_STARTING:
			return "starting";
		case CAGRA_WS_RUNNING:
			return "running";
		case CAGRA_WS_NO_DEVICE:
			return "no device";
		case CAGRA_WS_NO_LIBRARY:
			return "no GPU library";
		case CAGRA_WS_EXITED:
			return "exited";
	}
	return "unknown";
}
