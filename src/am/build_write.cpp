/*
 * build_write.cpp — the pages of a new index, written straight to its file
 * as nbtree's sorted build does: node groups assembled from the graph, the
 * vectors and the heap TIDs, WAL-logged in runs of pages (by parallel
 * workers beside the backend when the index is large), the meta page last
 * (docs/storage.md).
 */
#include "am/build_write.h"

extern "C" {
#include "access/parallel.h"
#include "access/xact.h"
#include "access/xlog.h"
#include "access/xloginsert.h"
#include "catalog/index.h"
#include "commands/progress.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/condition_variable.h"
#include "storage/smgr.h"
#include "storage/spin.h"
}

void
cagra_fill_meta(CagraMetaData *meta, Relation index, uint32 dims)
{
	cagra::BuildParams params = cagra_build_params(index);

	memset(meta, 0, sizeof(*meta));
	meta->magic = CAGRA_MAGIC;
	meta->version = CAGRA_FORMAT_VERSION;
	meta->dims = dims;
	meta->metric = (uint32) cagra_index_metric(index);
	meta->element_type = (uint32) cagra_option_element_type(index);
	meta->graph_degree = params.graph_degree;
	meta->intermediate_degree = params.intermediate_degree;
	meta->build_device = CAGRA_DEVICE_CPU;
	/* Start from the WAL position, not 1: a REINDEX keeps the index's OID,
	 * and its generations must not repeat those of the index it replaces. */
	meta->generation = Max((uint64) GetXLogInsertRecPtr(), (uint64) 1);
	if (dims > 0)
		cagra_compute_layout(meta);
}

/* Serialise node group `group` (its first nodes, as many as there are)
 * into `buf`, its pages' data concatenated. */
static void
cagra_fill_group(const CagraMetaData *meta, const CagraBuildState *bs, const cagra::Graph &graph,
				 uint64 group, char *buf)
{
	uint32		voff = cagra_vector_offset(meta->graph_degree);
	cagra::VectorFormat format = cagra_format_of(meta);
	char	   *stored = (char *) palloc(format.vector_bytes());

	memset(buf, 0, cagra_group_bytes(meta));
	for (uint32 j = 0; j < meta->nodes_per_group; j++)
	{
		uint64		id = group * meta->nodes_per_group + j;
		CagraNodeHeader hdr;

		if (id >= bs->n)
			break;
		hdr.heap_tid = bs->tids[id];
		hdr.flags = CAGRA_NODE_LIVE;
		cagra_group_copy_in(meta, buf, j, 0, &hdr, sizeof(hdr));
		cagra_group_copy_in(meta, buf, j, CAGRA_ROW_OFFSET, graph.row((uint32) id),
							meta->graph_degree * sizeof(uint32));
		format.store(bs->vectors + id * bs->dims, stored);
		cagra_group_copy_in(meta, buf, j, voff, stored, format.vector_bytes());
	}
	pfree(stored);
}

/*
 * Pages written straight to the index's file, as nbtree's sorted build does:
 * no shared buffer per page (each P_NEW extension wrote a zero page first and
 * left a dirty buffer for the checkpointer), WAL in records of
 * XLR_MAX_BLOCK_ID full pages as they are written instead of a second pass
 * over the buffers, and one fsync at the end (a checkpoint during the build
 * cannot flush pages that are not in shared buffers, and replay from it would
 * skip their WAL).  A large index is written by parallel workers too
 * (cagra_parallel_write_pages).
 */
#define CAGRA_RUN_PAGES XLR_MAX_BLOCK_ID

/* WAL-log `npages` pages, checksum them and write them: appended to the file
 * (extend) or into blocks it already has. */
