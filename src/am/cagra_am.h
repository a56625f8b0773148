/*
 * cagra_am.h — declarations shared by the files of the cagra index access
 * method: the on-disk format (meta page, node records), reloptions, GUCs,
 * and the C++/PostgreSQL boundary helpers.
 *
 * The page format is described in docs/storage.md.
 */
#pragma once

extern "C" {
#include "postgres.h"

#include "access/amapi.h"
#include "access/generic_xlog.h"
#include "access/reloptions.h"
#include "nodes/pathnodes.h"
#include "nodes/plannodes.h"
#include "storage/bufmgr.h"
#include "storage/bufpage.h"
#include "storage/itemptr.h"
#include "utils/rel.h"
}

#include "boundary/boundary.h"
#include "boundary/pg_compat.h"
#include "core/format.h"
#include "protocol/protocol.h"

/* ---- on-disk format ---- */

#define CAGRA_MAGIC 0xCA6A1DE5u
#define CAGRA_FORMAT_VERSION 2
#define CAGRA_METAPAGE_BLKNO 0
#define CAGRA_MAX_ENTRY_NODES cagra::kMaxStoredEntries

/* Node flags */
#define CAGRA_NODE_LIVE 0x0001
#define CAGRA_NODE_DELETED 0x0002
#define CAGRA_NODE_UNLINKED 0x0004	/* counted, but no edge leads to it yet */

/* Inserts that defer their linking link their nodes this many at a time:
 * the insert that counts the last node of such a run of ids links it.
 * Longer runs wait on the worker less often, but make longer batches and
 * leave more unlinked rows to every search (docs/benchmarks.md,
 * "Constants"). */
#define CAGRA_LINK_RUN 16

/* A linker (linker.cpp) links this many runs from one request for their
 * plans (docs/benchmarks.md, "Constants"). */
#define CAGRA_LINKER_RUNS 4

/* The storage reloption: auto is float16 for halfvec columns, float32 else. */
#define CAGRA_STORAGE_AUTO 0
#define CAGRA_STORAGE_FLOAT32 1
#define CAGRA_STORAGE_FLOAT16 2

/* Which device built the graph (also the build_device reloption values). */
#define CAGRA_DEVICE_AUTO 0
#define CAGRA_DEVICE_GPU 1
#define CAGRA_DEVICE_CPU 2

/* Reloption limits.  A row (8 + 4 * graph_degree bytes) always fits in the
 * first page of its node, so neighbour reads and edge updates touch one page. */
#define CAGRA_MIN_DEGREE cagra::kMinDegree
#define CAGRA_MAX_DEGREE cagra::kMaxDegree
#define CAGRA_MAX_INTERMEDIATE_DEGREE cagra::kMaxDegree
#define CAGRA_DEFAULT_DEGREE (cagra::BuildParams().graph_degree)
#define CAGRA_DEFAULT_INTERMEDIATE_DEGREE (cagra::BuildParams().intermediate_degree)

