/*
 * worker.cpp — the background worker's main function: announces itself in
 * shared memory (a new worker generation), opens the GPU library and counts
 * devices (exits 0 when there is none: no restart), starts the search
 * threads, then serves the request queue until it is told to stop.  On
 * exit it clears its pid and wakes every waiting backend, which then
 * searches on the CPU.
 */
#include "worker/cache.h"
#include "worker/batch.h"
#include "worker/engine_core.h"
#include "worker/engine_gpu.h"
#include "worker/offload_build.h"
#include "boundary/pg_compat.h"

extern "C" {
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "utils/timestamp.h"
#include "storage/proc.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

PGDLLEXPORT void cagra_worker_main(Datum arg);
}

/* How often the worker looks for copies of indexes that are gone. */
#define CAGRA_DROPPED_CHECK_MS 1000

static void
cagra_worker_set_state(CagraWorkerState state, const char *message)
{
	CagraWorkerShared *sh = cagra_worker_shared;

	LWLockAcquire(sh->lock, LW_EXCLUSIVE);
	sh->state = state;
	if (message)
		strlcpy(sh->message, message, sizeof(sh->message));
	LWLockRelease(sh->lock);
}

/* Clear the pid, wake every backend waiting on this worker. */
static void
cagra_worker_on_exit(int code, Datum arg)
{
	CagraWorkerShared *sh = cagra_worker_shared;

	LWLockReleaseAll();
	LWLockAcquire(sh->lock, LW_EXCLUSIVE);
	sh->pid = 0;
	sh->latch = NULL;
	if (sh->state == CAGRA_WS_RUNNING || sh->state == CAGRA_WS_STARTING)
		sh->state = CAGRA_WS_EXITED;
	for (int i = 0; i < sh->nslots; i++)
	{
		CagraRequestSlot *s = &sh->slots[i];

		CagraSlotState st = cagra_slot_state(s);

		if (st == CAGRA_SLOT_QUEUED || st == CAGRA_SLOT_RUNNING)
			SetLatch(s->backend_latch);
		else if (st == CAGRA_SLOT_ABANDONED)
			pg_atomic_write_u32(&s->state, CAGRA_SLOT_FREE);
	}
	sh->ncopies = 0;
	sh->memory_used = 0;
	LWLockRelease(sh->lock);
}

static void
cagra_worker_announce(void)
{
	CagraWorkerShared *sh = cagra_worker_shared;

	LWLockAcquire(sh->lock, LW_EXCLUSIVE);
	sh->generation++;
	sh->pid = MyProcPid;
	sh->latch = MyLatch;
	sh->state = CAGRA_WS_STARTING;
	sh->backend = cagra_worker_backend;
	sh->started_at = GetCurrentTimestamp();
	sh->message[0] = '\0';
	sh->device_count = 0;
	sh->ncopies = 0;
	sh->memory_used = 0;
	LWLockRelease(sh->lock);
}

/* Open the engine; false (state and message set) when there is nothing to run on. */
static bool
cagra_worker_open_engine(void)
{
	const CagraGpuApi *api = NULL;
	char		why[256];

	if (cagra_worker_backend == CAGRA_BACKEND_GPU)
	{
		api = cagra_gpu_open(cagra_gpu_library, why, sizeof(why));
		if (!api)
		{
			cagra_worker_set_state(CAGRA_WS_NO_LIBRARY, why);
			return false;
		}
	}
	cagra_engine_init(api ? cagra_gpu_engine_make(api) : cagra_core_engine_make());
	if (cagra_engine_device_count() == 0)
	{
		const char *err = api->last_error();

		strlcpy(why, err && err[0] ? err : "no usable CUDA device", sizeof(why));
		cagra_worker_set_state(CAGRA_WS_NO_DEVICE, why);
		return false;
	}

	CagraWorkerShared *sh = cagra_worker_shared;

	LWLockAcquire(sh->lock, LW_EXCLUSIVE);
	sh->device_count = Min(cagra_engine_device_count(), CAGRA_MAX_DEVICES);
	for (int d = 0; d < sh->device_count; d++)
	{
		std::string name;
		uint64		total;

		cagra_engine_device(d, &name, &total);
		strlcpy(sh->device_names[d], name.c_str(), sizeof(sh->device_names[d]));
		sh->device_total[d] = total;
	}
	if (api)
		snprintf(sh->message, sizeof(sh->message), "libcagra_gpu %s", api->version());
	LWLockRelease(sh->lock);
	return true;
}