static void
cagra_write_run(SMgrRelation smgr, CagraRelFileId *file, bool wal, bool extend, int npages,
				BlockNumber *blknos, Page *pages)
{
	if (wal)
		log_newpages(file, MAIN_FORKNUM, npages, blknos, pages, true);
	for (int i = 0; i < npages; i++)
	{
		PageSetChecksumInplace(pages[i], blknos[i]);
		if (extend)
			smgrextend(smgr, MAIN_FORKNUM, blknos[i], (char *) pages[i], true);
		else
			smgrwrite(smgr, MAIN_FORKNUM, blknos[i], (char *) pages[i], true);
	}
	/*
	 * Start the kernel writing these pages now, as the checkpointer does
	 * (checkpoint_flush_after): else gigabytes of dirty pages wait for the
	 * final fsync while the WAL's segment syncs compete with them.
	 */
	smgrwriteback(smgr, MAIN_FORKNUM, blknos[0], npages);
}

/* What fills node pages: the group being serialised, filled at its first
 * page. */
typedef struct CagraPageFiller
{
	const CagraMetaData *meta;
	const CagraBuildState *bs;
	const cagra::Graph *graph;
	char	   *group;			/* cagra_group_bytes(meta) */
} CagraPageFiller;

/* Fill node page `blkno` (blocks are filled in order). */
static void
cagra_fill_node_page(CagraPageFiller *f, BlockNumber blkno, Page page)
{
	const CagraMetaData *meta = f->meta;
	uint64		g = (blkno - 1) / meta->pages_per_group;
	uint32		q = (blkno - 1) % meta->pages_per_group;

	if (q == 0)
	{
		cagra_fill_group(meta, f->bs, *f->graph, g, f->group);
		if (g % 64 == 0)
		{
			pgstat_progress_update_param(PROGRESS_CREATEIDX_TUPLES_DONE, (int64) (g * meta->nodes_per_group));
			CHECK_FOR_INTERRUPTS();
		}
	}
	cagra_init_node_page(page, meta, blkno);
	memcpy((char *) page + CAGRA_PAGE_DATA_START, f->group + (uint64) q * CAGRA_PAGE_USABLE,
		   ((PageHeader) page)->pd_lower - CAGRA_PAGE_DATA_START);
}

/* Blocks 1 .. nblocks - 1 in order, by this process, each appended to the
 * file (block 0, the meta page, is written last). */
static void
cagra_serial_write_pages(Relation index, CagraPageFiller *filler, BlockNumber nblocks)
{
	bool		wal = RelationNeedsWAL(index);
	PGAlignedBlock *buf = (PGAlignedBlock *) palloc(sizeof(PGAlignedBlock) * CAGRA_RUN_PAGES);
	BlockNumber blknos[CAGRA_RUN_PAGES];
	Page		pages[CAGRA_RUN_PAGES];

	for (BlockNumber first = 1; first < nblocks; first += CAGRA_RUN_PAGES)
	{
		int			npages = (int) Min((BlockNumber) CAGRA_RUN_PAGES, nblocks - first);

		for (int i = 0; i < npages; i++)
		{
			blknos[i] = first + i;
			pages[i] = (Page) buf[i].data;
			cagra_fill_node_page(filler, blknos[i], pages[i]);
		}
		cagra_write_run(RelationGetSmgr(index), &CAGRA_REL_FILE_ID(index), wal, true, npages, blknos, pages);
	}
	pfree(buf);
}

/*
 * Several writers: the WAL-logging, checksums and writes of node pages
 * spread over parallel workers, whose WAL insertions proceed side by side.
 * The leader alone reads the graph and the vectors (its own memory or
 * mappings): it fills runs of CAGRA_RUN_PAGES pages, in block order, into a
 * ring of slots in shared memory; a writer takes the next filled run, logs it
 * as one record and writes it in place, and frees its slot.  The leader
 * writes runs itself whenever the slot it would fill next is still taken, so
 * the build never waits on a worker that did not start.  The file has its
 * full size before any writer starts: the leader extends it by its last
 * block, which md.c precedes by the last block of every earlier 1 GB
 * segment, so each segment exists (sparse) and writers only write into it.
 */
#define CAGRA_WRITE_KEY_SHARED UINT64CONST(0xCA6A000000000002)
#define CAGRA_WRITE_SLOTS_PER_WRITER 4
/* Blocks a writer must have to itself to be worth starting: a worker's
 * start costs about what writing a few megabytes does. */
