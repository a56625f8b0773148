/*
 * build.cpp — ambuild and ambuildempty.
 *
 * The heap scan (with parallel workers when it can) collects prepared
 * vectors and heap TIDs in memory while they fit maintenance_work_mem, and
 * in temporary files mapped into memory beyond it; the GPU worker builds the
 * graph when it runs, otherwise the core builds it here on its own threads
 * while this (the only PostgreSQL) thread reports progress and watches for
 * interrupts; then the pages are written straight to the file, WAL-logged 32
 * at a time (by parallel workers too when the index is large) while the
 * search buffer is measured, the meta page last, and synced
 * (docs/storage.md).
 */
#include "am/cagra_am.h"

#include <atomic>
#include <cstring>
#include <thread>

#include "client/client.h"
#include "core/build.h"
#include "type/vector.h"

#include <sys/mman.h>
#include <sys/statvfs.h>

extern "C" {
#include "access/parallel.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "optimizer/optimizer.h"
#include "storage/condition_variable.h"
#include "storage/dsm.h"
#include "storage/dsm_impl.h"
#include "storage/fd.h"
#include "storage/sharedfileset.h"
#include "storage/spin.h"
#include "utils/snapmgr.h"
#include "access/xlog.h"
#include "access/xloginsert.h"
#include "catalog/index.h"
#include "commands/progress.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/latch.h"
#include "storage/ipc.h"
#include "storage/smgr.h"
#include "commands/tablespace.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/wait_event.h"
}

/* The heap scan's state: plain C data in the build memory context. */
typedef struct CagraBuildState
{
	Relation	index;
	cagra::Metric metric;
	uint32		dims;			/* 0 until the first vector when the column has no typmod */
	bool		halfvec;		/* the column is pgvector's halfvec */
	cagra::ElementType element; /* the storage reloption's element type */
	double		max_norm;		/* of the stored vectors, where the format keeps it
								 * (CagraMetaData) */
	cagra::BuildParams params;	/* assembled once: cagra_build_params */
	float	   *vectors;		/* n x dims, prepared: in memory, in the rows
								 * segment or in a spill file's mapping */
	ItemPointerData *tids;
	uint64		n;
	uint64		capacity;
	uint64		skipped_zero;	/* zero or non-finite-norm vectors under cosine, not indexed */
	struct CagraSpill *spill;	/* the rows once they outgrew maintenance_work_mem, else NULL */
	uint64		expected;		/* the planner's estimate of the table's rows: the first
								 * allocation, so the arrays are rarely copied to grow */
	double		mem_limit;		/* bytes */
	MemoryContext cxt;
	MemoryContext tuple_cxt;
	dsm_segment *rows_seg;		/* holds vectors and tids after a parallel scan, else NULL */
} CagraBuildState;

/* Bytes the build needs per indexed vector: the vector, its TID, the kNN
 * graph (ids and distances) and the working copies of the final graph. */
static double
cagra_build_bytes_per_node(const CagraBuildState *bs)
{
	return (double) bs->dims * sizeof(float) + sizeof(ItemPointerData) +
		(double) bs->params.intermediate_degree * 2 * (sizeof(uint32) + sizeof(float)) +
		(double) bs->params.graph_degree * 3 * sizeof(uint32);
}

/* Whether n vectors fit the build's memory (maintenance_work_mem). */
static bool
cagra_build_fits(const CagraBuildState *bs, uint64 n)
{
	return cagra_build_bytes_per_node(bs) * (double) n <= bs->mem_limit;
}

/*
 * ---- rows beyond maintenance_work_mem ----
 *
 * A build whose rows outgrow maintenance_work_mem appends their prepared
 * vectors and TIDs to two temporary files (temp_tablespaces, counted by
 * temp_file_limit, removed at the end of the transaction) through a buffer
 * of a few hundred kilobytes, as sorts spill theirs; the graph build and
 * the page writes then read them through a read-only mapping.  While the
 * host has room the kernel keeps them in its page cache and the build runs
 * at in-memory speed; under pressure it reads them back instead of the
 * build failing.  Every row is in the graph either way.
 */
#define CAGRA_SPILL_BUFFER_BYTES (256 * 1024)

typedef struct CagraSpill
{
	File		vectors;
	File		tids;
	Size		vector_bytes;
	uint32		buffer_rows;
	uint32		buffered;
	float	   *buffer_vectors;
	ItemPointerData *buffer_tids;
	bool		shared;			/* files of a parallel scan's file set */
	uint64		written_bytes;	/* by this process, to those */
} CagraSpill;

/* In `cxt`: the heap scan's callbacks run in a context reset at each row. */
static CagraSpill *
cagra_spill_new(MemoryContext cxt, File vectors, File tids, uint32 dims)
{
	CagraSpill *sp = (CagraSpill *) MemoryContextAllocZero(cxt, sizeof(CagraSpill));

	sp->vectors = vectors;
	sp->tids = tids;
	sp->vector_bytes = (Size) dims * sizeof(float);
	sp->buffer_rows = (uint32) Max(CAGRA_SPILL_BUFFER_BYTES / sp->vector_bytes, (Size) 1);
	sp->buffer_vectors = (float *) MemoryContextAlloc(cxt, (Size) sp->buffer_rows * sp->vector_bytes);
	sp->buffer_tids = (ItemPointerData *) MemoryContextAlloc(cxt, (Size) sp->buffer_rows * sizeof(ItemPointerData));
	return sp;
}

/* `bytes` of `data` into `file` at `offset`; ERROR on a short write. */
static void
cagra_file_write(File file, const void *data, Size bytes, off_t offset)
{
	const char *p = (const char *) data;

	while (bytes > 0)
	{
		int			amount = (int) Min(bytes, (Size) (1 << 30));
		int			written = FileWrite(file, (char *) p, amount, offset, WAIT_EVENT_BUFFILE_WRITE);

		if (written != amount)
		{
			/* a short write without an error: assume the disk is full */
			if (written >= 0)
				errno = ENOSPC;
			ereport(ERROR,
					(errcode_for_file_access(),
					 errmsg("could not write to temporary file \"%s\" of a cagra build: %m", FilePathName(file))));
		}
		p += amount;
		bytes -= amount;
		offset += amount;
	}
}