/* Wakes the loop: its latch (new requests, a backend giving up), a finished
 * batch or build, postmaster death. */
static WaitEventSet *
cagra_worker_wait_set(void)
{
	int			search_fd = cagra_worker_search_event_fd();
	int			build_fd = cagra_worker_build_event_fd();
	WaitEventSet *set = cagra_create_process_wait_event_set(4);

	AddWaitEventToSet(set, WL_LATCH_SET, PGINVALID_SOCKET, MyLatch, NULL);
	AddWaitEventToSet(set, WL_EXIT_ON_PM_DEATH, PGINVALID_SOCKET, NULL, NULL);
	if (search_fd >= 0)
		AddWaitEventToSet(set, WL_SOCKET_READABLE, search_fd, NULL, NULL);
	if (build_fd >= 0)
		AddWaitEventToSet(set, WL_SOCKET_READABLE, build_fd, NULL, NULL);
	return set;
}

void
cagra_worker_main(Datum arg)
{
	pqsignal(SIGTERM, SignalHandlerForShutdownRequest);
	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	BackgroundWorkerUnblockSignals();
	BackgroundWorkerInitializeConnection(NULL, NULL, 0);
	pgstat_report_appname("cagra gpu worker");

	cagra_worker_announce();
	on_shmem_exit(cagra_worker_on_exit, (Datum) 0);

	if (!cagra_worker_open_engine())
	{
		ereport(LOG, (errmsg("cagra gpu worker: %s; searches and builds run on the CPU",
							 cagra_worker_shared->message)));
		proc_exit(0);			/* exit code 0: the postmaster does not restart it */
	}
	cagra_worker_start_search_threads();
	cagra_cache_publish();
	cagra_worker_set_state(CAGRA_WS_RUNNING, NULL);
	ereport(LOG, (errmsg("cagra gpu worker started (%s backend, %d device%s)",
						 cagra_worker_backend == CAGRA_BACKEND_GPU ? "gpu" : "cpu",
						 cagra_engine_device_count(), cagra_engine_device_count() == 1 ? "" : "s")));

	WaitEventSet *wait = cagra_worker_wait_set();
	TimestampTz dropped_checked = 0;

	while (!ShutdownRequestPending)
	{
		WaitEvent	event;
		TimestampTz turn_started = GetCurrentTimestamp();

		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
			cagra_cache_forget_limits();
		}
		int			built_slot = cagra_worker_poll_build(cagra_worker_drain_searches);
		bool		built = built_slot >= 0;

		if (built)
			cagra_worker_answer(&built_slot, 1);
		bool		served = cagra_worker_serve_queue() > 0;

		/* the copies of dropped and rewritten indexes, freed within a
		 * second whether or not anyone searches again */
		if (turn_started - dropped_checked >= CAGRA_DROPPED_CHECK_MS * 1000)
		{
			cagra_cache_free_dropped(cagra_worker_drain_searches);
			dropped_checked = turn_started;
		}
		bool		counts_pending = cagra_cache_publish();

		if (!served && !built && !cagra_worker_searches_running())
			cagra_worker_forget_mailboxes();	/* idle: unmap those of exited backends */

		cagra_add_timing(cagra_worker_shared, CAGRA_TIMING_LOOP_BUSY,
						 (uint64) Max(GetCurrentTimestamp() - turn_started, 0), 1);
		(void) WaitEventSetWait(wait, counts_pending ? CAGRA_PUBLISH_INTERVAL_MS : 1000L, &event, 1,
								PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		/* as a backend it must absorb ProcSignalBarriers (DROP DATABASE waits for them) */
		CHECK_FOR_INTERRUPTS();
	}
	/* exit code 1: restarted after bgw_restart_time unless the server stops */
	proc_exit(1);
}
