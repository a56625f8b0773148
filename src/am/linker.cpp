/*
 * linker.cpp — who links the runs of nodes inserts append unlinked
 * (insert.cpp): the linkers, background workers of a database, so that
 * the insert ending a run hands its index over instead of waiting for the
 * run's plans and writing its edges; else the insert itself, and vacuum.
 *
 * A linker serves one database, from a slot of the shared linker table
 * (protocol.h, CagraLinkerSlot) holding a short queue of indexes to link.
 * The insert ending a run queues its index with an idle linker of its
 * database, else starts another (up to max_parallel_maintenance_workers of
 * them, at least one), else queues with the least busy.  A linker links
 * every complete run of the index that no one else links, up to
 * CAGRA_LINKER_RUNS at a time (cagra_link_complete_runs: the runs' locks
 * taken without waiting), each time in a transaction of its own under the
 * writers' lock as an insert's, the indexes queued in turn; it exits after
 * a second with nothing queued, so that it never holds its database long
 * (DROP DATABASE waits for the backends connected to it).
 *
 * Nothing is lost when a linker fails or is stopped: its runs stay
 * unlinked and searchable (every search takes the unlinked nodes as
 * entries); the next linker links them, or the insert whose run finds the
 * unlinked span too long (cagra_link_after_append), or vacuum.
 */
#include "am/insert_write.h"

#include <vector>

extern "C" {
#include "access/relation.h"
#include "access/xact.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/lmgr.h"
#include "storage/proc.h"
#include "tcop/tcopprot.h"
#include "utils/rel.h"
#include "utils/timestamp.h"

PGDLLEXPORT void cagra_linker_main(Datum arg);
}

/* ---- linkers ---- */

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

/*
 * Hand the index's complete runs of unlinked nodes to a linker of this
 * database: an idle one; else another started, when none runs or the busy
 * ones have fallen behind (the unlinked span longer than a linker's batch,
 * or than half the span `most` the inserts let them: fewer linkers with
 * fuller batches wait on fewer round trips to the worker); else queued
 * with the least busy.  False when none takes them (cagra is not
 * preloaded, no background worker slot is free, the queues are full), and
 * the caller links them.
 */
static bool
cagra_linker_take(Relation index, uint32 span, uint32 most)
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

	bool		behind = mine == 0 || span > Min(CAGRA_LINKER_RUNS * CAGRA_LINK_RUN, most / 2);
	int			target = idle >= 0 ? idle : (behind && mine < limit && free >= 0) ? free : least;

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

/* ---- runs ---- */

/* The lock of the run of CAGRA_LINK_RUN ids from `start`, a tuple lock on
 * the index at (run, 1): whoever links the run holds it. */
static bool
cagra_lock_run(Relation index, uint32 start, bool wait)
{
	ItemPointerData run;

	ItemPointerSet(&run, start / CAGRA_LINK_RUN, 1);
	if (!wait)
		return ConditionalLockTuple(index, &run, ExclusiveLock);
	LockTuple(index, &run, ExclusiveLock);
	return true;
}

static void
cagra_unlock_run(Relation index, uint32 start)
{
	ItemPointerData run;

	ItemPointerSet(&run, start / CAGRA_LINK_RUN, 1);
	UnlockTuple(index, &run, ExclusiveLock);
}

/* The unlinked nodes of the run from `start` (its lock held), in id order,
 * appended to `nodes`. */
static void
cagra_run_unlinked_nodes(Relation index, const CagraMetaData *view, uint32 start, std::vector<uint32> *nodes)
{
	for (uint32 id = Max(start, cagra_first_unlinked(view)); id < Min(start + CAGRA_LINK_RUN, view->n); id++)
		if (cagra_node_unlinked(index, view, id))
			nodes->push_back(id);
}

/* Link `nodes`, the unlinked nodes of the runs from `starts`, whose locks
 * are held, give the locks back, and shorten the span. */
static void
cagra_link_locked_runs(Relation index, const CagraMetaData *view, const std::vector<uint32> &nodes,
					   const std::vector<uint32> &starts)
{
	cagra_link_nodes(index, view, nodes.data(), (uint32) nodes.size());
	for (uint32 start : starts)
		cagra_unlock_run(index, start);
	cagra_shorten_unlinked(index);
}

/*
 * Link the unlinked nodes of the run from `start`, under the run's lock:
 * waiting for it when `wait`, else returning false when another holds it.
 */
