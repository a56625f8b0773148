/*
 * storage.cpp — the page format of a cagra index: layout arithmetic, the
 * meta page, node pages, and the helpers that connect C++ code to
 * PostgreSQL (status reporting, owned C++ objects, guarded buffer reads).
 */
#include "am/cagra_am.h"

#include "core/distance.h"

#include <cmath>
#include <cstdarg>
#include <cstring>

extern "C" {
#include "miscadmin.h"
#include "storage/lmgr.h"
#include "utils/memutils.h"
}

void
cagra_compute_layout(CagraMetaData *meta)
{
	uint64		size = cagra_vector_offset(meta->graph_degree) + (uint64) cagra_format_of(meta).vector_bytes();

	meta->record_size = (uint32) size;
	if (size <= CAGRA_PAGE_USABLE)
	{
		meta->nodes_per_page = (uint32) (CAGRA_PAGE_USABLE / size);
		meta->pages_per_node = 1;
	}
	else
	{
		meta->nodes_per_page = 1;
		meta->pages_per_node = (uint32) ((size + CAGRA_PAGE_USABLE - 1) / CAGRA_PAGE_USABLE);
	}
}

BlockNumber
cagra_blocks_for(const CagraMetaData *meta, uint32 n)
{
	if (n == 0 || meta->dims == 0)
		return 1;
	uint64		groups = ((uint64) n + meta->nodes_per_page - 1) / meta->nodes_per_page;

	return (BlockNumber) (1 + groups * meta->pages_per_node);
}

uint32
cagra_page_lower(const CagraMetaData *meta, uint32 page_in_group)
{
	uint64		group_bytes = (uint64) meta->nodes_per_page * meta->record_size;
	uint64		before = (uint64) page_in_group * CAGRA_PAGE_USABLE;
	uint64		used = group_bytes - before;

	if (used > CAGRA_PAGE_USABLE)
		used = CAGRA_PAGE_USABLE;
	return (uint32) (CAGRA_PAGE_DATA_START + used);
}

CagraMetaData *
cagra_meta_of(Page page)
{
	return (CagraMetaData *) PageGetContents(page);
}

void
cagra_init_meta_page(Page page, const CagraMetaData *meta)
{
	PageInit(page, BLCKSZ, 0);
	memcpy(cagra_meta_of(page), meta, sizeof(CagraMetaData));
	/* pd_lower past the meta data, so full-page images keep it */
	((PageHeader) page)->pd_lower = ((char *) cagra_meta_of(page) + sizeof(CagraMetaData)) - (char *) page;
}

void
cagra_init_node_page(Page page, const CagraMetaData *meta, BlockNumber blkno)
{
	PageInit(page, BLCKSZ, 0);
	((PageHeader) page)->pd_lower = cagra_page_lower(meta, (blkno - 1) % meta->pages_per_node);
}

/* A problem for the report, formatted. */
static void
cagra_meta_problem(CagraMetaProblemFn report, void *arg, bool fatal, const char *fmt,...)
pg_attribute_printf(4, 5);

static void
cagra_meta_problem(CagraMetaProblemFn report, void *arg, bool fatal, const char *fmt,...)
{
	char		buf[512];
	va_list		args;

	va_start(args, fmt);
	vsnprintf(buf, sizeof(buf), fmt, args);
	va_end(args);
	report(arg, fatal, buf);
}