/* `count` rows at row `first` of the files. */
static void
cagra_spill_write(CagraSpill *sp, const float *vectors, const ItemPointerData *tids, uint64 first, uint64 count)
{
	/*
	 * fd.c holds a process to temp_file_limit for the files it creates; the
	 * shared files are created by the leader and written by every
	 * participant, so each counts what it writes there itself.
	 */
	if (sp->shared && temp_file_limit >= 0)
	{
		sp->written_bytes += count * (sp->vector_bytes + sizeof(ItemPointerData));
		if (sp->written_bytes / 1024 > (uint64) temp_file_limit)
			ereport(ERROR,
					(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
					 errmsg("temporary file size exceeds temp_file_limit (%dkB)", temp_file_limit)));
	}
	cagra_file_write(sp->vectors, vectors, (Size) count * sp->vector_bytes, (off_t) (first * sp->vector_bytes));
	cagra_file_write(sp->tids, tids, (Size) count * sizeof(ItemPointerData),
					 (off_t) (first * sizeof(ItemPointerData)));
}

/* Whether the buffer must be written before it takes another row. */
static inline bool
cagra_spill_full(const CagraSpill *sp)
{
	return sp->buffered == sp->buffer_rows;
}

static void
cagra_spill_flush(CagraSpill *sp, uint64 first)
{
	cagra_spill_write(sp, sp->buffer_vectors, sp->buffer_tids, first, sp->buffered);
	sp->buffered = 0;
}

/* Unmaps a file mapping when the build's memory context goes (success or
 * error). */
typedef struct CagraMapping
{
	void	   *address;
	Size		bytes;
	MemoryContextCallback callback;
} CagraMapping;

static void
cagra_unmap(void *arg)
{
	CagraMapping *m = (CagraMapping *) arg;

	munmap(m->address, m->bytes);
}

/* The first `bytes` of `file`, mapped read-only for as long as `cxt` lives
 * (the mapping outlives the file's descriptor and its name). */
static const void *
cagra_map_file(File file, Size bytes, MemoryContext cxt)
{
	/* FileSize reopens a descriptor fd.c closed to stay within its limit */
	off_t		size = FileSize(file);

	if (size < 0 || (Size) size < bytes)
		elog(ERROR, "temporary file \"%s\" of a cagra build holds %lld bytes, not %zu",
			 FilePathName(file), (long long) size, bytes);

	void	   *address = mmap(NULL, bytes, PROT_READ, MAP_SHARED, FileGetRawDesc(file), 0);

	if (address == MAP_FAILED)
		ereport(ERROR,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("could not map temporary file \"%s\" of a cagra build: %m", FilePathName(file))));

	CagraMapping *m = (CagraMapping *) MemoryContextAlloc(cxt, sizeof(CagraMapping));

	m->address = address;
	m->bytes = bytes;
	m->callback.func = cagra_unmap;
	m->callback.arg = m;
	MemoryContextRegisterResetCallback(cxt, &m->callback);
	return address;
}

/* The build's arrays over the files' first n rows; the files are closed. */
static void
cagra_spill_map(CagraBuildState *bs, CagraSpill *sp)
{
	bs->vectors = (float *) cagra_map_file(sp->vectors, (Size) bs->n * sp->vector_bytes, bs->cxt);
	bs->tids = (ItemPointerData *) cagra_map_file(sp->tids, (Size) bs->n * sizeof(ItemPointerData), bs->cxt);
	FileClose(sp->vectors);
	FileClose(sp->tids);
	ereport(DEBUG1,
			(errmsg_internal("cagra build of \"%s\": %llu rows, beyond maintenance_work_mem: %.1f MB of vectors in temporary files",
							 RelationGetRelationName(bs->index), (unsigned long long) bs->n,
							 (double) bs->n * sp->vector_bytes / (1024.0 * 1024.0))));
}

/* Serial scan: the rows collected so far into new temporary files, their
 * memory freed; later rows are appended through the spill's buffer. */
static void
cagra_spill_start(CagraBuildState *bs)
{
	PrepareTempTablespaces();

	CagraSpill *sp = cagra_spill_new(bs->cxt, OpenTemporaryFile(false), OpenTemporaryFile(false), bs->dims);

	cagra_spill_write(sp, bs->vectors, bs->tids, 0, bs->n);
	pfree(bs->vectors);
	pfree(bs->tids);
	bs->vectors = NULL;
	bs->tids = NULL;
	bs->capacity = 0;
	bs->spill = sp;
}

/*
 * The column value of a row as floats, or NULL when the row is not indexed
 * (NULL value; under cosine a zero vector or one of non-finite norm, which
 * *skipped counts).  ERROR on a vector of other dimensions.  Called in the
 * build's tuple context.
 */
static const float *
cagra_row_floats(Relation index, Datum value, bool isnull, bool halfvec, cagra::Metric metric, uint32 *dims,
				 uint64 *skipped)
{
	int			dim;

	if (isnull)
		return NULL;

	const float *x = vector_datum_floats(value, halfvec, &dim);

	if (*dims == 0)
		*dims = dim;
	cagra_check_dims(index, *dims, dim);
	if (cagra_vector_unindexable(metric, x, dim))
	{
		(*skipped)++;
		return NULL;
	}
	return x;
}

/* `x` prepared into `out`; with float16 storage, ERROR unless it fits;
 * *max_norm raised to its norm where the format keeps it. */
static void
cagra_store_row(Relation index, const cagra::VectorFormat &format, const float *x, float *out, double *max_norm)
{
	cagra_prepare(format.metric, x, out, format.dim);
	if (format.element == cagra::ElementType::Float16)
		cagra_check_storable(index, format, out, x);
	if (format.keeps_max_norm())
		*max_norm = Max(*max_norm, cagra::vector_norm(out, format.dim));
}

