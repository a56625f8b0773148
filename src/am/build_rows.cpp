/*
 * build_rows.cpp — where a build keeps its rows (prepared vectors and heap
 * TIDs) within maintenance_work_mem: in memory while they fit, beyond it in
 * two temporary files (temp_tablespaces, counted by temp_file_limit,
 * removed at the end of the transaction) written through a buffer of a
 * megabyte at most, as sorts spill theirs; the graph build and the page writes
 * then read them through a read-only mapping.  While the host has room the
 * kernel keeps them in its page cache and the build runs at in-memory
 * speed; under pressure it reads them back instead of the build failing.
 * Every row is in the graph either way.
 */
#include "am/build_rows.h"

#include <sys/mman.h>
#include <sys/statvfs.h>

extern "C" {
#include "commands/tablespace.h"
#include "miscadmin.h"
#include "storage/dsm_impl.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/wait_event.h"
}

/* Bytes the build needs per indexed vector: the vector, its TID, the kNN
 * graph (ids and distances) and the working copies of the final graph. */
double
cagra_build_bytes_per_node(const CagraBuildState *bs)
{
	return (double) bs->dims * sizeof(float) + sizeof(ItemPointerData) +
		(double) bs->params.intermediate_degree * 2 * (sizeof(uint32) + sizeof(float)) +
		(double) bs->params.graph_degree * 3 * sizeof(uint32);
}

/* Whether n vectors fit the build's memory (maintenance_work_mem). */
bool
cagra_build_fits(const CagraBuildState *bs, uint64 n)
{
	return cagra_build_bytes_per_node(bs) * (double) n <= bs->mem_limit;
}

/* Raise the peak of what the scan holds: the build context's memory and
 * `beside` it (a rows segment). */
void
cagra_build_note_memory(CagraBuildState *bs, Size beside)
{
	bs->peak_bytes = Max(bs->peak_bytes, MemoryContextMemAllocated(bs->cxt, true) + beside);
}

/* A buffer of one chunk of the worker's stream (cagra_build_stream_rows),
 * or of a quarter of maintenance_work_mem when that is less. */
void
cagra_row_buffer_init(CagraRowBuffer *b, MemoryContext cxt, uint32 dims)
{
	Size		row_bytes = (Size) dims * sizeof(float) + sizeof(ItemPointerData);
	Size		quarter = (Size) maintenance_work_mem * 1024 / 4;

	b->rows = (uint32) Max(Min((Size) cagra_build_stream_rows(dims), quarter / row_bytes), (Size) 1);
	b->buffered = 0;
	b->vectors = (float *) MemoryContextAlloc(cxt, (Size) b->rows * dims * sizeof(float));
	b->tids = (ItemPointerData *) MemoryContextAlloc(cxt, (Size) b->rows * sizeof(ItemPointerData));
}

/* In `cxt`: the heap scan's callbacks run in a context reset at each row. */
CagraSpill *
cagra_spill_new(MemoryContext cxt, File vectors, File tids, uint32 dims)
{
	CagraSpill *sp = (CagraSpill *) MemoryContextAllocZero(cxt, sizeof(CagraSpill));

	sp->vectors = vectors;
	sp->tids = tids;
	sp->vector_bytes = (Size) dims * sizeof(float);
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
void
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
void
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
void
cagra_spill_start(CagraBuildState *bs)
{
	PrepareTempTablespaces();

	CagraSpill *sp = cagra_spill_new(bs->cxt, OpenTemporaryFile(false), OpenTemporaryFile(false), bs->dims);

	cagra_row_buffer_init(&sp->buffer, bs->cxt, bs->dims);
	cagra_build_note_memory(bs, 0);
	cagra_spill_write(sp, bs->vectors, bs->tids, 0, bs->n);
	pfree(bs->vectors);
	pfree(bs->tids);
	bs->vectors = NULL;
	bs->tids = NULL;
	bs->capacity = 0;
	bs->spill = sp;
}

/* Whether a segment of `bytes` can be had: POSIX shared memory lives in
 * /dev/shm, whose size is often small in containers, and a segment that
 * does not fit there fails with an ERROR rather than a NULL. */
bool
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