/* Meta page contents, right after the standard page header of block 0. */
typedef struct CagraMetaData
{
	uint32		magic;
	uint32		version;
	uint32		dims;			/* 0: not fixed yet (empty index on vector) */
	uint32		metric;			/* cagra::Metric */
	uint32		graph_degree;
	uint32		intermediate_degree;
	uint32		build_device;	/* CAGRA_DEVICE_CPU or CAGRA_DEVICE_GPU */
	uint32		record_size;	/* bytes of one node: header, row, vector */
	uint32		nodes_per_group;	/* k >= 1 nodes in one group ... */
	uint32		pages_per_group;	/* ... of p >= 1 consecutive pages */
	uint32		n;				/* node slots allocated (ids 0..n-1) */
	uint32		live;			/* nodes not deleted */
	uint64		generation;		/* bumped by every change a cached copy must see */
	uint32		entry_count;
	uint32		entries[CAGRA_MAX_ENTRY_NODES];
	uint32		build_flags;	/* CAGRA_BUILT_*; 0 in indexes built before it existed */
	/* where things are inside a group (cagra_compute_layout, docs/storage.md) */
	uint32		row_stride;		/* bytes from one node's header+row to the next */
	uint32		rows_per_page;	/* header+rows per row page (k when rows are packed) */
	uint32		tail_bytes;		/* vector bytes at the end of each full row page */
	uint32		hole_bytes;		/* vector bytes in the tails of full row pages */
	uint32		vector_start;	/* group position of the vector bytes after the hole */
	/* how vectors are stored: 0 (float32) in indexes made before it existed */
	uint32		element_type;	/* cagra::ElementType, the storage reloption's choice */
	float4		max_norm;		/* float16: the largest norm of a stored vector (the
								 * inner product's rounding bound); else 0 */
	/* slots vacuum freed, taken again by inserts (docs/storage.md) */
	uint32		reuse_next;		/* where the next insert looks for a deleted slot */
	uint64		reused;			/* inserts into a deleted slot so far */
	uint32		reuse_log[CAGRA_REUSE_LOG];	/* slot of such insert r at (r - 1) % LOG */
	/* the itopk_size searches use while cagra.itopk_size is 0: what the build
	 * measured this graph to need (cagra::choose_itopk); 0 in an empty index
	 * and in indexes built before it existed (the core's default then) */
	uint32		search_itopk;
	/* the entry probes CPU searches use while cagra.entry_probes is -1: what
	 * the build measured (cagra::choose_itopk); 0 as for search_itopk */
	uint32		search_probes;
	/* nodes the build wrote; the others came from inserts.  0 in indexes
	 * built before it existed */
	uint32		built_nodes;
	/* 1 from a VACUUM's first deletion mark, or the start of its repair,
	 * until its last link is written (vacuum.cpp): the next VACUUM, even one
	 * with nothing to delete, repairs and links again.  0 in indexes made
	 * before it existed */
	uint32		vacuum_unfinished;
	/* the last `unlinked` nodes (ids n - unlinked .. n - 1) may hold nodes
	 * not linked yet (CAGRA_NODE_UNLINKED), which every search measures as
	 * an entry; 0 in indexes made before it existed */
	uint32		unlinked;
} CagraMetaData;

/* The first node that may be unlinked: copies for the worker hold the
 * nodes before it, and searches take the nodes from it on as entries. */
static inline uint32
cagra_first_unlinked(const CagraMetaData *meta)
{
	return meta->n - meta->unlinked;
}

/* Whether a worker copy lacks nodes the meta page has: appended ones, or
 * slots reused since it was made (cagra_merge_tail searches both). */
static inline bool
cagra_copy_is_partial(const CagraMetaData *meta, const CagraCopyExtent *copy)
{
	return Min(copy->n, copy->linked) < meta->n || copy->reused < meta->reused;
}

/* build_flags: the build added long edges (the plain graph could not be
 * navigated between its clusters: docs/tuning.md) */
#define CAGRA_BUILT_LONG_EDGES 0x0001

/* The fixed head of a node record; the row and the vector follow it. */
typedef struct CagraNodeHeader
{
	ItemPointerData heap_tid;
	uint16		flags;
} CagraNodeHeader;

/* A node searches may return (deleted nodes are traversed, never returned). */
static inline bool
cagra_node_is_live(uint16 flags)
{
	return (flags & CAGRA_NODE_LIVE) && !(flags & CAGRA_NODE_DELETED);
}

/*
 * Whether a later round's result at `distance` lies before the last one
 * returned (at `last`), so returning it would break the distance order: a
 * traversal's later round found a row an earlier one missed.  Rounds on the
 * GPU worker and in the backend measure the same vectors with different
 * rounding, so a row within a few float steps of the last is not "before".
 */
static inline bool
cagra_before_returned(double distance, double last)
{
	return distance < last - 1e-5 * fabs(last);
}

/* How the index holds its vectors. */
static inline cagra::VectorFormat
cagra_format_of(const CagraMetaData *meta)
{
	cagra::VectorFormat f;

	f.element = (cagra::ElementType) meta->element_type;
	f.dim = meta->dims;
	f.metric = (cagra::Metric) meta->metric;
	return f;
}

/*
 * Whether the index's ORDER BY values are lower bounds that the executor
 * must recheck on the heap's vector (xs_recheckorderby): float16 storage of
 * values that float16 rounds (a vector column, or a halfvec one under
 * cosine, whose unit vectors are rounded again).  A halfvec column under L2
 * or inner product is stored exactly.
 */
bool		cagra_index_rounds_vectors(Relation index, const CagraMetaData *meta);

/* ERROR (22003) unless the index's element type holds every element of
 * `prepared`; `raw` is the column's value, for the message. */
void		cagra_check_storable(Relation index, const cagra::VectorFormat &format, const float *prepared,
								 const float *raw);