bool
cagra_validate_meta(const CagraMetaData *meta, BlockNumber nblocks, CagraMetaProblemFn report,
					void *arg)
{
	if (meta->magic != CAGRA_MAGIC)
	{
		cagra_meta_problem(report, arg, true, "meta page: bad magic number %08x", meta->magic);
		return false;
	}
	if (meta->version != CAGRA_FORMAT_VERSION)
	{
		cagra_meta_problem(report, arg, true, "meta page: format version %u, expected %d",
						   meta->version, CAGRA_FORMAT_VERSION);
		return false;
	}
	if (!cagra::metric_is_valid(meta->metric))
	{
		cagra_meta_problem(report, arg, true, "meta page: unknown metric %u", meta->metric);
		return false;
	}
	if (meta->graph_degree < CAGRA_MIN_DEGREE || meta->graph_degree > CAGRA_MAX_DEGREE)
	{
		cagra_meta_problem(report, arg, true, "meta page: graph_degree %u out of range", meta->graph_degree);
		return false;
	}
	if (meta->dims > cagra::kMaxDim)
	{
		cagra_meta_problem(report, arg, true, "meta page: %u dimensions, more than %u", meta->dims,
						   cagra::kMaxDim);
		return false;
	}
	if (meta->dims == 0 && meta->n != 0)
	{
		cagra_meta_problem(report, arg, true, "meta page: %u nodes but no dimensions", meta->n);
		return false;
	}
	if (meta->dims != 0)
	{
		CagraMetaData expect = *meta;

		cagra_compute_layout(&expect);
		if (expect.record_size != meta->record_size || expect.nodes_per_page != meta->nodes_per_page ||
			expect.pages_per_node != meta->pages_per_node)
		{
			cagra_meta_problem(report, arg, true,
							   "meta page: layout %u bytes, %u nodes per page, %u pages per node does not match %u dimensions and degree %u",
							   meta->record_size, meta->nodes_per_page, meta->pages_per_node, meta->dims,
							   meta->graph_degree);
			return false;
		}
	}
	if (meta->entry_count > CAGRA_MAX_ENTRY_NODES)
	{
		cagra_meta_problem(report, arg, true, "meta page: %u entry nodes, at most %d", meta->entry_count,
						   CAGRA_MAX_ENTRY_NODES);
		return false;
	}

	bool		ok = true;

	for (uint32 i = 0; i < meta->entry_count; i++)
		if (meta->entries[i] >= meta->n)
		{
			cagra_meta_problem(report, arg, true, "meta page: entry node %u out of range (%u nodes)",
							   meta->entries[i], meta->n);
			ok = false;
		}
	if (!ok)
		return false;
	if (cagra_blocks_for(meta, meta->n) > nblocks)
	{
		cagra_meta_problem(report, arg, true, "index has %u blocks, %u nodes need %u", nblocks, meta->n,
						   cagra_blocks_for(meta, meta->n));
		return false;
	}
	if (meta->live > meta->n)
		cagra_meta_problem(report, arg, false, "meta page: live count %u is greater than node count %u",
						   meta->live, meta->n);
	return true;
}

typedef struct CagraMetaError
{
	Relation	index;
	const CagraMetaData *meta;
} CagraMetaError;

static void
cagra_meta_error(void *arg, bool fatal, const char *problem)
{
	CagraMetaError *e = (CagraMetaError *) arg;

	if (!fatal)
		return;
	if (e->meta->magic != CAGRA_MAGIC)
		ereport(ERROR,
				(errcode(ERRCODE_INDEX_CORRUPTED),
				 errmsg("index \"%s\" is not a cagra index (bad magic number)",
						RelationGetRelationName(e->index)),
				 errhint("REINDEX the index.")));
	if (e->meta->version != CAGRA_FORMAT_VERSION)
		ereport(ERROR,
				(errcode(ERRCODE_INDEX_CORRUPTED),
				 errmsg("index \"%s\" has format version %u, this build reads version %d",
						RelationGetRelationName(e->index), e->meta->version, CAGRA_FORMAT_VERSION),
				 errhint("REINDEX the index.")));
	ereport(ERROR,
			(errcode(ERRCODE_INDEX_CORRUPTED),
			 errmsg("cagra index \"%s\" is corrupted: %s", RelationGetRelationName(e->index), problem),
			 errhint("REINDEX the index.")));
}

void
cagra_check_meta(Relation index, const CagraMetaData *meta)
{
	CagraMetaError e = {index, meta};

	/* the node count only grows (deleted slots are not reused, the index
	 * never shrinks), so blocks counted after the meta page was read hold
	 * at least its nodes */
	cagra_validate_meta(meta, RelationGetNumberOfBlocks(index), cagra_meta_error, &e);
}

void
cagra_read_meta(Relation index, CagraMetaData *out)
{
	Buffer		buf = ReadBuffer(index, CAGRA_METAPAGE_BLKNO);

	LockBuffer(buf, BUFFER_LOCK_SHARE);
	memcpy(out, cagra_meta_of(BufferGetPage(buf)), sizeof(CagraMetaData));
	UnlockReleaseBuffer(buf);
	cagra_check_meta(index, out);
}

