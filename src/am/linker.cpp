/*
 * linker.cpp — the linkers: background workers of a database that link the
 * runs of nodes inserts append unlinked (insert.cpp), so that the insert
 * ending a run hands its index over instead of waiting for the run's plans
 * and writing its edges.
 *
 * A linker serves one database, from a slot of the shared linker table
 * (protocol.h, CagraLinkerSlot) holding a short queue of indexes to link.
 * The insert ending a run queues its index with an idle linker of its
 * database, else starts another (up to max_parallel_maintenance_workers of
 * them, at least one), else queues with the least busy.  A linker links
 * every complete run of the index that no one else links
 * (cagra_link_complete_runs: the runs' locks taken without waiting), in its
 * own transaction under the writers' lock as an insert's, and exits after
 * a second with nothing queued, so that it never holds its database long
 * (DROP DATABASE waits for the backends connected to it).
 *
 * Nothing is lost when a linker fails or is stopped: its runs stay
 * unlinked and searchable (every search takes the unlinked nodes as
 * entries); the next linker links them, or the insert whose run finds the
 * unlinked span too long (insert.cpp, cagra_link_after_append), or vacuum.
 */
#include "am/cagra_am.h"

extern "C" {
#include "access/relation.h"
#include "access/xact.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "tcop/tcopprot.h"
#include "utils/rel.h"
#include "utils/timestamp.h"

PGDLLEXPORT void cagra_linker_main(Datum arg);
}

/* A linker with nothing queued for this long exits. */
#define CAGRA_LINKER_IDLE_MS 1000
/* A linker asked for but not started after this long never will be (the
 * postmaster could not start it): its slot is taken again. */
#define CAGRA_LINKER_START_MS 10000

static bool
cagra_linker_has(const CagraLinkerSlot *slot, const CagraLinkWork *work)
{
	for (int i = 0; i < slot->npending; i++)
		if (slot->pending[i].index == work->index && slot->pending[i].device == work->device)
			return true;
	return false;
}

static bool
cagra_linker_slot_free(const CagraLinkerSlot *slot, TimestampTz now)
{
	return slot->database == InvalidOid ||
		(slot->pid == 0 && TimestampDifferenceExceeds(slot->asked_at, now, CAGRA_LINKER_START_MS));
}

/* Start a linker for slot `i` (taken, generation `generation`); false when
 * no background worker slot is free. */
static bool
cagra_linker_start(int i, uint32 generation)
{
	BackgroundWorker worker;
	BackgroundWorkerHandle *handle;

	memset(&worker, 0, sizeof(worker));
	worker.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	worker.bgw_start_time = BgWorkerStart_ConsistentState;
	worker.bgw_restart_time = BGW_NEVER_RESTART;
	strlcpy(worker.bgw_library_name, "cagra", BGW_MAXLEN);
	strlcpy(worker.bgw_function_name, "cagra_linker_main", BGW_MAXLEN);
	strlcpy(worker.bgw_name, "cagra linker", BGW_MAXLEN);
	strlcpy(worker.bgw_type, "cagra linker", BGW_MAXLEN);
	worker.bgw_main_arg = Int64GetDatum(((int64) generation << 8) | i);
	return RegisterDynamicBackgroundWorker(&worker, &handle);
}

bool
cagra_linker_take(Relation index)
{
	CagraWorkerShared *sh = cagra_worker_shared;
	CagraLinkWork work = {RelationGetRelid(index), cagra_device};
	int			limit = Min(Max(max_parallel_maintenance_workers, 1), CAGRA_MAX_LINKERS);
	int			mine = 0,
				idle = -1,
				least = -1,
				free = -1;
	TimestampTz now = GetCurrentTimestamp();
	Latch	   *latch = NULL;
	uint32		generation = 0;

	if (sh == NULL)
		return false;
	LWLockAcquire(sh->linker_lock, LW_EXCLUSIVE);
	for (int i = 0; i < CAGRA_MAX_LINKERS; i++)
	{
		CagraLinkerSlot *slot = &sh->linkers[i];

		if (cagra_linker_slot_free(slot, now))
		{
			free = free < 0 ? i : free;
			continue;
		}
		if (slot->database != MyDatabaseId)
			continue;
		if (cagra_linker_has(slot, &work))
		{
			LWLockRelease(sh->linker_lock);
			return true;
		}
		mine++;
		if (idle < 0 && slot->latch != NULL && !slot->busy && slot->npending == 0)
			idle = i;
		if (slot->npending < CAGRA_LINKER_QUEUE && (least < 0 || slot->npending < sh->linkers[least].npending))
			least = i;
	}

	int			target = idle >= 0 ? idle : (mine < limit && free >= 0) ? free : least;

	if (target < 0)
	{
		LWLockRelease(sh->linker_lock);
		return false;
	}

	CagraLinkerSlot *slot = &sh->linkers[target];

	if (target == free)
	{
		generation = ++slot->generation;
		slot->database = MyDatabaseId;
		slot->pid = 0;
		slot->asked_at = now;
		slot->latch = NULL;
		slot->busy = false;
		slot->npending = 0;
	}
	slot->pending[slot->npending++] = work;
	latch = slot->latch;
	LWLockRelease(sh->linker_lock);

	if (target != free)
	{
		if (latch)
			SetLatch(latch);
		return true;
	}
	if (cagra_linker_start(target, generation))
		return true;
	LWLockAcquire(sh->linker_lock, LW_EXCLUSIVE);
	if (slot->generation == generation && slot->pid == 0)
		slot->database = InvalidOid;
	LWLockRelease(sh->linker_lock);
	return false;
}