static void
cagra_build_callback(Relation index, ItemPointer tid, Datum *values, bool *isnull,
					 bool tupleIsAlive, void *state)
{
	CagraBuildState *bs = (CagraBuildState *) state;
	MemoryContext old = MemoryContextSwitchTo(bs->tuple_cxt);
	const float *x = cagra_row_floats(index, values[0], isnull[0], bs->halfvec, bs->metric, &bs->dims,
									  &bs->skipped_zero);

	if (x == NULL)
	{
		/* not indexed */
	}
	else if (bs->n >= (uint64) cagra::kInvalidNode - 1)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("a cagra index holds at most %u vectors", cagra::kInvalidNode - 2)));
	else
	{
		cagra::VectorFormat format{bs->element, bs->dims, bs->metric};

		if (bs->spill == NULL && bs->n == bs->capacity && !cagra_build_fits(bs, bs->n + 1))
			cagra_spill_start(bs);
		if (bs->spill)
		{
			CagraSpill *sp = bs->spill;

			if (cagra_spill_full(sp))
				cagra_spill_flush(sp, bs->n - sp->buffered);
			cagra_store_row(index, format, x, sp->buffer_vectors + (Size) sp->buffered * bs->dims, &bs->max_norm);
			sp->buffer_tids[sp->buffered++] = *tid;
		}
		else
		{
			if (bs->n == bs->capacity)
			{
				uint64		fits = (uint64) (bs->mem_limit / cagra_build_bytes_per_node(bs));
				uint64		cap = Min(Max(Max(bs->capacity * 2, (uint64) 1024), bs->expected), fits);

				cap = Max(cap, bs->n + 1);
				bs->vectors = (float *) repalloc_huge(bs->vectors, cap * bs->dims * sizeof(float));
				bs->tids = (ItemPointerData *) repalloc_huge(bs->tids, cap * sizeof(ItemPointerData));
				bs->capacity = cap;
			}
			cagra_store_row(index, format, x, bs->vectors + bs->n * bs->dims, &bs->max_norm);
			bs->tids[bs->n] = *tid;
		}
		bs->n++;
		if ((bs->n & 1023) == 0)
			pgstat_progress_update_param(PROGRESS_CREATEIDX_TUPLES_DONE, (int64) bs->n);
	}
	MemoryContextSwitchTo(old);
	MemoryContextReset(bs->tuple_cxt);
}

/*
 * ---- the heap scan in parallel ----
 *
 * With parallel maintenance workers (plan_create_index_workers), a known
 * number of dimensions and statistics for the table, the leader and the
 * workers scan the heap together (a parallel table scan, as nbtree's
 * parallel build does) and each takes slots from a shared counter in one
 * dynamic shared memory segment of vectors and TIDs, sized for the table's
 * estimated rows within maintenance_work_mem; that segment is then the
 * build's arrays.  Rows beyond it (a table larger than maintenance_work_mem,
 * or than its estimate) go through each participant's buffer to two files
 * of a shared file set, at row ranges taken from a second counter, as a
 * serial scan's do (CagraSpill); the leader then appends the segment's rows
 * to those files and maps them.  Slots come in scan order per participant,
 * so node ids follow no particular order (nothing depends on it).
 */
#define CAGRA_PARALLEL_KEY_SHARED UINT64CONST(0xCA6A000000000001)

typedef struct CagraParallelBuild
{
	Oid			heaprelid;
	Oid			indexrelid;
	bool		isconcurrent;
	bool		halfvec;
	uint32		dims;
	uint32		metric;
	uint32		element;
	uint64		capacity;		/* slots in the rows segment; may be 0 */
	dsm_handle	rows;			/* capacity vectors, then capacity TIDs */
	pg_atomic_uint64 next;		/* slots handed out; past capacity: to the files */
	pg_atomic_uint64 spilled;	/* rows written to the files */
	SharedFileSet files;		/* CAGRA_SPILL_VECTORS and CAGRA_SPILL_TIDS */
	slock_t		mutex;			/* protects the sums below */
	double		reltuples;
	uint64		skipped;
	double		max_norm;
	/* a ParallelTableScanDescData follows, at BUFFERALIGN(sizeof(...)) */
} CagraParallelBuild;

static ParallelTableScanDesc
cagra_parallel_scan_desc(CagraParallelBuild *shared)
{
	return (ParallelTableScanDesc) ((char *) shared + BUFFERALIGN(sizeof(CagraParallelBuild)));
}

static ItemPointerData *
cagra_parallel_tids(const CagraParallelBuild *shared, float *vectors)
{
	return (ItemPointerData *) (vectors + shared->capacity * shared->dims);
}

#define CAGRA_SPILL_VECTORS "vectors"
#define CAGRA_SPILL_TIDS "tids"

static CagraSpill *
cagra_spill_open_shared(MemoryContext cxt, CagraParallelBuild *shared)
{
	CagraSpill *sp = cagra_spill_new(cxt, FileSetOpen(&shared->files.fs, CAGRA_SPILL_VECTORS, O_RDWR),
									 FileSetOpen(&shared->files.fs, CAGRA_SPILL_TIDS, O_RDWR), shared->dims);

	sp->shared = true;
	return sp;
}

/* One participant's view of the scan. */
typedef struct CagraParallelScan
{
	CagraParallelBuild *shared;
	float	   *vectors;
	ItemPointerData *tids;
	CagraSpill *spill;			/* opened at its first row beyond the segment */
	cagra::VectorFormat format;
	uint64		skipped;
	double		max_norm;
	MemoryContext cxt;			/* the participant's */
	MemoryContext tuple_cxt;
	bool		leader;
} CagraParallelScan;

/* The participant's buffered rows to the next free rows of the files. */
static void
cagra_parallel_spill_flush(CagraParallelScan *ps)
{
	uint64		first = pg_atomic_fetch_add_u64(&ps->shared->spilled, ps->spill->buffered);

	cagra_spill_flush(ps->spill, first);
}

static void
cagra_parallel_callback(Relation index, ItemPointer tid, Datum *values, bool *isnull,
						bool tupleIsAlive, void *state)
{
	CagraParallelScan *ps = (CagraParallelScan *) state;
	MemoryContext old = MemoryContextSwitchTo(ps->tuple_cxt);
	uint32		dims = ps->format.dim;
	const float *x = cagra_row_floats(index, values[0], isnull[0], ps->shared->halfvec, ps->format.metric, &dims,
									  &ps->skipped);

	if (x != NULL)
	{
		uint64		slot = pg_atomic_fetch_add_u64(&ps->shared->next, 1);

		if (slot < ps->shared->capacity)
		{
			cagra_store_row(index, ps->format, x, ps->vectors + slot * dims, &ps->max_norm);
			ps->tids[slot] = *tid;
		}
		else
		{
			if (ps->spill == NULL)
				ps->spill = cagra_spill_open_shared(ps->cxt, ps->shared);
			else if (cagra_spill_full(ps->spill))
				cagra_parallel_spill_flush(ps);
			cagra_store_row(index, ps->format, x, ps->spill->buffer_vectors + (Size) ps->spill->buffered * dims,
							&ps->max_norm);
			ps->spill->buffer_tids[ps->spill->buffered++] = *tid;
		}
		if (ps->leader && (slot & 1023) == 0)
			pgstat_progress_update_param(PROGRESS_CREATEIDX_TUPLES_DONE, (int64) slot);
	}
	MemoryContextSwitchTo(old);
	MemoryContextReset(ps->tuple_cxt);
}