#define CAGRA_BLOCKS_PER_WRITER 512

typedef struct CagraParallelWrite
{
	Oid			indexrelid;
	bool		isconcurrent;
	bool		wal;			/* the leader's RelationNeedsWAL: a worker cannot
								 * tell whether the relation is new in this
								 * transaction (wal_level minimal) */
	CagraRelFileId file;
	BlockNumber nblocks;
	uint32		nslots;
	ConditionVariable changed;	/* a run filled or written, or the last filled */
	slock_t		mutex;			/* protects what follows */
	uint64		filled;			/* runs filled; run r is in slot r % nslots */
	uint64		claimed;		/* runs taken by a writer */
	bool		all_filled;
	/* nslots bools (a slot holds a run not yet written), then at
	 * BUFFERALIGN the slots' pages */
} CagraParallelWrite;

static bool *
cagra_write_slot_busy(CagraParallelWrite *pw)
{
	return (bool *) ((char *) pw + sizeof(CagraParallelWrite));
}

static Size
cagra_parallel_write_header_bytes(uint32 nslots)
{
	return BUFFERALIGN(sizeof(CagraParallelWrite) + nslots * sizeof(bool));
}

static Page
cagra_write_slot_page(CagraParallelWrite *pw, uint64 run, int i)
{
	char	   *pages = (char *) pw + cagra_parallel_write_header_bytes(pw->nslots);

	return (Page) (pages + ((Size) (run % pw->nslots) * CAGRA_RUN_PAGES + i) * BLCKSZ);
}

/* The next filled run no writer has taken, or -1: none now, and
 * *finished when none will come. */
static int64
cagra_claim_run(CagraParallelWrite *pw, bool *finished)
{
	int64		run = -1;

	SpinLockAcquire(&pw->mutex);
	if (pw->claimed < pw->filled)
		run = (int64) pw->claimed++;
	*finished = pw->all_filled;
	SpinLockRelease(&pw->mutex);
	return run;
}

static void
cagra_write_claimed_run(CagraParallelWrite *pw, Relation index, uint64 run)
{
	BlockNumber blknos[CAGRA_RUN_PAGES];
	Page		pages[CAGRA_RUN_PAGES];
	BlockNumber first = 1 + (BlockNumber) run * CAGRA_RUN_PAGES;
	int			npages = (int) Min((BlockNumber) CAGRA_RUN_PAGES, pw->nblocks - first);

	for (int i = 0; i < npages; i++)
	{
		blknos[i] = first + i;
		pages[i] = cagra_write_slot_page(pw, run, i);
	}
	cagra_write_run(RelationGetSmgr(index), &pw->file, pw->wal, false, npages, blknos, pages);
	SpinLockAcquire(&pw->mutex);
	cagra_write_slot_busy(pw)[run % pw->nslots] = false;
	SpinLockRelease(&pw->mutex);
	ConditionVariableBroadcast(&pw->changed);
}

/* A parallel worker of the write phase (named in CreateParallelContext). */
extern "C" PGDLLEXPORT void cagra_parallel_write_main(dsm_segment *seg, shm_toc *toc);

void
cagra_parallel_write_main(dsm_segment *seg, shm_toc *toc)
{
	CagraParallelWrite *pw = (CagraParallelWrite *) shm_toc_lookup(toc, CAGRA_WRITE_KEY_SHARED, false);
	LOCKMODE	index_lock = pw->isconcurrent ? RowExclusiveLock : AccessExclusiveLock;
	Relation	index = index_open(pw->indexrelid, index_lock);

	if (!CAGRA_REL_FILE_ID_EQUALS(CAGRA_REL_FILE_ID(index), pw->file))
		elog(ERROR, "cagra parallel build: index \"%s\" has other files in a worker than in the leader",
			 RelationGetRelationName(index));
	for (;;)
	{
		bool		finished;
		int64		run = cagra_claim_run(pw, &finished);

		if (run >= 0)
			cagra_write_claimed_run(pw, index, (uint64) run);
		else if (finished)
			break;
		else
			ConditionVariableSleep(&pw->changed, PG_WAIT_EXTENSION);
	}
	ConditionVariableCancelSleep();
	index_close(index, index_lock);
}