void
cagra_write_meta(Relation index, Buffer metabuf, const CagraMetaData *meta)
{
	GenericXLogState *state = GenericXLogStart(index);
	Page		page = GenericXLogRegisterBuffer(state, metabuf, 0);

	memcpy(cagra_meta_of(page), meta, sizeof(CagraMetaData));
	GenericXLogFinish(state);
}

void
cagra_read_record_bytes(Relation index, const CagraMetaData *meta, uint32 id,
						uint32 offset, uint32 len, void *dst)
{
	char	   *out = (char *) dst;

	while (len > 0)
	{
		BlockNumber blkno;
		uint32		poff;

		cagra_locate(meta, id, offset, &blkno, &poff);
		uint32		chunk = Min(len, BLCKSZ - poff);
		Buffer		buf = ReadBuffer(index, blkno);

		LockBuffer(buf, BUFFER_LOCK_SHARE);
		memcpy(out, (char *) BufferGetPage(buf) + poff, chunk);
		UnlockReleaseBuffer(buf);
		out += chunk;
		offset += chunk;
		len -= chunk;
	}
}

/* ---- vectors ---- */

void
cagra_check_dims(Relation index, uint32 expected, int actual)
{
	if ((int) expected != actual)
		ereport(ERROR,
				(errcode(ERRCODE_DATA_EXCEPTION),
				 errmsg("expected %u dimensions, not %d", expected, actual),
				 errdetail("Index \"%s\" holds vectors of %u dimensions.",
						   RelationGetRelationName(index), expected)));
}

bool
cagra_is_zero_vector(const float *x, int dims)
{
	for (int i = 0; i < dims; i++)
		if (x[i] != 0.0f)
			return false;
	return true;
}

bool
cagra_vector_unindexable(cagra::Metric metric, const float *x, int dims)
{
	if (metric != cagra::Metric::Cosine)
		return false;
	return cagra_is_zero_vector(x, dims) || !std::isfinite(cagra::inner_product(x, x, (uint32) dims));
}

void
cagra_prepare(cagra::Metric metric, const float *in, float *out, uint32 dims)
{
	cagra_guard_or_error([&] { cagra::prepare_vector(metric, in, out, dims); });
}

/* ---- insert lock ---- */

void
cagra_lock_writers(Relation index, LOCKMODE mode)
{
	LockPage(index, CAGRA_METAPAGE_BLKNO, mode);
}

void
cagra_unlock_writers(Relation index, LOCKMODE mode)
{
	UnlockPage(index, CAGRA_METAPAGE_BLKNO, mode);
}

/*
 * A buffer read and lock that turns a PostgreSQL error into a C++ exception,
 * so that it unwinds the C++ frames above (the core searcher) before being
 * re-thrown at the boundary.  This frame holds no C++ object.
 */
Buffer
cagra_read_locked_buffer(Relation index, BlockNumber blkno, int mode, Buffer *hint)
{
	MemoryContext cxt = CurrentMemoryContext;
	volatile Buffer buf = InvalidBuffer;
	ErrorData  *volatile edata = NULL;

	PG_TRY();
	{
		buf = cagra_pin_hinted(index, blkno, hint);
		if (mode != BUFFER_LOCK_UNLOCK)
			LockBuffer(buf, mode);
	}
	PG_CATCH();
	{
		MemoryContextSwitchTo(cxt);
		edata = CopyErrorData();
		FlushErrorState();
	}
	PG_END_TRY();
	if (edata)
		throw CagraPgError{edata};
	return buf;
}

Buffer
cagra_pin_hinted(Relation rel, BlockNumber blkno, Buffer *hint)
{
	Buffer		buf;

	/* a buffer that held the block before can be pinned without a lookup in
	 * the shared buffer mapping table */
	if (hint && *hint != InvalidBuffer && ReadRecentBuffer(rel->rd_node, MAIN_FORKNUM, blkno, *hint))
		return *hint;
	buf = ReadBuffer(rel, blkno);
	if (hint)
		*hint = buf;
	return buf;
}