/* Scan this participant's share of the heap into the rows segment. */
static void
cagra_parallel_participate(CagraParallelBuild *shared, float *vectors, Relation heap, Relation index,
						   IndexInfo *indexInfo, bool leader)
{
	CagraParallelScan ps;

	ps.shared = shared;
	ps.vectors = vectors;
	ps.tids = cagra_parallel_tids(shared, vectors);
	ps.format = cagra::VectorFormat{(cagra::ElementType) shared->element, shared->dims,
									(cagra::Metric) shared->metric};
	ps.spill = NULL;
	ps.cxt = CurrentMemoryContext;
	ps.skipped = 0;
	ps.max_norm = 0;
	ps.leader = leader;
	ps.tuple_cxt = AllocSetContextCreate(CurrentMemoryContext, "cagra parallel build tuple",
										 ALLOCSET_DEFAULT_SIZES);

	TableScanDesc scan = table_beginscan_parallel(heap, cagra_parallel_scan_desc(shared));
	double		reltuples = table_index_build_scan(heap, index, indexInfo, true, leader,
												   cagra_parallel_callback, &ps, scan);

	if (ps.spill)
	{
		if (ps.spill->buffered > 0)
			cagra_parallel_spill_flush(&ps);
		FileClose(ps.spill->vectors);
		FileClose(ps.spill->tids);
	}
	SpinLockAcquire(&shared->mutex);
	shared->reltuples += reltuples;
	shared->skipped += ps.skipped;
	shared->max_norm = Max(shared->max_norm, ps.max_norm);
	SpinLockRelease(&shared->mutex);
	MemoryContextDelete(ps.tuple_cxt);
}

/* A parallel worker's part (named in CreateParallelContext). */
extern "C" PGDLLEXPORT void cagra_parallel_build_main(dsm_segment *seg, shm_toc *toc);

void
cagra_parallel_build_main(dsm_segment *seg, shm_toc *toc)
{
	CagraParallelBuild *shared = (CagraParallelBuild *) shm_toc_lookup(toc, CAGRA_PARALLEL_KEY_SHARED, false);
	/* the lock modes index.c took in the leader (group locking shares them) */
	LOCKMODE	heap_lock = shared->isconcurrent ? ShareUpdateExclusiveLock : ShareLock;
	LOCKMODE	index_lock = shared->isconcurrent ? RowExclusiveLock : AccessExclusiveLock;
	Relation	heap = table_open(shared->heaprelid, heap_lock);
	Relation	index = index_open(shared->indexrelid, index_lock);
	IndexInfo  *indexInfo = BuildIndexInfo(index);
	dsm_segment *rows = NULL;

	if (shared->capacity > 0)
	{
		rows = dsm_attach(shared->rows);
		if (rows == NULL)
			elog(ERROR, "cagra parallel build: could not attach to the rows segment");
	}
	SharedFileSetAttach(&shared->files, seg);
	indexInfo->ii_Concurrent = shared->isconcurrent;
	cagra_parallel_participate(shared, rows ? (float *) dsm_segment_address(rows) : NULL, heap, index, indexInfo,
							   false);
	if (rows)
		dsm_detach(rows);
	index_close(index, index_lock);
	table_close(heap, heap_lock);
}

/* Whether a segment of `bytes` can be had: POSIX shared memory lives in
 * /dev/shm, whose size is often small in containers, and a segment that
 * does not fit there fails with an ERROR rather than a NULL. */
static bool
cagra_dsm_has_room(Size bytes)
{
	if (dynamic_shared_memory_type == DSM_IMPL_MMAP)
		return true;
	if (dynamic_shared_memory_type != DSM_IMPL_POSIX)
		return false;

	struct statvfs st;

	return statvfs("/dev/shm", &st) == 0 &&
		(double) st.f_bavail * (double) st.f_frsize > (double) bytes * 1.1 + 64.0 * 1024 * 1024;
}

/*
 * The parallel workers PostgreSQL grants this build.  plan_create_index_workers
 * leaves each participant 32 MB of maintenance_work_mem, what a sort needs;
 * a participant here needs only its 256 kB spill buffer (the rows beyond the
 * segment go to files), so it is asked with maintenance_work_mem raised, for
 * the call only, to what lets every worker through.
 */
static int
cagra_index_workers(Relation heap, Relation index)
{
	int			nest = NewGUCNestLevel();
	char		value[32];

	snprintf(value, sizeof(value), "%d",
			 (int) Min(Max((int64) maintenance_work_mem, (int64) 32768 * (max_parallel_maintenance_workers + 1)),
					   (int64) MAX_KILOBYTES));
	(void) set_config_option("maintenance_work_mem", value, PGC_USERSET, PGC_S_SESSION, GUC_ACTION_SAVE, true, 0,
							 false);

	int			nworkers = plan_create_index_workers(RelationGetRelid(heap), RelationGetRelid(index));

	AtEOXact_GUC(true, nest);
	return nworkers;
}

/*
 * Scan the heap with parallel workers into a rows segment that becomes the
 * build's arrays (bs->rows_seg; detached by the caller), or into files
 * mapped as the build's arrays when the rows outgrow the segment.  false,
 * with nothing done, when a parallel scan does not apply: no workers to be
 * had, the dimensions unknown before the first row, or no statistics to size
 * the segment by.
 */