#define CAGRA_PAGE_DATA_START MAXALIGN(SizeOfPageHeaderData)
#define CAGRA_PAGE_USABLE (BLCKSZ - CAGRA_PAGE_DATA_START)
#define CAGRA_ROW_OFFSET sizeof(CagraNodeHeader)

static inline uint32
cagra_vector_offset(uint32 degree)
{
	return CAGRA_ROW_OFFSET + degree * sizeof(uint32);
}

/*
 * The layout numbers of a (dims, degree) pair: nodes come in groups of k
 * over p consecutive pages; in a group the header+rows of its k nodes come
 * first, the vectors after them (docs/storage.md).
 */
void		cagra_compute_layout(CagraMetaData *meta);

/*
 * Position inside its group (0 .. p * CAGRA_PAGE_USABLE - 1, page data
 * concatenated) of byte `offset` of the record of the node `j`-th in its
 * group.  offset < cagra_vector_offset(degree): the header and row part;
 * beyond: the vector.  The header and row part of a node is contiguous, and
 * so is its vector within a page: bytes at increasing positions run to the
 * end of a page.
 */
static inline uint64
cagra_group_position(const CagraMetaData *meta, uint32 j, uint32 offset)
{
	uint32		voff = cagra_vector_offset(meta->graph_degree);

	if (offset < voff)
		return (uint64) (j / meta->rows_per_page) * CAGRA_PAGE_USABLE +
			(uint64) (j % meta->rows_per_page) * meta->row_stride + offset;

	uint64		v = (uint64) j * (meta->record_size - voff) + (offset - voff);

	if (v < meta->hole_bytes)
		return (v / meta->tail_bytes) * CAGRA_PAGE_USABLE + (CAGRA_PAGE_USABLE - meta->tail_bytes) +
			v % meta->tail_bytes;
	return meta->vector_start + (v - meta->hole_bytes);
}

/* Where byte `offset` of node `id`'s record lives (see cagra_group_position). */
static inline void
cagra_locate(const CagraMetaData *meta, uint32 id, uint32 offset,
			 BlockNumber *blkno, uint32 *page_offset)
{
	uint32		group = id / meta->nodes_per_group;
	uint64		pos = cagra_group_position(meta, id % meta->nodes_per_group, offset);

	*blkno = 1 + (BlockNumber) group * meta->pages_per_group + (BlockNumber) (pos / CAGRA_PAGE_USABLE);
	*page_offset = CAGRA_PAGE_DATA_START + (uint32) (pos % CAGRA_PAGE_USABLE);
}

/* The block that holds node `id`'s header. */
static inline BlockNumber
cagra_header_block(const CagraMetaData *meta, uint32 id)
{
	BlockNumber blkno;
	uint32		page_offset;

	cagra_locate(meta, id, 0, &blkno, &page_offset);
	return blkno;
}

/* One past the last node (below meta->n) whose header shares the page of
 * `first`'s: headers never cross a page and their blocks grow with the node
 * id, so a scan of every header reads each such page once. */
static inline uint32
cagra_header_run_end(const CagraMetaData *meta, uint32 first)
{
	BlockNumber blkno = cagra_header_block(meta, first);
	uint32		end = first + 1;

	while (end < meta->n && cagra_header_block(meta, end) == blkno)
		end++;
	return end;
}

/* At most this many pages in one node group. */
#define CAGRA_MAX_GROUP_PAGES 64

/* Bytes of one group as its pages' data concatenated. */
static inline uint64
cagra_group_bytes(const CagraMetaData *meta)
{
	return (uint64) meta->pages_per_group * CAGRA_PAGE_USABLE;
}

/* Copy bytes of the (logical) record of the node j-th in its group out of,
 * or into, a group held in memory as its pages' data concatenated. */
void		cagra_group_copy_out(const CagraMetaData *meta, const char *group, uint32 j, uint32 offset,
								 uint32 len, void *dst);
void		cagra_group_copy_in(const CagraMetaData *meta, char *group, uint32 j, uint32 offset,
								const void *src, uint32 len);

/* The pages of node group `g` that hold nodes (the last group's used pages
 * only) into `group` (cagra_group_bytes), one share-locked page at a time,
 * through `strategy` (NULL: none); the next group's pages are prefetched
 * meanwhile. */
void		cagra_read_node_group(Relation index, const CagraMetaData *meta, uint64 g, char *group,
								  BufferAccessStrategy strategy);

/* Number of blocks (meta page included) that hold nodes 0..n-1: whole
 * groups, and of the last group the pages up to node n-1's last byte. */
BlockNumber cagra_blocks_for(const CagraMetaData *meta, uint32 n);