Buffer *
cagra_hint_for(CagraBufferHints *h, Relation rel, BlockNumber blkno, BlockNumber nblocks)
{
	if (!h->hints || !RelFileNodeEquals(h->node, rel->rd_node) || h->size < nblocks)
	{
		/* room to grow, so that a relation growing between searches does
		 * not cost an allocation each time */
		BlockNumber size = Max(nblocks + nblocks / 4, (BlockNumber) 64);
		Buffer	   *fresh = (Buffer *) MemoryContextAllocExtended(TopMemoryContext, size * sizeof(Buffer),
																  MCXT_ALLOC_HUGE | MCXT_ALLOC_NO_OOM |
																  MCXT_ALLOC_ZERO);

		if (fresh == NULL)
			return NULL;
		if (h->hints && RelFileNodeEquals(h->node, rel->rd_node))
			memcpy(fresh, h->hints, Min(h->size, size) * sizeof(Buffer));
		if (h->hints)
			pfree(h->hints);
		h->hints = fresh;
		h->size = size;
		h->node = rel->rd_node;
	}
	return blkno < h->size ? &h->hints[blkno] : NULL;
}

/* A search touches hundreds of pages spread over the index, and looking
 * each up in the shared buffer mapping table is a large part of its cost.
 * One index at a time; rebuilt indexes have a new relfilenode and start
 * over. */
static CagraBufferHints cagra_index_hints;

Buffer *
cagra_buffer_hint(Relation index, BlockNumber blkno, BlockNumber nblocks)
{
	return cagra_hint_for(&cagra_index_hints, index, blkno, nblocks);
}

/* ---- generic WAL batches ---- */

void
cagra_batch_begin(CagraWalBatch *b, Relation index, const CagraMetaData *meta)
{
	memset(b, 0, sizeof(*b));
	b->index = index;
	b->meta = meta;
}

void
cagra_batch_finish(CagraWalBatch *b)
{
	if (b->nbufs == 0)
		return;
	GenericXLogFinish(b->state);
	for (int i = 0; i < b->nbufs; i++)
		UnlockReleaseBuffer(b->bufs[i]);
	b->nbufs = 0;
	b->state = NULL;
}

/* A new block at the end of the index (blocks are only ever appended one by
 * one, so it is `blkno`). */
static Buffer
cagra_extend(Relation index, BlockNumber blkno)
{
	LockRelationForExtension(index, ExclusiveLock);
	Buffer		buf = ReadBufferExtended(index, MAIN_FORKNUM, P_NEW, RBM_NORMAL, NULL);

	UnlockRelationForExtension(index, ExclusiveLock);
	if (BufferGetBlockNumber(buf) != blkno)
		elog(ERROR, "cagra index \"%s\" extended to block %u, expected block %u",
			 RelationGetRelationName(index), BufferGetBlockNumber(buf), blkno);
	return buf;
}

Page
cagra_batch_page(CagraWalBatch *b, BlockNumber blkno)
{
	for (int i = 0; i < b->nbufs; i++)
		if (BufferGetBlockNumber(b->bufs[i]) == blkno)
			return b->pages[i];
	if (b->nbufs == MAX_GENERIC_XLOG_PAGES)
		cagra_batch_finish(b);
	if (b->nbufs == 0)
		b->state = GenericXLogStart(b->index);

	Buffer		buf;

	if (blkno >= RelationGetNumberOfBlocks(b->index))
		buf = cagra_extend(b->index, blkno);
	else
		buf = ReadBuffer(b->index, blkno);
	LockBuffer(buf, BUFFER_LOCK_EXCLUSIVE);

	bool		fresh = PageIsNew(BufferGetPage(buf));
	Page		page = GenericXLogRegisterBuffer(b->state, buf, fresh ? GENERIC_XLOG_FULL_IMAGE : 0);

	if (fresh)
		cagra_init_node_page(page, b->meta, blkno);
	b->bufs[b->nbufs] = buf;
	b->pages[b->nbufs] = page;
	b->nbufs++;
	return page;
}

void
cagra_batch_write(CagraWalBatch *b, uint32 id, uint32 offset, const void *src, uint32 len)
{
	const char *in = (const char *) src;

	while (len > 0)
	{
		BlockNumber blkno;
		uint32		poff;

		cagra_locate(b->meta, id, offset, &blkno, &poff);
		uint32		chunk = Min(len, BLCKSZ - poff);
		Page		page = cagra_batch_page(b, blkno);

		memcpy((char *) page + poff, in, chunk);
		in += chunk;
		offset += chunk;
		len -= chunk;
	}
}