static bool
cagra_parallel_heap_scan(Relation heap, Relation index, IndexInfo *indexInfo, CagraBuildState *bs,
						 double *reltuples)
{
	if (bs->dims == 0 || heap->rd_rel->reltuples < 0 || !IsNormalProcessingMode())
		return false;

	int			nworkers = cagra_index_workers(heap, index);

	if (nworkers <= 0)
		return false;

	uint64		fits = (uint64) (bs->mem_limit / cagra_build_bytes_per_node(bs));
	uint64		capacity = Min(Min((uint64) (bs->expected * 1.15) + 10000, fits), (uint64) cagra::kInvalidNode - 2);
	Size		rows_bytes = (Size) capacity * (bs->dims * sizeof(float) + sizeof(ItemPointerData));

	if (!cagra_dsm_has_room(rows_bytes))
		capacity = rows_bytes = 0;

	Snapshot	snapshot = indexInfo->ii_Concurrent ? RegisterSnapshot(GetTransactionSnapshot()) : SnapshotAny;

	EnterParallelMode();

	ParallelContext *pcxt = CreateParallelContext("cagra", "cagra_parallel_build_main", nworkers);
	Size		shared_bytes = add_size(BUFFERALIGN(sizeof(CagraParallelBuild)),
										table_parallelscan_estimate(heap, snapshot));

	shm_toc_estimate_chunk(&pcxt->estimator, shared_bytes);
	shm_toc_estimate_keys(&pcxt->estimator, 1);
	InitializeParallelDSM(pcxt);
	if (pcxt->seg == NULL)
	{
		DestroyParallelContext(pcxt);
		ExitParallelMode();
		if (IsMVCCSnapshot(snapshot))
			UnregisterSnapshot(snapshot);
		return false;
	}

	dsm_segment *rows = capacity > 0 ? dsm_create(rows_bytes, 0) : NULL;
	float	   *seg_vectors = rows ? (float *) dsm_segment_address(rows) : NULL;
	CagraParallelBuild *shared = (CagraParallelBuild *) shm_toc_allocate(pcxt->toc, shared_bytes);

	shared->heaprelid = RelationGetRelid(heap);
	shared->indexrelid = RelationGetRelid(index);
	shared->isconcurrent = indexInfo->ii_Concurrent;
	shared->halfvec = bs->halfvec;
	shared->dims = bs->dims;
	shared->metric = (uint32) bs->metric;
	shared->element = (uint32) bs->element;
	shared->capacity = capacity;
	shared->rows = rows ? dsm_segment_handle(rows) : DSM_HANDLE_INVALID;
	pg_atomic_init_u64(&shared->next, 0);
	pg_atomic_init_u64(&shared->spilled, 0);
	SharedFileSetInit(&shared->files, pcxt->seg);
	FileClose(FileSetCreate(&shared->files.fs, CAGRA_SPILL_VECTORS));
	FileClose(FileSetCreate(&shared->files.fs, CAGRA_SPILL_TIDS));
	SpinLockInit(&shared->mutex);
	shared->reltuples = 0;
	shared->skipped = 0;
	shared->max_norm = 0;
	table_parallelscan_initialize(heap, cagra_parallel_scan_desc(shared), snapshot);
	shm_toc_insert(pcxt->toc, CAGRA_PARALLEL_KEY_SHARED, shared);

	LaunchParallelWorkers(pcxt);
	cagra_parallel_participate(shared, seg_vectors, heap, index, indexInfo, true);
	WaitForParallelWorkersToFinish(pcxt);

	uint64		in_segment = Min(pg_atomic_read_u64(&shared->next), capacity);
	uint64		spilled = pg_atomic_read_u64(&shared->spilled);

	ereport(DEBUG1,
			(errmsg_internal("cagra build of \"%s\": heap scanned by %d parallel workers and the leader, %llu rows in a segment of %llu, %llu in files",
							 RelationGetRelationName(index), pcxt->nworkers_launched,
							 (unsigned long long) in_segment, (unsigned long long) capacity,
							 (unsigned long long) spilled)));

	bs->n = in_segment + spilled;
	bs->skipped_zero = shared->skipped;
	bs->max_norm = shared->max_norm;
	*reltuples = shared->reltuples;
	if (spilled == 0)
	{
		bs->vectors = seg_vectors;
		bs->tids = cagra_parallel_tids(shared, seg_vectors);
		bs->capacity = capacity;
		bs->rows_seg = rows;
	}
	else
	{
		/* the segment's rows after the files' (mapped before the file set
		 * goes with the parallel context) */
		CagraSpill *sp = cagra_spill_open_shared(bs->cxt, shared);

		cagra_spill_write(sp, seg_vectors, cagra_parallel_tids(shared, seg_vectors), spilled, in_segment);
		cagra_spill_map(bs, sp);
		if (rows)
			dsm_detach(rows);
	}

	DestroyParallelContext(pcxt);
	ExitParallelMode();
	if (IsMVCCSnapshot(snapshot))
		UnregisterSnapshot(snapshot);
	return true;
}

/* ---- the core build on its own threads ---- */

struct CagraBuildJob
{
	cagra::DatasetView data;
	cagra::Metric metric = cagra::Metric::L2;
	cagra::BuildParams params;
	cagra::BuildProgress progress;
	cagra::BuiltGraph result;
	CagraStatus status;
	std::atomic<bool> finished{false};
	std::thread thread;

	~CagraBuildJob()
	{
		progress.cancel = true;
		if (thread.joinable())
			thread.join();
	}

	void run() noexcept
	{
		cagra_guard(&status, [this] { result = cagra::build_graph(data, metric, params, &progress); });
		finished = true;
	}
};

/* Start the job's thread (signals blocked: boundary.h; the core's threads
 * inherit the mask). */
static bool
cagra_start_job(CagraBuildJob *job, CagraStatus *st) noexcept
{
	return cagra_guard(st, [job] { job->thread = cagra_start_thread([job] { job->run(); }); });
}

static void
cagra_stop_job(CagraBuildJob *job) noexcept
{
	job->progress.cancel = true;
	if (job->thread.joinable())
		job->thread.join();
}

static int64
cagra_phase_of(uint32 core_phase)
{
	return core_phase == (uint32) cagra::BuildPhase::Pruning ? CAGRA_PHASE_PRUNE : CAGRA_PHASE_KNN;
}