/* pd_lower for data page number `page_in_group` of a node group (past
 * every byte a full group has there). */
uint32		cagra_page_lower(const CagraMetaData *meta, uint32 page_in_group);

/* Meta page helpers */
void		cagra_init_meta_page(Page page, const CagraMetaData *meta);
CagraMetaData *cagra_meta_of(Page page);
void		cagra_read_meta(Relation index, CagraMetaData *out);	/* checks it */

/*
 * The one validation of a meta page: every field against its limits
 * (core/types.h) and the others (magic, version, metric, dimensions,
 * degrees, layout, entry nodes, the blocks its node count needs against
 * `nblocks`, search parameters, reused slots, ...).  Each problem goes to
 * `report` (with `arg`); `fatal` ones stop every reader, the rest (a live
 * count greater than the node count, a build field out of range) do not.
 * Returns false when the nodes cannot be read by this meta page (reads
 * would go astray).  cagra_check_meta raises ERRCODE_INDEX_CORRUPTED on
 * the first fatal problem; cagra_index_check lists them all.
 */
typedef void (*CagraMetaProblemFn) (void *arg, bool fatal, const char *problem);
bool		cagra_validate_meta(const CagraMetaData *meta, BlockNumber nblocks,
								CagraMetaProblemFn report, void *arg);
void		cagra_check_meta(Relation index, const CagraMetaData *meta);

/*
 * Open `relid` for a SQL function (cagra_search, cagra_index_info,
 * cagra_index_check) with AccessShareLock: a clear error unless it exists,
 * is a cagra index of one relation (not a partitioned one) and has been
 * built (its meta page written); with `need_valid`, also unless it is valid
 * (indisvalid: not left behind by an interrupted CREATE INDEX CONCURRENTLY).
 * With `heap_out`, its table is opened too (AccessShareLock, locked before
 * the index as PostgreSQL's commands do) and returned there.
 */
Relation	cagra_open_sql_index(Oid relid, bool need_valid, Relation *heap_out);
/* ERROR unless the user may read the rows of the index's table: USAGE on
 * its schema, SELECT on it or on every column the index reads. */
void		cagra_check_read_access(Relation index, Relation heap);

/* Initialise an empty node page (all slots zero). */
void		cagra_init_node_page(Page page, const CagraMetaData *meta, BlockNumber blkno);

/* Copy `len` bytes of node `id`'s record starting at `offset` out of the
 * index, share-locking one page at a time (plain C: may ereport).  The
 * record is the logical one (header, row, vector): a range may cover both
 * parts. */
void		cagra_read_record_bytes(Relation index, const CagraMetaData *meta, uint32 id,
									uint32 offset, uint32 len, void *dst);

/* ERROR unless a vector of `actual` dimensions fits an index of `expected`. */
void		cagra_check_dims(Relation index, uint32 expected, int actual);
bool		cagra_is_zero_vector(const float *x, int dims);

/*
 * Whether a vector is left out of an index of `metric` (builds and inserts
 * both ask): under cosine, a zero vector or one whose squared norm (summed
 * in float, as the <=> operator does) is not finite; its cosine distance is
 * undefined (the operator gives NaN).  Every vector is indexed under the
 * other metrics.
 */
bool		cagra_vector_unindexable(cagra::Metric metric, const float *x, int dims);
/* The vector as the index stores it (core prepare_vector: normalised under cosine). */
void		cagra_prepare(cagra::Metric metric, const float *in, float *out, uint32 dims);

/* ---- options, GUCs ---- */

typedef struct CagraOptions
{
	int32		vl_len_;
	int			graph_degree;
	int			intermediate_graph_degree;
	int			build_device;
	int			storage;		/* CAGRA_STORAGE_* */
} CagraOptions;

extern relopt_kind cagra_relopt_kind;

void		cagra_init_reloptions(void);
int			cagra_option_graph_degree(Relation index);
int			cagra_option_intermediate_degree(Relation index);
int			cagra_option_build_device(Relation index);
/* The element type a build of `index` stores (storage reloption; auto:
 * float16 on a halfvec column, float32 else). */
cagra::ElementType cagra_option_element_type(Relation index);
cagra::Metric cagra_index_metric(Relation index);
bool		cagra_index_is_halfvec(Relation index);
const char *cagra_device_name(uint32 device);

/* Build parameters of an index (reloptions); the search plan of an index
 * (the settings, and the index's own values where they are automatic; meta
 * may be NULL), and its parameters alone. */
