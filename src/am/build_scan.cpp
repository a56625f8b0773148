/*
 * build_scan.cpp — the heap scan of CREATE INDEX: each row's vector
 * prepared and kept with its heap TID (build_rows.cpp says where), by this
 * backend alone or with parallel workers, and, when the worker may build
 * the graph, sent to it in chunks as the scan goes (client/build.cpp), so
 * that the transfer overlaps the scan and the worker holds the vectors
 * when it ends.
 */
#include "am/build_scan.h"

#include "type/vector.h"

extern "C" {
#include "access/parallel.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/index.h"
#include "commands/progress.h"
#include "optimizer/optimizer.h"
#include "pgstat.h"
#include "storage/sharedfileset.h"
#include "storage/spin.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
}

/* ---- the stream to the worker ---- */

/* Open the stream once the dimensions are known (the first row's, when
 * the column has no typmod). */
void
cagra_build_stream_open(CagraBuildState *bs)
{
	cagra::VectorFormat format;

	if (!bs->stream_wanted || bs->streaming || bs->dims == 0)
		return;
	format.dim = bs->dims;
	format.metric = bs->metric;
	bs->streaming = cagra_client_build_open(format, bs->params, &bs->stream);
}

/* Rows first .. first + count - 1 to the worker, unless the stream broke:
 * the build then goes on without it, and builds on the CPU. */
static void
cagra_stream_rows(CagraBuildState *bs, const float *vectors, uint64 first, uint64 count)
{
	if (!bs->streaming || bs->stream_failure[0] != '\0' || count == 0)
		return;
	(void) cagra_client_build_send(&bs->stream, first, (uint32) count, vectors, bs->stream_failure,
								   sizeof(bs->stream_failure));
}

/* The rows in memory not sent yet (a serial scan). */
static void
cagra_stream_arrays(CagraBuildState *bs)
{
	cagra_stream_rows(bs, bs->vectors + bs->streamed * bs->dims, bs->streamed, bs->n - bs->streamed);
	bs->streamed = bs->n;
}

/* ---- one row ---- */

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

/* `x` prepared into `out`; with float16 storage, ERROR unless it fits, and
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

/* ---- the serial scan ---- */

/* The spill's buffered rows to the files and the worker. */
static void
cagra_serial_spill_flush(CagraBuildState *bs)
{
	CagraRowBuffer *b = &bs->spill->buffer;
	uint64		first = bs->n - b->buffered;

	cagra_spill_write(bs->spill, b->vectors, b->tids, first, b->buffered);
	cagra_stream_rows(bs, b->vectors, first, b->buffered);
	bs->streamed = bs->n;
	b->buffered = 0;
}

/* Where row n goes: memory, or the spill's buffer once the rows outgrow
 * maintenance_work_mem; its TID goes to *tid. */
static float *
cagra_serial_slot(CagraBuildState *bs, ItemPointerData **tid)
{
	if (bs->spill == NULL && bs->n == bs->capacity && !cagra_build_fits(bs, bs->n + 1))
	{
		cagra_stream_arrays(bs);
		cagra_spill_start(bs);
	}
	if (bs->spill)
	{
		CagraRowBuffer *b = &bs->spill->buffer;

		if (b->buffered == b->rows)
			cagra_serial_spill_flush(bs);
		*tid = &b->tids[b->buffered];
		return b->vectors + (Size) b->buffered++ * bs->dims;
	}
	if (bs->n == bs->capacity)
	{
		uint64		fits = (uint64) (bs->mem_limit / cagra_build_bytes_per_node(bs));
		uint64		cap = Min(Max(Max(bs->capacity * 2, (uint64) 1024), bs->expected), fits);

		cap = Max(cap, bs->n + 1);
		bs->vectors = (float *) repalloc_huge(bs->vectors, cap * bs->dims * sizeof(float));
		bs->tids = (ItemPointerData *) repalloc_huge(bs->tids, cap * sizeof(ItemPointerData));
		bs->capacity = cap;
	}
	*tid = &bs->tids[bs->n];
	return bs->vectors + bs->n * bs->dims;
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
		ItemPointerData *slot_tid;

		if (bs->n == 0)
			cagra_build_stream_open(bs);

		float	   *slot = cagra_serial_slot(bs, &slot_tid);

		cagra_store_row(index, format, x, slot, &bs->max_norm);
		*slot_tid = *tid;
		bs->n++;
		if (bs->streaming && bs->spill == NULL && bs->n - bs->streamed >= cagra_build_stream_rows(bs->dims))
			cagra_stream_arrays(bs);
		if ((bs->n & 1023) == 0)
			pgstat_progress_update_param(PROGRESS_CREATEIDX_TUPLES_DONE, (int64) bs->n);
	}
	MemoryContextSwitchTo(old);
	MemoryContextReset(bs->tuple_cxt);
}