/* The parallel workers that write the pages: as many as
 * max_parallel_maintenance_workers allows and the blocks keep busy. */
static int
cagra_write_workers(Relation index, BlockNumber nblocks)
{
	if (!IsUnderPostmaster || IsInParallelMode() || !IsNormalProcessingMode() ||
		index->rd_rel->relpersistence == RELPERSISTENCE_TEMP)
		return 0;
	return (int) Min((BlockNumber) max_parallel_maintenance_workers, nblocks / CAGRA_BLOCKS_PER_WRITER);
}

/* The leader's part: every run filled, in block order, into its slot; a
 * run of a slot still taken is written by the leader itself first. */
static void
cagra_leader_fill_runs(CagraParallelWrite *pw, Relation index, CagraPageFiller *filler)
{
	bool	   *busy = cagra_write_slot_busy(pw);
	uint64		nruns = ((uint64) pw->nblocks - 1 + CAGRA_RUN_PAGES - 1) / CAGRA_RUN_PAGES;

	for (uint64 run = 0; run < nruns; run++)
	{
		uint32		slot = (uint32) (run % pw->nslots);

		for (;;)
		{
			bool		taken;
			bool		finished;

			SpinLockAcquire(&pw->mutex);
			taken = busy[slot];
			SpinLockRelease(&pw->mutex);
			if (!taken)
				break;

			int64		other = cagra_claim_run(pw, &finished);

			if (other >= 0)
				cagra_write_claimed_run(pw, index, (uint64) other);
			else
				ConditionVariableSleep(&pw->changed, PG_WAIT_EXTENSION);
		}
		ConditionVariableCancelSleep();

		BlockNumber first = 1 + (BlockNumber) run * CAGRA_RUN_PAGES;
		int			npages = (int) Min((BlockNumber) CAGRA_RUN_PAGES, pw->nblocks - first);

		for (int i = 0; i < npages; i++)
			cagra_fill_node_page(filler, first + i, cagra_write_slot_page(pw, run, i));
		SpinLockAcquire(&pw->mutex);
		busy[slot] = true;
		pw->filled++;
		SpinLockRelease(&pw->mutex);
		ConditionVariableBroadcast(&pw->changed);
	}
	SpinLockAcquire(&pw->mutex);
	pw->all_filled = true;
	SpinLockRelease(&pw->mutex);
	ConditionVariableBroadcast(&pw->changed);
}

/* After the last run was filled: the runs no worker took, then wait for
 * those they are writing. */
static void
cagra_leader_finish_runs(CagraParallelWrite *pw, Relation index)
{
	bool	   *busy = cagra_write_slot_busy(pw);

	for (;;)
	{
		bool		finished;
		int64		run = cagra_claim_run(pw, &finished);

		if (run < 0)
			break;
		cagra_write_claimed_run(pw, index, (uint64) run);
	}
	for (;;)
	{
		bool		any_busy = false;

		SpinLockAcquire(&pw->mutex);
		for (uint32 s = 0; s < pw->nslots && !any_busy; s++)
			any_busy = busy[s];
		SpinLockRelease(&pw->mutex);
		if (!any_busy)
			break;
		ConditionVariableSleep(&pw->changed, PG_WAIT_EXTENSION);
	}
	ConditionVariableCancelSleep();
}

/* The shared state of the writers: its slots all free. */
static void
cagra_parallel_write_init(CagraParallelWrite *pw, Relation index, IndexInfo *indexInfo, BlockNumber nblocks,
						  uint32 nslots)
{
	bool	   *busy = cagra_write_slot_busy(pw);

	pw->indexrelid = RelationGetRelid(index);
	pw->isconcurrent = indexInfo->ii_Concurrent;
	pw->wal = RelationNeedsWAL(index);
	pw->file = CAGRA_REL_FILE_ID(index);
	pw->nblocks = nblocks;
	pw->nslots = nslots;
	ConditionVariableInit(&pw->changed);
	SpinLockInit(&pw->mutex);
	pw->filled = pw->claimed = 0;
	pw->all_filled = false;
	for (uint32 s = 0; s < nslots; s++)
		busy[s] = false;
}