static void
cagra_report_worker_step(CagraWorkerBuildStep step)
{
	int64		phase = step == CAGRA_WORKER_SEND_VECTORS ? CAGRA_PHASE_SEND :
		step == CAGRA_WORKER_RECEIVE_GRAPH ? CAGRA_PHASE_RECEIVE : CAGRA_PHASE_KNN;

	pgstat_progress_update_param(PROGRESS_CREATEIDX_SUBPHASE, phase);
}

/*
 * Run the core build and wait for it, reporting progress.  On a cancel
 * request the job is stopped and joined before CHECK_FOR_INTERRUPTS throws;
 * on any other error the owner's reset callback stops and joins it.
 */
static CagraBuildJob *
cagra_run_core_build(CagraBuildState *bs, CagraOwner **owner_out)
{
	CagraStatus st;
	CagraBuildJob *job = nullptr;

	if (!cagra_guard(&st, [&job] { job = new CagraBuildJob(); }))
		cagra_report_status(&st);
	CagraOwner *owner = cagra_owner_new(bs->cxt, job, cagra_delete_object<CagraBuildJob>);

	job->data.data = bs->vectors;
	job->data.n = bs->n;
	job->data.dim = bs->dims;
	job->metric = bs->metric;
	job->params = bs->params;

	if (!cagra_start_job(job, &st))
	{
		cagra_owner_free(owner);
		cagra_report_status(&st);
	}

	int64		last_phase = -1;

	while (!job->finished.load())
	{
		int			rc = WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_POSTMASTER_DEATH,
								   10L, PG_WAIT_EXTENSION);

		ResetLatch(MyLatch);
		if (rc & WL_POSTMASTER_DEATH)
		{
			cagra_stop_job(job);
			proc_exit(1);
		}

		int64		phase = cagra_phase_of(job->progress.phase.load());

		if (phase != last_phase)
		{
			pgstat_progress_update_param(PROGRESS_CREATEIDX_SUBPHASE, phase);
			last_phase = phase;
		}
		pgstat_progress_update_param(PROGRESS_CREATEIDX_TUPLES_TOTAL, (int64) job->progress.total.load());
		pgstat_progress_update_param(PROGRESS_CREATEIDX_TUPLES_DONE, (int64) job->progress.done.load());

		if (InterruptPending)
		{
			if (QueryCancelPending || ProcDiePending)
				cagra_stop_job(job);
			CHECK_FOR_INTERRUPTS();
		}
	}
	cagra_stop_job(job);		/* joins the finished thread */
	if (!job->status.ok)
	{
		st = job->status;
		cagra_owner_free(owner);
		cagra_report_status(&st);
	}
	*owner_out = owner;
	return job;
}

/* ---- writing the pages ---- */

/* Seconds since *mark, which moves to now. */
static double
cagra_lap(instr_time *mark)
{
	instr_time	now,
				elapsed;

	INSTR_TIME_SET_CURRENT(now);
	elapsed = now;
	INSTR_TIME_SUBTRACT(elapsed, *mark);
	*mark = now;
	return INSTR_TIME_GET_DOUBLE(elapsed);
}


static void
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
	shm_toc_insert(pcxt->toc, CAGRA_WRITE_KEY_SHARED, pw);

	/* the file at its full size before anyone writes into it */
	{
		PGAlignedBlock zero;

		memset(zero.data, 0, BLCKSZ);
		smgrextend(RelationGetSmgr(index), MAIN_FORKNUM, nblocks - 1, zero.data, true);
	}

	LaunchParallelWorkers(pcxt);

	uint64		nruns = ((uint64) nblocks - 1 + CAGRA_RUN_PAGES - 1) / CAGRA_RUN_PAGES;

	for (uint64 run = 0; run < nruns; run++)
	{
		uint32		slot = (uint32) (run % nslots);

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
		int			npages = (int) Min((BlockNumber) CAGRA_RUN_PAGES, nblocks - first);

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

	/* the runs no worker took, then those they are writing */
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
		for (uint32 s = 0; s < nslots && !any_busy; s++)
			any_busy = busy[s];
		SpinLockRelease(&pw->mutex);
		if (!any_busy)
			break;
		ConditionVariableSleep(&pw->changed, PG_WAIT_EXTENSION);
	}
	ConditionVariableCancelSleep();
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
static void
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
static void
cagra_write_meta_page(Relation index, const CagraMetaData *meta, bool has_nodes)
{
	PGAlignedBlock buf;
	BlockNumber blkno = CAGRA_METAPAGE_BLKNO;
	Page		page = (Page) buf.data;

	cagra_init_meta_page(page, meta);
	cagra_write_run(RelationGetSmgr(index), &CAGRA_REL_FILE_ID(index), RelationNeedsWAL(index), !has_nodes, 1,
					&blkno, &page);
}

static void
cagra_check_built_graph(const CagraBuildState *bs, const cagra::BuiltGraph &built)
{
	if (built.graph.degree != bs->params.graph_degree || built.graph.size() != bs->n)
		elog(ERROR, "cagra core build returned a graph of %llu x %u for %llu vectors of degree %u",
			 (unsigned long long) built.graph.size(), built.graph.degree,
			 (unsigned long long) bs->n, bs->params.graph_degree);
}

/* The graph of the collected vectors: on the GPU worker when it runs,
 * otherwise (or when it fails) by the core here; *owner owns a core build. */
static const cagra::BuiltGraph *
cagra_build_graph(CagraBuildState *bs, int build_device, CagraOwner **owner, uint32 *built_on)
{
	const cagra::BuiltGraph *built = NULL;
	cagra::VectorFormat format;
	bool		on_gpu = false;

	format.dim = bs->dims;
	format.metric = bs->metric;
	cagra::BuiltGraph *from_worker = NULL;

	if (build_device != CAGRA_DEVICE_CPU)
		from_worker = cagra_worker_build_graph(RelationGetRelationName(bs->index), bs->vectors, bs->rows_seg,
											   bs->n, format,
											   bs->params, build_device == CAGRA_DEVICE_GPU,
											   cagra_report_worker_step, bs->cxt, &on_gpu);
	if (from_worker)
	{
		/* the core's connect step over the worker's graph: a link only where
		 * a node has no way in from the first entry (cheap when there is
		 * none; the GPU's own connect step has missed a node) */
		pgstat_progress_update_param(PROGRESS_CREATEIDX_SUBPHASE, CAGRA_PHASE_CONNECT);
		cagra_guard_or_error([&] {
			cagra::DatasetView view{bs->vectors, bs->n, bs->dims};

			if (!from_worker->entry_nodes.empty())
				cagra::connect_graph(from_worker->graph, view, bs->metric, from_worker->entry_nodes);
		});
		*built_on = on_gpu ? CAGRA_DEVICE_GPU : CAGRA_DEVICE_CPU;
		built = from_worker;
	}
	else
		built = &cagra_run_core_build(bs, owner)->result;
	cagra_check_built_graph(bs, *built);
	return built;
}