/* The end of a serial scan: the last rows to the files and the worker,
 * whose answer to them is awaited. */
static void
cagra_serial_scan_end(CagraBuildState *bs)
{
	cagra_build_note_memory(bs, 0);
	if (bs->spill)
	{
		cagra_serial_spill_flush(bs);
		cagra_spill_map(bs, bs->spill);
	}
	else
		cagra_stream_arrays(bs);
	if (bs->streaming && bs->stream_failure[0] == '\0')
		(void) cagra_client_build_flush(bs->stream_failure, sizeof(bs->stream_failure));
}

/*
 * ---- the heap scan in parallel ----
 *
 * With parallel maintenance workers (plan_create_index_workers), a known
 * number of dimensions and statistics for the table, the leader and the
 * workers scan the heap together (a parallel table scan, as nbtree's
 * parallel build does).  Each prepares its rows into a buffer of one
 * stream chunk; a full buffer takes the next node ids from a shared
 * counter, goes to those slots of one dynamic shared memory segment of
 * vectors and TIDs, sized for the table's estimated rows within
 * maintenance_work_mem (that segment then is the build's arrays), or, past
 * its end, to the same rows of two files of a shared file set, and to the
 * worker.  When rows went to the files the leader writes the segment's into
 * their first rows and maps them.  Buffers come in scan order per
 * participant, so node ids follow no particular order (nothing depends on
 * it).
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
	pg_atomic_uint64 next;		/* node ids handed out; past capacity: in the files */
	SharedFileSet files;		/* CAGRA_SPILL_VECTORS and CAGRA_SPILL_TIDS */
	bool		streaming;		/* `stream` is open */
	CagraBuildStream stream;
	slock_t		mutex;			/* protects what follows */
	char		stream_failure[256];	/* empty while the stream works */
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
	float	   *vectors;		/* the rows segment's */
	ItemPointerData *tids;
	CagraRowBuffer buffer;
	CagraSpill *spill;			/* opened at its first row beyond the segment */
	cagra::VectorFormat format;
	uint64		skipped;
	double		max_norm;
	MemoryContext cxt;			/* the participant's */
	MemoryContext tuple_cxt;
	bool		leader;
} CagraParallelScan;

/* Whether a participant's chunk failed: the others then send no more. */
static bool
cagra_parallel_stream_failed(CagraParallelBuild *shared)
{
	bool		failed;

	SpinLockAcquire(&shared->mutex);
	failed = shared->stream_failure[0] != '\0';
	SpinLockRelease(&shared->mutex);
	return failed;
}

static void
cagra_parallel_stream_fail(CagraParallelBuild *shared, const char *why)
{
	SpinLockAcquire(&shared->mutex);
	if (shared->stream_failure[0] == '\0')
		strlcpy(shared->stream_failure, why, sizeof(shared->stream_failure));
	SpinLockRelease(&shared->mutex);
}

/* The buffer's rows to the worker, unless a participant's chunk failed. */
static void
cagra_parallel_stream(CagraParallelScan *ps, uint64 first)
{
	CagraParallelBuild *shared = ps->shared;
	char		why[sizeof(shared->stream_failure)];

	if (shared->streaming && !cagra_parallel_stream_failed(shared) &&
		!cagra_client_build_send(&shared->stream, first, ps->buffer.buffered, ps->buffer.vectors, why, sizeof(why)))
		cagra_parallel_stream_fail(shared, why);
}

/* The end of a participant's stream: the answer to its last chunk. */
static void
cagra_parallel_stream_end(CagraParallelScan *ps)
{
	CagraParallelBuild *shared = ps->shared;
	char		why[sizeof(shared->stream_failure)];

	if (shared->streaming && !cagra_client_build_flush(why, sizeof(why)))
		cagra_parallel_stream_fail(shared, why);
}

/* The buffer's rows to the next node ids: the segment's slots, the files'
 * rows beyond them, and the worker. */
