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
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
}

/*
 * The layout (docs/storage.md): groups of k nodes over p pages; in a group
 * the header+rows first, then the vectors.  Rows are aligned (no row
 * crosses a page; the tails of full row pages hold vector bytes) unless no
 * group of at most CAGRA_MAX_GROUP_PAGES pages leaves less than 3% unused
 * that way (very large degrees with small vectors: a page holds only one
 * or two rows); then rows are packed back to back at a stride of a multiple
 * of 8 bytes, so a header never crosses a page but a row may.  The smallest
 * p that leaves less than 3% of the group unused wins; failing that, the
 * least unused share.
 */
void
cagra_compute_layout(CagraMetaData *meta)
{
	const uint64 usable = CAGRA_PAGE_USABLE;
	uint64		r = cagra_vector_offset(meta->graph_degree);
	uint64		v = cagra_format_of(meta).vector_bytes();
	uint64		rpp = usable / r;
	uint64		packed_stride = TYPEALIGN(8, r);
	uint64		best_k = 0,
				best_p = 1,
				best_unused = 0;
	bool		best_packed = false,
				found = false;

	meta->record_size = (uint32) (r + v);
	for (int packed = 0; packed < 2 && !found; packed++)
		for (uint64 p = 1; p <= CAGRA_MAX_GROUP_PAGES; p++)
		{
			uint64		cap = p * usable;
			uint64		k = packed ? cap / (packed_stride + v) : Min(cap / (r + v), p * rpp);

			if (k == 0)
				continue;

			uint64		unused = cap - k * (r + v);

			/* unused / cap < best_unused / (best_p * usable) */
			if (best_k == 0 || unused * best_p < best_unused * p)
			{
				best_k = k;
				best_p = p;
				best_unused = unused;
				best_packed = packed;
			}
			if (unused * 100 < cap * 3)
			{
				found = true;
				break;
			}
		}

	meta->nodes_per_group = (uint32) best_k;
	meta->pages_per_group = (uint32) best_p;
	if (best_packed)
	{
		meta->row_stride = (uint32) packed_stride;
		meta->rows_per_page = (uint32) best_k;
		meta->tail_bytes = 0;
		meta->hole_bytes = 0;
		meta->vector_start = (uint32) (best_k * packed_stride);
	}
	else
	{
		uint64		row_pages = (best_k + rpp - 1) / rpp;

		meta->row_stride = (uint32) r;
		meta->rows_per_page = (uint32) rpp;
		meta->tail_bytes = (uint32) (usable - rpp * r);
		meta->hole_bytes = (uint32) ((row_pages - 1) * meta->tail_bytes);
		meta->vector_start = (uint32) ((row_pages - 1) * usable + (best_k - (row_pages - 1) * rpp) * r);
	}
}

/* One past the group position of the last byte of node j-th in its group
 * (its row or its vector, whichever comes later). */
static uint64
cagra_node_end(const CagraMetaData *meta, uint32 j)
{
	uint32		voff = cagra_vector_offset(meta->graph_degree);

	return Max(cagra_group_position(meta, j, voff - 1), cagra_group_position(meta, j, meta->record_size - 1)) + 1;
}

BlockNumber
cagra_blocks_for(const CagraMetaData *meta, uint32 n)
{
	if (n == 0 || meta->dims == 0)
		return 1;

	uint64		group = (n - 1) / meta->nodes_per_group;
	uint64		end = cagra_node_end(meta, (n - 1) % meta->nodes_per_group);

	return (BlockNumber) (1 + group * meta->pages_per_group + (end + CAGRA_PAGE_USABLE - 1) / CAGRA_PAGE_USABLE);
}

uint32
cagra_page_lower(const CagraMetaData *meta, uint32 page_in_group)
{
	uint64		end = cagra_node_end(meta, meta->nodes_per_group - 1);
	uint64		before = (uint64) page_in_group * CAGRA_PAGE_USABLE;
	uint64		used = end > before ? end - before : 0;

	if (used > CAGRA_PAGE_USABLE)
		used = CAGRA_PAGE_USABLE;
	return (uint32) (CAGRA_PAGE_DATA_START + used);
}

/* The next piece of a record range: `len` bytes from `offset`, at group
 * position `pos`, cut at the page's end and where the vector starts. */
static inline uint32
cagra_piece(const CagraMetaData *meta, uint32 offset, uint32 len, uint64 pos)
{
	uint32		voff = cagra_vector_offset(meta->graph_degree);
	uint32		chunk = Min(len, (uint32) (CAGRA_PAGE_USABLE - pos % CAGRA_PAGE_USABLE));

	if (offset < voff)
		chunk = Min(chunk, voff - offset);
	return chunk;
}