/*
 * The itopk_size searches of this graph use while cagra.itopk_size is 0:
 * the smallest that reaches recall 0.95 on a sample of its own rows, each
 * searched for in the graph without it, and the entry probes CPU searches
 * use while cagra.entry_probes is -1 (cagra::choose_itopk, docs/tuning.md),
 * for the meta page.  It runs on a thread of its own while the node pages
 * are written: both only read the graph and the vectors, and the meta page
 * goes last.
 */
struct CagraMeasureJob
{
	cagra::DatasetView data;
	cagra::Metric metric = cagra::Metric::L2;
	const cagra::BuiltGraph *built = nullptr;
	uint64_t	seed = 0;
	uint32_t	threads = 1;
	cagra::ItopkChoice choice;
	CagraStatus status;
	double		seconds = 0;
	std::thread thread;

	~CagraMeasureJob()
	{
		if (thread.joinable())
			thread.join();
	}

	void run() noexcept
	{
		instr_time	start;

		INSTR_TIME_SET_CURRENT(start);
		cagra_guard(&status, [this] {
			choice = cagra::choose_itopk(built->graph, data, metric, built->entry_nodes, seed, threads);
		});
		seconds = cagra_lap(&start);
	}
};

/* Start the measurement; its owner (in the build's memory context) joins
 * the thread when freed, on any error too. */
static CagraMeasureJob *
cagra_start_measure(const CagraBuildState *bs, const cagra::BuiltGraph *built, CagraOwner **owner_out)
{
	CagraStatus st;
	CagraMeasureJob *job = nullptr;

	if (!cagra_guard(&st, [&job] { job = new CagraMeasureJob(); }))
		cagra_report_status(&st);
	*owner_out = cagra_owner_new(bs->cxt, job, cagra_delete_object<CagraMeasureJob>);
	job->data = cagra::DatasetView{bs->vectors, bs->n, bs->dims};
	job->metric = bs->metric;
	job->built = built;
	job->seed = bs->params.seed;
	job->threads = bs->params.threads;
	if (!cagra_guard(&st, [job] { job->thread = cagra_start_thread([job] { job->run(); }); }))
	{
		cagra_owner_free(*owner_out);
		cagra_report_status(&st);
	}
	return job;
}

/* Wait for the measurement and put its result into the meta page; a
 * NOTICE says when itopk_size is above the default.  *seconds: how long it
 * ran (beside the writes). */
static void
cagra_finish_measure(const CagraBuildState *bs, CagraMeasureJob *job, CagraOwner *owner, CagraMetaData *meta,
					 double *seconds)
{
	pgstat_progress_update_param(PROGRESS_CREATEIDX_SUBPHASE, CAGRA_PHASE_MEASURE);
	job->thread.join();

	cagra::ItopkChoice choice = job->choice;
	CagraStatus st = job->status;

	*seconds = job->seconds;
	cagra_owner_free(owner);
	if (!st.ok)
		cagra_report_status(&st);
	if (choice.measured)
		elog(DEBUG1, "cagra build of \"%s\": itopk_size %u reaches recall@10 %.3f on %u of its rows, against %s; "
			 "from the entry index %u probes %.3f, %u probes %.3f",
			 RelationGetRelationName(bs->index), choice.itopk_size, choice.recall, cagra::kItopkSamples,
			 choice.exact_reference ? "their exact neighbours" : "a search of 1024 candidates",
			 choice.entry_probes, choice.probes_recall, cagra::SearchParams{}.entry_probes,
			 choice.default_probes_recall);
	if (choice.itopk_size > cagra::SearchParams{}.itopk_size)
		ereport(NOTICE,
				(errmsg("cagra index \"%s\" searches with itopk_size %u", RelationGetRelationName(bs->index),
						choice.itopk_size),
				 choice.recall >= cagra::kItopkTargetRecall ?
				 errdetail("A search of %u candidates found %.1f%% of the 10 nearest neighbours of %u of its rows, the smallest buffer to reach %.0f%%.",
						   choice.itopk_size, 100.0 * choice.recall, cagra::kItopkSamples,
						   100.0 * cagra::kItopkTargetRecall) :
				 errdetail("A search of %u candidates, the most the GPU allows, found %.1f%% of the 10 nearest neighbours of %u of its rows.",
						   choice.itopk_size, 100.0 * choice.recall, cagra::kItopkSamples),
				 errhint("SET cagra.itopk_size to trade recall for speed; 0, the default, uses the index's own.")));
	meta->search_itopk = choice.itopk_size;
	meta->search_probes = choice.entry_probes;
}