/* Blocks 1 .. nblocks - 1 by the leader and parallel workers; false, with
 * nothing written, when no parallel context can be had. */
static bool
cagra_parallel_write_pages(Relation index, IndexInfo *indexInfo, CagraPageFiller *filler, BlockNumber nblocks,
						   int nworkers)
{
	uint32		nslots = (uint32) (nworkers + 1) * CAGRA_WRITE_SLOTS_PER_WRITER;
	Size		bytes = add_size(cagra_parallel_write_header_bytes(nslots),
								 mul_size((Size) nslots * CAGRA_RUN_PAGES, BLCKSZ));

	if (!cagra_dsm_has_room(bytes))
		return false;

	EnterParallelMode();

	ParallelContext *pcxt = CreateParallelContext("cagra", "cagra_parallel_write_main", nworkers);

	shm_toc_estimate_chunk(&pcxt->estimator, bytes);
	shm_toc_estimate_keys(&pcxt->estimator, 1);
	InitializeParallelDSM(pcxt);
	if (pcxt->seg == NULL)
	{
		DestroyParallelContext(pcxt);
		ExitParallelMode();
		return false;
	}

	CagraParallelWrite *pw = (CagraParallelWrite *) shm_toc_allocate(pcxt->toc, bytes);

	cagra_parallel_write_init(pw, index, indexInfo, nblocks, nslots);
	shm_toc_insert(pcxt->toc, CAGRA_WRITE_KEY_SHARED, pw);

	/* the file at its full size before anyone writes into it */
	{
		PGAlignedBlock zero;

		memset(zero.data, 0, BLCKSZ);
		smgrextend(RelationGetSmgr(index), MAIN_FORKNUM, nblocks - 1, zero.data, true);
	}

	LaunchParallelWorkers(pcxt);
	cagra_leader_fill_runs(pw, index, filler);
	cagra_leader_finish_runs(pw, index);
	WaitForParallelWorkersToFinish(pcxt);

	ereport(DEBUG1,
			(errmsg_internal("cagra build of \"%s\": pages written by %d parallel workers and the leader",
							 RelationGetRelationName(index), pcxt->nworkers_launched)));
	DestroyParallelContext(pcxt);
	ExitParallelMode();
	return true;
}

/* Blocks 1 .. cagra_blocks_for(n) - 1: whole groups, and the used pages of
 * the last one. */
void
cagra_write_node_pages(Relation index, IndexInfo *indexInfo, const CagraMetaData *meta, const CagraBuildState *bs,
					   const cagra::Graph *graph)
{
	BlockNumber nblocks = cagra_blocks_for(meta, (uint32) bs->n);
	CagraPageFiller filler;
	int			nworkers = cagra_write_workers(index, nblocks);

	filler.meta = meta;
	filler.bs = bs;
	filler.graph = graph;
	filler.group = (char *) palloc(cagra_group_bytes(meta));
	if (nworkers == 0 || !cagra_parallel_write_pages(index, indexInfo, &filler, nblocks, nworkers))
		cagra_serial_write_pages(index, &filler, nblocks);
	pfree(filler.group);
}

/* The meta page, last: into its block when node pages follow it, else as
 * the file's only block. */
void
cagra_write_meta_page(Relation index, const CagraMetaData *meta, bool has_nodes)
{
	PGAlignedBlock buf;
	BlockNumber blkno = CAGRA_METAPAGE_BLKNO;
	Page		page = (Page) buf.data;

	cagra_init_meta_page(page, meta);
	cagra_write_run(RelationGetSmgr(index), &CAGRA_REL_FILE_ID(index), RelationNeedsWAL(index), !has_nodes, 1,
					&blkno, &page);
}