static void
cagra_parallel_flush(CagraParallelScan *ps)
{
	CagraParallelBuild *shared = ps->shared;
	CagraRowBuffer *b = &ps->buffer;
	uint32		dims = shared->dims;
	uint64		first = pg_atomic_fetch_add_u64(&shared->next, b->buffered);
	uint64		in_segment = first < shared->capacity ? Min(shared->capacity - first, (uint64) b->buffered) : 0;

	if (in_segment > 0)
	{
		memcpy(ps->vectors + first * dims, b->vectors, (Size) in_segment * dims * sizeof(float));
		memcpy(ps->tids + first, b->tids, (Size) in_segment * sizeof(ItemPointerData));
	}
	if (in_segment < b->buffered)
	{
		if (ps->spill == NULL)
			ps->spill = cagra_spill_open_shared(ps->cxt, shared);
		cagra_spill_write(ps->spill, b->vectors + in_segment * dims, b->tids + in_segment, first + in_segment,
						  b->buffered - in_segment);
	}
	cagra_parallel_stream(ps, first);
	if (ps->leader)
		pgstat_progress_update_param(PROGRESS_CREATEIDX_TUPLES_DONE, (int64) (first + b->buffered));
	b->buffered = 0;
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
		CagraRowBuffer *b = &ps->buffer;

		if (b->buffered == b->rows)
			cagra_parallel_flush(ps);
		cagra_store_row(index, ps->format, x, b->vectors + (Size) b->buffered * dims, &ps->max_norm);
		b->tids[b->buffered++] = *tid;
	}
	MemoryContextSwitchTo(old);
	MemoryContextReset(ps->tuple_cxt);
}