IndexBuildResult *
cagra_build(Relation heap, Relation index, IndexInfo *indexInfo)
{
	int			build_device = cagra_option_build_device(index);

	if (RelationGetNumberOfBlocks(index) != 0)
		elog(ERROR, "index \"%s\" already contains data", RelationGetRelationName(index));
	if (build_device == CAGRA_DEVICE_GPU)
		cagra_worker_require_gpu_build(RelationGetRelationName(index));

	MemoryContext cxt = AllocSetContextCreate(CurrentMemoryContext, "cagra build",
											  ALLOCSET_DEFAULT_SIZES);
	MemoryContext old = MemoryContextSwitchTo(cxt);
	CagraBuildState *bs = (CagraBuildState *) palloc0(sizeof(CagraBuildState));
	int32		typmod = TupleDescAttr(RelationGetDescr(index), 0)->atttypmod;

	bs->index = index;
	bs->metric = cagra_index_metric(index);
	bs->dims = typmod > 0 ? (uint32) typmod : 0;
	bs->params = cagra_build_params(index);
	bs->halfvec = cagra_index_is_halfvec(index);
	bs->element = cagra_option_element_type(index);
	bs->mem_limit = (double) maintenance_work_mem * 1024.0;
	bs->cxt = cxt;
	bs->tuple_cxt = AllocSetContextCreate(cxt, "cagra build tuple", ALLOCSET_DEFAULT_SIZES);
	bs->vectors = (float *) palloc(sizeof(float));
	bs->tids = (ItemPointerData *) palloc(sizeof(ItemPointerData));

	BlockNumber heap_pages;
	double		heap_tuples,
				allvisfrac;

	table_relation_estimate_size(heap, NULL, &heap_pages, &heap_tuples, &allvisfrac);
	bs->expected = (uint64) Min(heap_tuples * 1.1 + 1024, (double) cagra::kInvalidNode);

	pgstat_progress_update_param(PROGRESS_CREATEIDX_SUBPHASE, CAGRA_PHASE_LOAD);

	double		reltuples = 0;
	instr_time	mark;
	double		scan_s,
				graph_s,
				measure_s = 0,
				measure_wait_s = 0,
				write_s = 0,
				sync_s;

	INSTR_TIME_SET_CURRENT(mark);

	if (!cagra_parallel_heap_scan(heap, index, indexInfo, bs, &reltuples))
	{
		reltuples = table_index_build_scan(heap, index, indexInfo, true, true, cagra_build_callback, bs, NULL);
		if (bs->spill)
		{
			cagra_spill_flush(bs->spill, bs->n - bs->spill->buffered);
			cagra_spill_map(bs, bs->spill);
		}
	}
	scan_s = cagra_lap(&mark);

	CagraMetaData meta;
	CagraOwner *owner = NULL;
	uint32		built_on = CAGRA_DEVICE_CPU;
	const cagra::BuiltGraph *built = bs->n > 0 ? cagra_build_graph(bs, build_device, &owner, &built_on) : NULL;

	graph_s = cagra_lap(&mark);

	cagra_fill_meta(&meta, index, bs->dims);
	meta.n = meta.live = meta.built_nodes = (uint32) bs->n;
	meta.max_norm = (float4) bs->max_norm;
	meta.build_device = built_on;
	if (built)
	{
		meta.entry_count = (uint32) Min(built->entry_nodes.size(), (size_t) CAGRA_MAX_ENTRY_NODES);
		if (built->long_edges)
			meta.build_flags |= CAGRA_BUILT_LONG_EDGES;
		for (uint32 i = 0; i < meta.entry_count; i++)
			meta.entries[i] = built->entry_nodes[i];

		CagraOwner *measure_owner;
		CagraMeasureJob *measure = cagra_start_measure(bs, built, &measure_owner);

		pgstat_progress_update_param(PROGRESS_CREATEIDX_SUBPHASE, CAGRA_PHASE_WRITE);
		pgstat_progress_update_param(PROGRESS_CREATEIDX_TUPLES_TOTAL, (int64) bs->n);
		/* The measurement reads the rows segment and the mappings, which an
		 * abort releases before it deletes this memory context: joined
		 * first. */
		PG_TRY();
		{
			cagra_write_node_pages(index, indexInfo, &meta, bs, &built->graph);
		}
		PG_CATCH();
		{
			cagra_owner_free(measure_owner);
			PG_RE_THROW();
		}
		PG_END_TRY();
		write_s = cagra_lap(&mark);
		cagra_finish_measure(bs, measure, measure_owner, &meta, &measure_s);
		measure_wait_s = cagra_lap(&mark);
	}
	else
		pgstat_progress_update_param(PROGRESS_CREATEIDX_SUBPHASE, CAGRA_PHASE_WRITE);
	cagra_write_meta_page(index, &meta, built != NULL);
	write_s += cagra_lap(&mark);
	if (RelationNeedsWAL(index))
	{
		pgstat_progress_update_param(PROGRESS_CREATEIDX_SUBPHASE, CAGRA_PHASE_SYNC);
		smgrimmedsync(RelationGetSmgr(index), MAIN_FORKNUM);
	}
	sync_s = cagra_lap(&mark);
	ereport(DEBUG1,
			(errmsg_internal("cagra build of \"%s\": %llu rows; seconds: scan %.3f, graph %.3f, write %.3f, measure %.3f (beside the write; then waited for %.3f), sync %.3f",
							 RelationGetRelationName(index), (unsigned long long) bs->n, scan_s, graph_s,
							 write_s, measure_s, measure_wait_s, sync_s)));

	if (bs->skipped_zero > 0)
		ereport(NOTICE,
				(errmsg_plural("%llu vector was not indexed: its cosine distance is undefined (a zero vector, or a squared norm beyond the float range)",
							   "%llu vectors were not indexed: their cosine distance is undefined (zero vectors, or a squared norm beyond the float range)",
							   (unsigned long) bs->skipped_zero,
							   (unsigned long long) bs->skipped_zero)));

	MemoryContextSwitchTo(old);

	IndexBuildResult *result = (IndexBuildResult *) palloc(sizeof(IndexBuildResult));

	result->heap_tuples = reltuples;
	result->index_tuples = (double) bs->n;
	if (owner)
		cagra_owner_free(owner);
	if (bs->rows_seg)
		dsm_detach(bs->rows_seg);
	MemoryContextDelete(cxt);
	return result;
}

/* The init fork of an unlogged index: a meta page with no nodes. */
void
cagra_buildempty(Relation index)
{
	CagraMetaData meta;
	int32		typmod = TupleDescAttr(RelationGetDescr(index), 0)->atttypmod;
	Page		page = (Page) palloc(BLCKSZ);

	cagra_fill_meta(&meta, index, typmod > 0 ? (uint32) typmod : 0);
	cagra_init_meta_page(page, &meta);
	PageSetChecksumInplace(page, CAGRA_METAPAGE_BLKNO);
	smgrwrite(RelationGetSmgr(index), INIT_FORKNUM, CAGRA_METAPAGE_BLKNO, (char *) page, true);
	log_newpage(&CAGRA_REL_FILE_ID(index), INIT_FORKNUM, CAGRA_METAPAGE_BLKNO,
				page, true);
	smgrimmedsync(RelationGetSmgr(index), INIT_FORKNUM);
	pfree(page);
}