void
cagra_group_copy_out(const CagraMetaData *meta, const char *group, uint32 j, uint32 offset, uint32 len,
					 void *dst)
{
	char	   *out = (char *) dst;

	while (len > 0)
	{
		uint64		pos = cagra_group_position(meta, j, offset);
		uint32		chunk = cagra_piece(meta, offset, len, pos);

		memcpy(out, group + pos, chunk);
		out += chunk;
		offset += chunk;
		len -= chunk;
	}
}

void
cagra_group_copy_in(const CagraMetaData *meta, char *group, uint32 j, uint32 offset, const void *src,
					uint32 len)
{
	const char *in = (const char *) src;

	while (len > 0)
	{
		uint64		pos = cagra_group_position(meta, j, offset);
		uint32		chunk = cagra_piece(meta, offset, len, pos);

		memcpy(group + pos, in, chunk);
		in += chunk;
		offset += chunk;
		len -= chunk;
	}
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
	((PageHeader) page)->pd_lower = cagra_page_lower(meta, (blkno - 1) % meta->pages_per_group);
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

/* Whether the meta page is one of this format: magic, version, metric and
 * element type known. */
static bool
cagra_meta_format_known(const CagraMetaData *meta, CagraMetaProblemFn report, void *arg)
{
	if (meta->magic != CAGRA_MAGIC)
	{
		cagra_meta_problem(report, arg, true, "meta page: bad magic number %08x", meta->magic);
		return false;
	}
	if (meta->version >= 1 && meta->version < CAGRA_FORMAT_VERSION)
	{
		cagra_meta_problem(report, arg, true,
						   "meta page: on-disk format %u, this version of cagra reads format %d (REINDEX the index)",
						   meta->version, CAGRA_FORMAT_VERSION);
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
	if (!cagra::element_type_is_valid(meta->element_type))
	{
		cagra_meta_problem(report, arg, true, "meta page: unknown element type %u", meta->element_type);
		return false;
	}
	return true;
}

/* Whether the degree, dimensions, layout and entry nodes place every node
 * within the index's blocks. */
static bool
cagra_meta_layout_valid(const CagraMetaData *meta, BlockNumber nblocks, CagraMetaProblemFn report,
						void *arg)
{
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
		if (expect.record_size != meta->record_size || expect.nodes_per_group != meta->nodes_per_group ||
			expect.pages_per_group != meta->pages_per_group || expect.row_stride != meta->row_stride ||
			expect.rows_per_page != meta->rows_per_page || expect.tail_bytes != meta->tail_bytes ||
			expect.hole_bytes != meta->hole_bytes || expect.vector_start != meta->vector_start)
		{
			cagra_meta_problem(report, arg, true,
							   "meta page: layout (%u bytes a node, %u nodes in %u pages, rows %u apart, %u a page, vectors from %u, %u in %u-byte tails) does not match %u dimensions and degree %u",
							   meta->record_size, meta->nodes_per_group, meta->pages_per_group,
							   meta->row_stride, meta->rows_per_page, meta->vector_start, meta->hole_bytes,
							   meta->tail_bytes, meta->dims, meta->graph_degree);
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
	return true;
}

/*
 * Fields that do not place the nodes, so the pages stay readable (the check
 * goes on), but scans, inserts and the worker's copies use them: out of
 * their limits they stop every reader, with this problem named, rather than
 * with a confusing error of their own or a wrong answer.
 */
static void
cagra_check_meta_search_fields(const CagraMetaData *meta, CagraMetaProblemFn report, void *arg)
{
	if (meta->search_itopk > cagra::kMaxItopk)
		cagra_meta_problem(report, arg, true, "meta page: search_itopk %u out of range (0 to %u)",
						   meta->search_itopk, cagra::kMaxItopk);
	if (meta->search_probes > cagra::kMaxStoredEntries)
		cagra_meta_problem(report, arg, true, "meta page: search_probes %u out of range (0 to %u)",
						   meta->search_probes, cagra::kMaxStoredEntries);
	if (!std::isfinite(meta->max_norm) || meta->max_norm < 0)
		cagra_meta_problem(report, arg, true, "meta page: max_norm %g is not a finite non-negative number",
						   (double) meta->max_norm);
	if (meta->unlinked > meta->n)
		cagra_meta_problem(report, arg, true, "meta page: %u unlinked nodes of %u", meta->unlinked, meta->n);
	for (uint64 r = meta->reused > CAGRA_REUSE_LOG ? meta->reused - CAGRA_REUSE_LOG : 0; r < meta->reused; r++)
		if (meta->reuse_log[r % CAGRA_REUSE_LOG] >= meta->n)
		{
			cagra_meta_problem(report, arg, true, "meta page: reused slot %u out of range (%u nodes)",
							   meta->reuse_log[r % CAGRA_REUSE_LOG], meta->n);
			break;
		}
}

/* What the build recorded and the insert cursor: the check reports them,
 * readers do not depend on them. */
static void
cagra_check_meta_build_record(const CagraMetaData *meta, CagraMetaProblemFn report, void *arg)
{
	if (meta->intermediate_degree < meta->graph_degree || meta->intermediate_degree > CAGRA_MAX_INTERMEDIATE_DEGREE)
		cagra_meta_problem(report, arg, false,
						   "meta page: intermediate_graph_degree %u out of range (%u, the graph degree, to %u)",
						   meta->intermediate_degree, meta->graph_degree, CAGRA_MAX_INTERMEDIATE_DEGREE);
	if (meta->build_device != CAGRA_DEVICE_CPU && meta->build_device != CAGRA_DEVICE_GPU)
		cagra_meta_problem(report, arg, false, "meta page: unknown build device %u", meta->build_device);
	if (meta->build_flags & ~CAGRA_BUILT_LONG_EDGES)
		cagra_meta_problem(report, arg, false, "meta page: unknown build flags %04x", meta->build_flags);
	if (meta->reuse_next > meta->n)
		cagra_meta_problem(report, arg, false, "meta page: reuse cursor %u beyond the %u nodes",
						   meta->reuse_next, meta->n);
}

bool
cagra_validate_meta(const CagraMetaData *meta, BlockNumber nblocks, CagraMetaProblemFn report,
					void *arg)
{
	if (!cagra_meta_format_known(meta, report, arg) || !cagra_meta_layout_valid(meta, nblocks, report, arg))
		return false;
	if (meta->live > meta->n)
		cagra_meta_problem(report, arg, false, "meta page: live count %u is greater than node count %u",
						   meta->live, meta->n);
	cagra_check_meta_search_fields(meta, report, arg);
	cagra_check_meta_build_record(meta, report, arg);
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
	if (e->meta->version >= 1 && e->meta->version < CAGRA_FORMAT_VERSION)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("index \"%s\" has on-disk format %u, this version of cagra reads format %d",
						RelationGetRelationName(e->index), e->meta->version, CAGRA_FORMAT_VERSION),
				 errdetail("Format %d stores the rows and the vectors of a node group apart.",
						   CAGRA_FORMAT_VERSION),
				 errhint("Rebuild it with REINDEX INDEX %s.",
						 quote_qualified_identifier(get_namespace_name(RelationGetNamespace(e->index)),
													RelationGetRelationName(e->index)))));
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

/*
 * The index's blocks, counted again only when fewer are known than `need`.
 * The index never shrinks while its file stays (TRUNCATE and REINDEX give
 * it a new one, and the relcache entry's rd_amcache goes with the old), so
 * a count seen once spares the scans after it a system call each.
 */
static BlockNumber
cagra_blocks_at_least(Relation index, BlockNumber need)
{
	BlockNumber *known = (BlockNumber *) index->rd_amcache;

	if (known && *known >= need)
		return *known;

	BlockNumber counted = RelationGetNumberOfBlocks(index);

	if (!known)
	{
		known = (BlockNumber *) MemoryContextAlloc(index->rd_indexcxt, sizeof(BlockNumber));
		index->rd_amcache = known;
	}
	*known = counted;
	return counted;
}

void
cagra_check_meta(Relation index, const CagraMetaData *meta)
{
	CagraMetaError e = {index, meta};

	/* the blocks a valid layout needs (validate_meta rejects any other
	 * layout before it compares the blocks) */
	BlockNumber need = meta->nodes_per_group != 0 ? cagra_blocks_for(meta, meta->n) : 1;

	/* the node count only grows (an insert takes a slot vacuum freed or
	 * appends one; the index never shrinks), so blocks counted after the
	 * meta page was read hold at least its nodes */
	cagra_validate_meta(meta, cagra_blocks_at_least(index, need), cagra_meta_error, &e);
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
cagra_meta_into_page(Page page, const CagraMetaData *meta)
{
	memcpy(cagra_meta_of(page), meta, sizeof(CagraMetaData));
	/* an index made before the meta data grew: cover it all */
	((PageHeader) page)->pd_lower = ((char *) cagra_meta_of(page) + sizeof(CagraMetaData)) - (char *) page;
}

void
cagra_write_meta(Relation index, Buffer metabuf, const CagraMetaData *meta)
{
	GenericXLogState *state = GenericXLogStart(index);

	cagra_meta_into_page(GenericXLogRegisterBuffer(state, metabuf, 0), meta);
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
		uint32		chunk = cagra_piece(meta, offset, len, poff - CAGRA_PAGE_DATA_START);
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
cagra_check_storable(Relation index, const cagra::VectorFormat &format, const float *prepared, const float *raw)
{
	uint32		i = format.first_unstorable(prepared);

	if (i < format.dim)
		ereport(ERROR,
				(errcode(ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE),
				 errmsg("value %g of element %u is out of range for index \"%s\" with storage = %s",
						raw[i], i + 1, RelationGetRelationName(index),
						cagra::element_type_name(format.element)),
				 errdetail("float16 holds magnitudes up to %g.", (double) cagra::kHalfMax),
				 errhint("Rebuild the index WITH (storage = float32).")));
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
	if (hint && *hint != InvalidBuffer && ReadRecentBuffer(CAGRA_REL_FILE_ID(rel), MAIN_FORKNUM, blkno, *hint))
		return *hint;
	buf = ReadBuffer(rel, blkno);
	if (hint)
		*hint = buf;
	return buf;
}

Buffer *
cagra_hint_for(CagraBufferHints *h, Relation rel, BlockNumber blkno, BlockNumber nblocks)
{
	if (!h->hints || !CAGRA_REL_FILE_ID_EQUALS(h->node, CAGRA_REL_FILE_ID(rel)) || h->size < nblocks)
	{
		/* room to grow, so that a relation growing between searches does
		 * not cost an allocation each time */
		BlockNumber size = Max(nblocks + nblocks / 4, (BlockNumber) 64);
		Buffer	   *fresh = (Buffer *) MemoryContextAllocExtended(TopMemoryContext, size * sizeof(Buffer),
																  MCXT_ALLOC_HUGE | MCXT_ALLOC_NO_OOM |
																  MCXT_ALLOC_ZERO);

		if (fresh == NULL)
			return NULL;
		if (h->hints && CAGRA_REL_FILE_ID_EQUALS(h->node, CAGRA_REL_FILE_ID(rel)))
			memcpy(fresh, h->hints, Min(h->size, size) * sizeof(Buffer));
		if (h->hints)
			pfree(h->hints);
		h->hints = fresh;
		h->size = size;
		h->node = CAGRA_REL_FILE_ID(rel);
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
	BlockNumber nblocks = RelationGetNumberOfBlocks(b->index);

	if (blkno >= nblocks)
	{
		/* pages of a group no byte has been written to yet (a row page of
		 * nodes still to come, the unused end of a group) stay new: all
		 * zeros, read by nobody, initialised when first written */
		for (; nblocks < blkno; nblocks++)
			ReleaseBuffer(cagra_extend(b->index, nblocks));
		buf = cagra_extend(b->index, blkno);
	}
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
cagra_batch_reserve(CagraWalBatch *b, uint32 id, uint32 offset, uint32 len)
{
	BlockNumber first,
				last;
	uint32		poff;
	int			need = 0;

	cagra_locate(b->meta, id, offset, &first, &poff);
	cagra_locate(b->meta, id, offset + len - 1, &last, &poff);
	for (BlockNumber blk = first; blk <= last; blk++)
	{
		bool		have = false;

		for (int i = 0; i < b->nbufs; i++)
			have |= BufferGetBlockNumber(b->bufs[i]) == blk;
		need += have ? 0 : 1;
	}
	if (b->nbufs + need > MAX_GENERIC_XLOG_PAGES)
		cagra_batch_finish(b);
}

void
cagra_batch_write(CagraWalBatch *b, uint32 id, uint32 offset, const void *src, uint32 len)
{
	const char *in = (const char *) src;
	uint32		voff = cagra_vector_offset(b->meta->graph_degree);

	/* a packed row may cross into the next page: both pages of the
	 * header/row part go into one WAL record */
	if (offset < voff && len > 0)
		cagra_batch_reserve(b, id, offset, Min(offset + len, voff) - offset);
	while (len > 0)
	{
		BlockNumber blkno;
		uint32		poff;

		cagra_locate(b->meta, id, offset, &blkno, &poff);
		uint32		chunk = cagra_piece(b->meta, offset, len, poff - CAGRA_PAGE_DATA_START);
		Page		page = cagra_batch_page(b, blkno);

		memcpy((char *) page + poff, in, chunk);
		in += chunk;
		offset += chunk;
		len -= chunk;
	}
}