/* Scan this participant's share of the heap. */
static void
cagra_parallel_participate(CagraParallelBuild *shared, float *vectors, Relation heap, Relation index,
						   IndexInfo *indexInfo, bool leader)
{
	CagraParallelScan ps;

	ps.shared = shared;
	ps.vectors = vectors;
	ps.tids = vectors ? cagra_parallel_tids(shared, vectors) : NULL;
	ps.format = cagra::VectorFormat{(cagra::ElementType) shared->element, shared->dims,
									(cagra::Metric) shared->metric};
	ps.spill = NULL;
	ps.cxt = CurrentMemoryContext;
	ps.skipped = 0;
	ps.max_norm = 0;
	ps.leader = leader;
	ps.tuple_cxt = AllocSetContextCreate(CurrentMemoryContext, "cagra parallel build tuple",
										 ALLOCSET_DEFAULT_SIZES);
	cagra_row_buffer_init(&ps.buffer, ps.cxt, shared->dims);

	TableScanDesc scan = table_beginscan_parallel(heap, cagra_parallel_scan_desc(shared));
	double		reltuples = 0;

	PG_TRY();
	{
		reltuples = table_index_build_scan(heap, index, indexInfo, true, leader, cagra_parallel_callback, &ps,
										   scan);
		if (ps.buffer.buffered > 0)
			cagra_parallel_flush(&ps);
		cagra_parallel_stream_end(&ps);
	}
	PG_CATCH();
	{
		cagra_client_build_abandon();
		PG_RE_THROW();
	}
	PG_END_TRY();
	if (ps.spill)
	{
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

/*
 * The parallel workers PostgreSQL grants this build.  plan_create_index_workers
 * leaves each participant 32 MB of maintenance_work_mem, what a sort needs;
 * a participant here needs only its buffer of one chunk (the rows beyond the
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

/* The shared state of a parallel scan into a segment of `capacity` rows. */
static void
cagra_parallel_init_shared(CagraParallelBuild *shared, ParallelContext *pcxt, Relation heap,
						   IndexInfo *indexInfo, const CagraBuildState *bs, uint64 capacity,
						   dsm_segment *rows, Snapshot snapshot)
{
	shared->heaprelid = RelationGetRelid(heap);
	shared->indexrelid = RelationGetRelid(bs->index);
	shared->isconcurrent = indexInfo->ii_Concurrent;
	shared->halfvec = bs->halfvec;
	shared->dims = bs->dims;
	shared->metric = (uint32) bs->metric;
	shared->element = (uint32) bs->element;
	shared->capacity = capacity;
	shared->rows = rows ? dsm_segment_handle(rows) : DSM_HANDLE_INVALID;
	pg_atomic_init_u64(&shared->next, 0);
	SharedFileSetInit(&shared->files, pcxt->seg);
	FileClose(FileSetCreate(&shared->files.fs, CAGRA_SPILL_VECTORS));
	FileClose(FileSetCreate(&shared->files.fs, CAGRA_SPILL_TIDS));
	shared->streaming = bs->streaming;
	if (bs->streaming)
		shared->stream = bs->stream;
	SpinLockInit(&shared->mutex);
	shared->stream_failure[0] = '\0';
	shared->reltuples = 0;
	shared->skipped = 0;
	shared->max_norm = 0;
	table_parallelscan_initialize(heap, cagra_parallel_scan_desc(shared), snapshot);
}

/* The scan's rows as the build's arrays: the segment, or the files when
 * rows went there (the segment's first, then mapped: before the file set
 * goes with the parallel context). */
static void
cagra_parallel_collect(CagraParallelBuild *shared, dsm_segment *rows, CagraBuildState *bs)
{
	float	   *seg_vectors = rows ? (float *) dsm_segment_address(rows) : NULL;
	uint64		n = pg_atomic_read_u64(&shared->next);
	uint64		in_segment = Min(n, shared->capacity);

	bs->n = n;
	bs->skipped_zero = shared->skipped;
	bs->max_norm = shared->max_norm;
	strlcpy(bs->stream_failure, shared->stream_failure, sizeof(bs->stream_failure));
	if (n == in_segment)
	{
		bs->vectors = seg_vectors;
		bs->tids = seg_vectors ? cagra_parallel_tids(shared, seg_vectors) : NULL;
		bs->capacity = shared->capacity;
		bs->rows_seg = rows;
		return;
	}

	CagraSpill *sp = cagra_spill_open_shared(bs->cxt, shared);

	if (in_segment > 0)
		cagra_spill_write(sp, seg_vectors, cagra_parallel_tids(shared, seg_vectors), 0, in_segment);
	cagra_spill_map(bs, sp);
	if (rows)
		dsm_detach(rows);
}

/*
 * Scan the heap with parallel workers (see above).  false, with nothing
 * done, when a parallel scan does not apply: no workers to be had, the
 * dimensions unknown before the first row, or no statistics to size the
 * segment by.
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
	CagraParallelBuild *shared = (CagraParallelBuild *) shm_toc_allocate(pcxt->toc, shared_bytes);

	cagra_parallel_init_shared(shared, pcxt, heap, indexInfo, bs, capacity, rows, snapshot);
	shm_toc_insert(pcxt->toc, CAGRA_PARALLEL_KEY_SHARED, shared);

	LaunchParallelWorkers(pcxt);
	cagra_parallel_participate(shared, rows ? (float *) dsm_segment_address(rows) : NULL, heap, index, indexInfo,
							   true);
	WaitForParallelWorkersToFinish(pcxt);

	uint64		n = pg_atomic_read_u64(&shared->next);

	ereport(DEBUG1,
			(errmsg_internal("cagra build of \"%s\": heap scanned by %d parallel workers and the leader, %llu rows in a segment of %llu, %llu in files",
							 RelationGetRelationName(index), pcxt->nworkers_launched,
							 (unsigned long long) Min(n, capacity), (unsigned long long) capacity,
							 (unsigned long long) (n - Min(n, capacity)))));
	cagra_build_note_memory(bs, rows_bytes);
	cagra_parallel_collect(shared, rows, bs);
	*reltuples = shared->reltuples;

	DestroyParallelContext(pcxt);
	ExitParallelMode();
	if (IsMVCCSnapshot(snapshot))
		UnregisterSnapshot(snapshot);
	return true;
}

double
cagra_build_scan(Relation heap, Relation index, IndexInfo *indexInfo, CagraBuildState *bs)
{
	double		reltuples = 0;

	cagra_build_stream_open(bs);
	if (!cagra_parallel_heap_scan(heap, index, indexInfo, bs, &reltuples))
	{
		PG_TRY();
		{
			reltuples = table_index_build_scan(heap, index, indexInfo, true, true, cagra_build_callback, bs,
											   NULL);
			cagra_serial_scan_end(bs);
		}
		PG_CATCH();
		{
			cagra_client_build_abandon();
			PG_RE_THROW();
		}
		PG_END_TRY();
	}
	return reltuples;
}