cagra::BuildParams cagra_build_params(Relation index);
cagra::SearchPlan cagra_search_plan(const CagraMetaData *meta);
cagra::SearchParams cagra_search_params(const CagraMetaData *meta);
/* The itopk_size searches of the index use while cagra.itopk_size is 0. */
uint32		cagra_index_itopk(const CagraMetaData *meta);
uint32		cagra_index_probes(const CagraMetaData *meta);

/* ---- guarded buffer reads ---- */

/* ReadBuffer + LockBuffer that throw CagraPgError instead of longjmp'ing
 * (mode BUFFER_LOCK_UNLOCK: pin only, no lock).
 * With `hint` (a buffer that held the block before, or InvalidBuffer), the
 * block is pinned through it when it is still there, and *hint is updated. */
Buffer		cagra_read_locked_buffer(Relation index, BlockNumber blkno, int mode, Buffer *hint = NULL);

/*
 * Backend-local buffer hints for one relation at a time: for each block, the
 * buffer that held it last time, so that reading it again can skip the
 * shared buffer mapping table (ReadRecentBuffer checks the hint).
 */
typedef struct CagraBufferHints
{
	CagraRelFileId node;
	Buffer	   *hints;
	BlockNumber size;
} CagraBufferHints;

/* A pin of block `blkno` of `rel` (may ereport), through `hint` when it
 * still holds the block (NULL: no hint); *hint is updated. */
Buffer		cagra_pin_hinted(Relation rel, BlockNumber blkno, Buffer *hint);

/* The hint of block `blkno` of `rel` (a relation of at least `nblocks`
 * blocks); NULL when out of memory or beyond.  Valid until the next call
 * with the same hints. */
Buffer	   *cagra_hint_for(CagraBufferHints *h, Relation rel, BlockNumber blkno, BlockNumber nblocks);

/* This backend's buffer hint for block `blkno` of `index`, from the hints
 * of the last index searched. */
Buffer	   *cagra_buffer_hint(Relation index, BlockNumber blkno, BlockNumber nblocks);

/* ---- insert.cpp: linking nodes appended unlinked ---- */

/* Whether node `id` of the index `meta` counts is unlinked (and live). */
bool		cagra_node_unlinked(Relation index, const CagraMetaData *meta, uint32 id);

/* Link the `m` unlinked nodes `nodes`, in id order, whose runs' locks the
 * caller holds: their plans from one request to the worker where inserts'
 * plans go to it, else made here one at a time. */
void		cagra_link_nodes(Relation index, const CagraMetaData *view, const uint32 *nodes, uint32 m);

/* ---- linker.cpp ----
 * After node `new_id` was appended unlinked: when it ends its run, the run
 * handed to a linker, or linked here. */
void		cagra_link_after_append(Relation index, uint32 new_id);

/* Link up to CAGRA_LINKER_RUNS complete runs of unlinked nodes no one else
 * links (a linker, the writers' lock held): false when there were none. */
bool		cagra_link_complete_runs(Relation index);

/* Link every node inserted unlinked (vacuum, before it marks deletions:
 * the writers' lock held). */
void		cagra_link_unlinked(Relation index);

/* ---- writers' lock ----
 * A heavyweight lock on the meta page: inserts take it in RowExclusiveLock
 * (side by side), vacuum in ExclusiveLock (alone), cagra_index_check in
 * ShareLock (no writer).  Scans never take it.  See docs/storage.md. */
void		cagra_lock_writers(Relation index, LOCKMODE mode);
void		cagra_unlock_writers(Relation index, LOCKMODE mode);

/* Write a modified meta page under generic WAL (the buffer must be locked
 * exclusively by the caller). */
void		cagra_write_meta(Relation index, Buffer metabuf, const CagraMetaData *meta);
/* The meta data into the meta page's working copy `page` (of a WAL record). */
void		cagra_meta_into_page(Page page, const CagraMetaData *meta);

/*
 * Page changes under generic WAL, at most MAX_GENERIC_XLOG_PAGES pages per
 * record: cagra_batch_page returns the (exclusively locked, registered)
 * working copy of a block, extending the index when the block is new;
 * cagra_batch_finish logs and releases them.  Callers touch blocks in
 * ascending order and hold the writers' lock (and only one insert at a time
 * extends the index: insert.cpp's slot lock).
 */