static bool
cagra_link_run(Relation index, uint32 start, bool wait)
{
	CagraMetaData view;
	std::vector<uint32> nodes;

	if (!cagra_lock_run(index, start, wait))
		return false;
	cagra_read_meta(index, &view);
	cagra_run_unlinked_nodes(index, &view, start, &nodes);
	cagra_link_locked_runs(index, &view, nodes, {start});
	return true;
}

/*
 * After node `new_id` was appended: when it ends its run, the run goes to
 * a linker while the unlinked span is short and one takes it (never a
 * temporary index's, whose pages are this backend's alone); else it is
 * linked here, and the runs before it still unlinked (their linker fell
 * behind or failed) go to a linker, or the oldest is linked here too; then
 * the span is shortened.  Short: within what a search leaves to the
 * backend before it updates the worker's copy (the copy takes linked nodes
 * only), so that linkers falling behind neither make every search measure
 * many entries nor the copy be uploaded again.
 */
void
cagra_link_after_append(Relation index, uint32 new_id)
{
	CagraMetaData meta;
	uint32		start = new_id + 1 - CAGRA_LINK_RUN;
	bool		may_hand_over = !RelationUsesLocalBuffers(index);

	if ((new_id + 1) % CAGRA_LINK_RUN != 0)
		return;
	cagra_read_meta(index, &meta);

	uint32		span = meta.n - cagra_first_unlinked(&meta);
	uint32		most = cagra_copy_update_at(meta.n);

	if (may_hand_over && span <= most && cagra_linker_take(index, span, most))
		return;
	cagra_link_run(index, start, false);
	cagra_read_meta(index, &meta);

	uint32		first = cagra_first_unlinked(&meta);

	if (first < start && !(may_hand_over && cagra_linker_take(index, meta.n - first, most)))
		cagra_link_run(index, first - first % CAGRA_LINK_RUN, false);
}

bool
cagra_link_complete_runs(Relation index)
{
	CagraMetaData view;
	std::vector<uint32> starts,
				nodes;

	cagra_read_meta(index, &view);
	for (uint32 start = cagra_first_unlinked(&view) - cagra_first_unlinked(&view) % CAGRA_LINK_RUN;
		 start + CAGRA_LINK_RUN <= view.n && starts.size() < CAGRA_LINKER_RUNS; start += CAGRA_LINK_RUN)
	{
		size_t		before = nodes.size();

		if (!cagra_lock_run(index, start, false))
			continue;
		cagra_run_unlinked_nodes(index, &view, start, &nodes);
		if (nodes.size() > before)
			starts.push_back(start);
		else
			cagra_unlock_run(index, start);
	}
	if (starts.empty())
		return false;
	cagra_link_locked_runs(index, &view, nodes, starts);
	return true;
}

void
cagra_link_unlinked(Relation index)
{
	CagraMetaData meta;

	cagra_read_meta(index, &meta);
	for (uint32 start = cagra_first_unlinked(&meta) - cagra_first_unlinked(&meta) % CAGRA_LINK_RUN;
		 start < meta.n; start += CAGRA_LINK_RUN)
		cagra_link_run(index, start, true);
}

/* ---- the linker process ---- */

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

/* Link up to CAGRA_LINKER_RUNS complete runs of the index `work` names,
 * if it is still a cagra index, with the inserting session's cagra.device,
 * in a transaction of its own (short, as an insert's, so that it neither
 * holds the writers' lock nor the xmin horizon back): true when more may
 * be left. */
static bool
cagra_linker_link(const CagraLinkWork *work)
{
	int			device = cagra_device;
	bool		more = false;

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
			more = cagra_link_complete_runs(index);
			cagra_unlock_writers(index, RowExclusiveLock);
			cagra_device = device;
		}
		relation_close(index, RowExclusiveLock);
	}
	CommitTransactionCommand();
	pgstat_report_activity(STATE_IDLE, NULL);
	return more;
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
		if (!cagra_linker_link(&work))
			continue;
		/* more runs may be left: after the other indexes queued */
		LWLockAcquire(sh->linker_lock, LW_EXCLUSIVE);
		if (!cagra_linker_has(slot, &work) && slot->npending < CAGRA_LINKER_QUEUE)
			slot->pending[slot->npending++] = work;
		LWLockRelease(sh->linker_lock);
	}
}