/* The linker's slot given back as it exits, what is queued dropped. */
static void
cagra_linker_release(int code, Datum arg)
{
	CagraLinkerSlot *slot = &cagra_worker_shared->linkers[DatumGetInt32(arg)];

	LWLockAcquire(cagra_worker_shared->linker_lock, LW_EXCLUSIVE);
	if (slot->pid == MyProcPid)
	{
		slot->database = InvalidOid;
		slot->pid = 0;
		slot->latch = NULL;
		slot->npending = 0;
	}
	LWLockRelease(cagra_worker_shared->linker_lock);
}

/* Link the complete runs of the index `work` names, if it is still a cagra
 * index, with the inserting session's cagra.device. */
static void
cagra_linker_link(const CagraLinkWork *work)
{
	int			device = cagra_device;

	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	pgstat_report_activity(STATE_RUNNING, "linking inserted rows");

	Relation	index = try_relation_open(work->index, RowExclusiveLock);

	if (index != NULL)
	{
		if (index->rd_rel->relkind == RELKIND_INDEX && index->rd_indam->aminsert == cagra_insert)
		{
			cagra_device = work->device;
			cagra_lock_writers(index, RowExclusiveLock);
			cagra_link_complete_runs(index);
			cagra_unlock_writers(index, RowExclusiveLock);
			cagra_device = device;
		}
		relation_close(index, RowExclusiveLock);
	}
	CommitTransactionCommand();
	pgstat_report_activity(STATE_IDLE, NULL);
}

void
cagra_linker_main(Datum arg)
{
	int64		word = DatumGetInt64(arg);
	int			i = (int) (word & 0xff);
	uint32		generation = (uint32) (word >> 8);
	CagraWorkerShared *sh = cagra_worker_shared;
	CagraLinkerSlot *slot = &sh->linkers[i];
	Oid			database;

	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();

	LWLockAcquire(sh->linker_lock, LW_EXCLUSIVE);
	if (slot->generation != generation || slot->pid != 0 || slot->database == InvalidOid)
	{
		/* started too late: the slot was taken again */
		LWLockRelease(sh->linker_lock);
		return;
	}
	slot->pid = MyProcPid;
	slot->latch = MyLatch;
	database = slot->database;
	LWLockRelease(sh->linker_lock);
	before_shmem_exit(cagra_linker_release, Int32GetDatum(i));

	BackgroundWorkerInitializeConnectionByOid(database, InvalidOid, 0);

	for (;;)
	{
		CagraLinkWork work;

		CHECK_FOR_INTERRUPTS();
		LWLockAcquire(sh->linker_lock, LW_EXCLUSIVE);
		if (slot->npending == 0)
		{
			slot->busy = false;
			LWLockRelease(sh->linker_lock);

			int			rc = WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
									   CAGRA_LINKER_IDLE_MS, PG_WAIT_EXTENSION);

			ResetLatch(MyLatch);
			if (rc & WL_TIMEOUT)
			{
				LWLockAcquire(sh->linker_lock, LW_EXCLUSIVE);
				if (slot->npending == 0)
				{
					slot->database = InvalidOid;
					slot->pid = 0;
					slot->latch = NULL;
					LWLockRelease(sh->linker_lock);
					return;
				}
				LWLockRelease(sh->linker_lock);
			}
			continue;
		}
		work = slot->pending[0];
		memmove(&slot->pending[0], &slot->pending[1], sizeof(work) * (slot->npending - 1));
		slot->npending--;
		slot->busy = true;
		LWLockRelease(sh->linker_lock);
		cagra_linker_link(&work);
	}
}