typedef struct CagraWalBatch
{
	Relation	index;
	const CagraMetaData *meta;
	GenericXLogState *state;
	int			nbufs;
	Buffer		bufs[MAX_GENERIC_XLOG_PAGES];
	Page		pages[MAX_GENERIC_XLOG_PAGES];
} CagraWalBatch;

void		cagra_batch_begin(CagraWalBatch *b, Relation index, const CagraMetaData *meta);
Page		cagra_batch_page(CagraWalBatch *b, BlockNumber blkno);
/* Room in the record for the pages of bytes [offset, offset + len) of node
 * `id`'s record: the record is finished first when they would not all fit. */
void		cagra_batch_reserve(CagraWalBatch *b, uint32 id, uint32 offset, uint32 len);
/* Write bytes of node `id`'s (logical) record: may cover the header/row
 * part and the vector, and span pages.  The pages of the header/row part of
 * one write go into one WAL record. */
void		cagra_batch_write(CagraWalBatch *b, uint32 id, uint32 offset, const void *src, uint32 len);
void		cagra_batch_finish(CagraWalBatch *b);

/* ---- AM entry points ---- */

IndexBuildResult *cagra_build(Relation heap, Relation index, IndexInfo *indexInfo);
void		cagra_buildempty(Relation index);
bool		cagra_insert(Relation index, Datum *values, bool *isnull, ItemPointer heap_tid,
						 Relation heap, IndexUniqueCheck checkUnique, bool indexUnchanged,
						 IndexInfo *indexInfo);
IndexBulkDeleteResult *cagra_bulkdelete(IndexVacuumInfo *info, IndexBulkDeleteResult *stats,
										IndexBulkDeleteCallback callback, void *callback_state);
IndexBulkDeleteResult *cagra_vacuumcleanup(IndexVacuumInfo *info, IndexBulkDeleteResult *stats);
void		cagra_costestimate(PlannerInfo *root, IndexPath *path, double loop_count,
							   Cost *indexStartupCost, Cost *indexTotalCost,
							   Selectivity *indexSelectivity, double *indexCorrelation,
							   double *indexPages);
/* What a filtered scan (filtered_scan.cpp) of `bitmap`'s rows costs. */
typedef struct CagraFilteredScanCost
{
	Cost		startup;		/* the bitmap and the search, before the first row */
	Cost		total;			/* and every row fetched from the heap */
	double		allowed;		/* rows the bitmap is estimated to give */
	bool		exact;			/* the search measures every one of them */
} CagraFilteredScanCost;

/* False when the index (its meta page `meta`) cannot serve a filtered scan
 * (its vectors are rounded to float16, or it is empty). */
bool		cagra_filtered_scan_cost(PlannerInfo *root, IndexOptInfo *info, Relation index,
									 const CagraMetaData &meta, Path *bitmap, double rows,
									 CagraFilteredScanCost *cost);
/* The planner hook and the custom scan methods (_PG_init). */
void		cagra_init_filtered_scan(void);
/* A filtered scan's ORDER BY expression; NULL for another custom scan. */
Expr	   *cagra_filtered_scan_order_by(const CustomScan *cs);
/* The planner hook of unread_distance.cpp (_PG_init). */
void		cagra_init_unread_distance(void);
/* pgvector_habits.cpp: the error for pgvector's hnsw reloptions, and the
 * ProcessUtility hook (_PG_init) for columns cagra cannot index and for
 * pgvector's settings where pgvector is absent. */
void		cagra_reject_pgvector_reloptions(Datum reloptions);
void		cagra_init_pgvector_habits(void);
bytea	   *cagra_options(Datum reloptions, bool validate);
bool		cagra_validate(Oid opclassoid);
char	   *cagra_buildphasename(int64 phasenum);
IndexScanDesc cagra_beginscan(Relation index, int nkeys, int norderbys);
void		cagra_rescan(IndexScanDesc scan, ScanKey keys, int nkeys, ScanKey orderbys, int norderbys);
bool		cagra_gettuple(IndexScanDesc scan, ScanDirection dir);
void		cagra_endscan(IndexScanDesc scan);

/* Build sub-phases shown in pg_stat_progress_create_index */
#define CAGRA_PHASE_LOAD 2
#define CAGRA_PHASE_KNN 3
#define CAGRA_PHASE_PRUNE 4
#define CAGRA_PHASE_WRITE 5
#define CAGRA_PHASE_RECEIVE 8	/* the graph back from it */
#define CAGRA_PHASE_SYNC 10		/* fsync of the pages written around shared buffers */
#define CAGRA_PHASE_MEASURE 11	/* the search buffer the graph needs */
