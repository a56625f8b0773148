/*
 * search_sql.cpp — cagra_search(index, queries vector[], k): many queries
 * in one call, sent to the worker as one batch (or searched on the CPU),
 * returning (query, ctid, distance) for rows visible to the statement's
 * snapshot only, k per query at most, in distance order.
 *
 * The candidates of the whole batch are resolved together: node headers
 * read page by page of the index (each page once), heap tuples checked
 * block by block of the table, so a batch of thousands of queries costs one
 * buffer access per distinct page instead of one per candidate.
 */
#include "am/accessor.h"
#include "worker/search.h"

#include <vector>

#include "core/search.h"
#include "vector.h"

extern "C" {
#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/tupmacs.h"
#include "access/relation.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/visibilitymap.h"
#include "access/xact.h"
#include "catalog/pg_type.h"
#include "executor/tuptable.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "storage/bufmgr.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"

PG_FUNCTION_INFO_V1(cagra_search);
}

/* What is known of one candidate (query q, rank i: slot q * kk + i). */
#define CAGRA_SLOT_UNKNOWN 0
#define CAGRA_SLOT_LIVE 1		/* header read: a live node, tid = its heap TID */
#define CAGRA_SLOT_DROPPED 2	/* deleted node or no visible tuple */
#define CAGRA_SLOT_VISIBLE 3	/* tid = the visible tuple's TID */

typedef struct CagraCandidates
{
	int			nq;
	uint32		kk;				/* candidates per query */
	uint32	   *ids;			/* nq x kk node ids, CAGRA_INVALID_ID padded */
	float	   *dists;			/* nq x kk */
	uint8	   *state;			/* nq x kk CAGRA_SLOT_* */
	ItemPointerData *tids;		/* nq x kk */
	uint64	   *copy_tids;		/* nq x kk heap TIDs from the worker's copy, or NULL */
} CagraCandidates;

/* ---- scratch arrays ----
 *
 * A batch of 10,000 queries needs some 20 MB of arrays (queries, candidates,
 * sort records).  Allocated afresh for every call, each of their pages
 * costs a page fault (and its zeroing by the kernel) every time, a large
 * part of the call's CPU time.  So the backend keeps them between calls, up
 * to CAGRA_SCRATCH_KEEP bytes in all; larger needs get call-lifetime memory.
 * Nothing in them outlives a call.
 */
typedef enum CagraScratchKind
{
	CAGRA_SCRATCH_QUERIES,
	CAGRA_SCRATCH_IDS,
	CAGRA_SCRATCH_DISTS,
	CAGRA_SCRATCH_STATE,
	CAGRA_SCRATCH_TIDS,
	CAGRA_SCRATCH_COPY_TIDS,
	CAGRA_SCRATCH_SLOTS,
	CAGRA_SCRATCH_WORK,
	CAGRA_SCRATCH_SORTED,
	CAGRA_SCRATCH_COUNTS,
	CAGRA_SCRATCH_KINDS
} CagraScratchKind;

#define CAGRA_SCRATCH_KEEP ((Size) 64 * 1024 * 1024)

static void *cagra_scratch_buf[CAGRA_SCRATCH_KINDS];
static Size cagra_scratch_len[CAGRA_SCRATCH_KINDS];
static Size cagra_scratch_total;

/* An uninitialised array of `size` bytes, valid until the call returns. */
static void *
cagra_scratch(CagraScratchKind kind, Size size)
{
	size = Max(size, (Size) 64);
	if (size <= cagra_scratch_len[kind])
		return cagra_scratch_buf[kind];

	Size		grown = size + size / 4;	/* room for a slightly larger batch */

	if (cagra_scratch_total - cagra_scratch_len[kind] + grown > CAGRA_SCRATCH_KEEP)
		return palloc_extended(size, MCXT_ALLOC_HUGE);
	if (cagra_scratch_buf[kind])
		pfree(cagra_scratch_buf[kind]);
	cagra_scratch_total -= cagra_scratch_len[kind];
	cagra_scratch_buf[kind] = NULL;
	cagra_scratch_len[kind] = 0;
	cagra_scratch_buf[kind] = MemoryContextAllocHuge(TopMemoryContext, grown);
	cagra_scratch_len[kind] = grown;
	cagra_scratch_total += grown;
	return cagra_scratch_buf[kind];
}

/* The CPU path for one query: up to k live node ids and distances. */
static void
cagra_cpu_search_query(Relation index, const CagraMetaData *meta, const float *query, uint32 k,
					   uint32 *ids, float *dists, CagraStatus *st) noexcept
{
	try
	{
		/* pinned pages and the entry-vector cache, as an index scan has */
		CagraPageAccessor acc(index, *meta, true, true);
		cagra::SearchParams params = cagra_search_params();

		params.itopk_size = std::max(params.itopk_size, k);
		std::vector<uint32_t> entries(meta->entries, meta->entries + meta->entry_count);
		auto		s = cagra_new_searcher(acc, query, params, entries);
		std::vector<cagra::Neighbor> out(k);
		auto		live = [&acc](uint32_t id) {
			CagraPageAccessor::NodeInfo info;

			return acc.node_info(id, &info) && (info.flags & CAGRA_NODE_LIVE) &&
				!(info.flags & CAGRA_NODE_DELETED);
		};
		uint32		got = s->next(k, live, out.data());

		for (uint32 i = 0; i < k; i++)
		{
			ids[i] = i < got ? out[i].id : CAGRA_INVALID_ID;
			dists[i] = i < got ? out[i].distance : INFINITY;
		}
		acc.release_pins();
		cagra_status_ok(st);
	}
	catch (...)
	{
		cagra_status_from_current_exception(st);
	}
}

static Relation
cagra_open_search_index(Oid indexoid)
{
	Relation	index = index_open(indexoid, AccessShareLock);

	if (index->rd_indam->ambuild != cagra_build)
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("\"%s\" is not a cagra index", RelationGetRelationName(index))));
	return index;
}

/* Prepared queries (nq x dims); NULL elements leave *present false. */
static float *
cagra_collect_queries(Relation index, const CagraMetaData *meta, ArrayType *arr, int *nq_out,
					  bool **present_out)
{
	int16		typlen;
	bool		typbyval;
	char		typalign;
	Datum	   *elems;
	bool	   *nulls;
	int			nq;

	get_typlenbyvalalign(ARR_ELEMTYPE(arr), &typlen, &typbyval, &typalign);
	deconstruct_array(arr, ARR_ELEMTYPE(arr), typlen, typbyval, typalign, &elems, &nulls, &nq);

	float	   *queries = (float *) cagra_scratch(CAGRA_SCRATCH_QUERIES,
												   (Size) nq * meta->dims * sizeof(float));
	bool	   *present = (bool *) palloc0(sizeof(bool) * Max(nq, 1));

	for (int q = 0; q < nq; q++)
	{
		if (nulls[q])
		{
			/* searched with the batch (the worker takes every row), never emitted */
			memset(queries + (Size) q * meta->dims, 0, meta->dims * sizeof(float));
			continue;
		}
		Vector	   *v = DatumGetVector(elems[q]);

		cagra_check_dims(index, meta->dims, v->dim);
		cagra_prepare((cagra::Metric) meta->metric, v->x, queries + (Size) q * meta->dims, meta->dims);
		present[q] = true;
	}
	pfree(elems);
	pfree(nulls);
	*nq_out = nq;
	*present_out = present;
	return queries;
}

/* Distances from one query to `count` vectors (INFINITY if the core
 * throws, which it does not for valid dims). */
static void
cagra_distances_to(cagra::Metric metric, const float *query, const float *vecs, uint32 count,
				   uint32 dims, float *out) noexcept
{
	try
	{
		for (uint32 i = 0; i < count; i++)
			out[i] = cagra::distance(metric, query, vecs + (Size) i * dims, dims);
	}
	catch (...)
	{
		for (uint32 i = 0; i < count; i++)
			out[i] = INFINITY;
	}
}

/*
 * Nodes [from, meta->n) were appended after the worker's copy was made: read
 * their vectors once, then merge the exact nearest of them into every
 * query's sorted row (the worker's ids are all below `from`).
 */
static void
cagra_merge_tail_batch(Relation index, const CagraMetaData *meta, uint32 from, int nq,
					   const float *queries, const bool *present, uint32 kk, uint32 *ids, float *dists)
{
	uint32		span = meta->n - from;
	uint32	   *tail_ids = (uint32 *) palloc(sizeof(uint32) * span);
	float	   *vecs = (float *) palloc_extended((Size) span * meta->dims * sizeof(float), MCXT_ALLOC_HUGE);
	float	   *d = (float *) palloc(sizeof(float) * span);
	uint32		voff = cagra_vector_offset(meta->graph_degree);
	uint32		ntail = 0;

	for (uint32 id = from; id < meta->n; id++)
	{
		CagraNodeHeader hdr;

		cagra_read_record_bytes(index, meta, id, 0, sizeof(hdr), &hdr);
		if (!(hdr.flags & CAGRA_NODE_LIVE) || (hdr.flags & CAGRA_NODE_DELETED))
			continue;
		cagra_read_record_bytes(index, meta, id, voff, meta->dims * sizeof(float),
								vecs + (Size) ntail * meta->dims);
		tail_ids[ntail++] = id;
	}
	for (int q = 0; q < nq && ntail > 0; q++)
	{
		uint32	   *row = ids + (Size) q * kk;
		float	   *rowd = dists + (Size) q * kk;

		if (!present[q])
			continue;
		cagra_distances_to((cagra::Metric) meta->metric, queries + (Size) q * meta->dims, vecs, ntail,
						   meta->dims, d);
		for (uint32 t = 0; t < ntail; t++)
		{
			uint32		pos = kk - 1;

			if (!(d[t] < rowd[kk - 1]))
				continue;
			/* insert into the sorted row, dropping the last */
			while (pos > 0 && rowd[pos - 1] > d[t])
			{
				row[pos] = row[pos - 1];
				rowd[pos] = rowd[pos - 1];
				pos--;
			}
			row[pos] = tail_ids[t];
			rowd[pos] = d[t];
		}
		CHECK_FOR_INTERRUPTS();
	}
	pfree(tail_ids);
	pfree(vecs);
	pfree(d);
}

/* Candidates of every query into c->ids/dists: on the worker when it can,
 * else on the CPU. */
static void
cagra_search_candidates(Relation index, const CagraMetaData *meta, const float *queries,
						const bool *present, CagraCandidates *c)
{
	if (cagra_worker_wanted("search"))
	{
		CagraSearchConfig cfg;
		char		why[256];
		uint32		copy_n;

		cfg.k = c->kk;
		cfg.itopk_size = c->kk;
		cfg.search_width = (uint32) cagra_search_width;
		cfg.max_iterations = (uint32) cagra_max_iterations;

		uint64	   *copy_tids = (uint64 *) cagra_scratch(CAGRA_SCRATCH_COPY_TIDS,
															sizeof(uint64) * (Size) c->nq * c->kk);
		CagraOffload r = cagra_worker_search(index, meta, &cfg, (uint32) c->nq, queries, c->ids,
											 c->dists, copy_tids, &copy_n, why, sizeof(why));

		if (r == CAGRA_OFFLOAD_OK)
		{
			/* the merge moves candidates: their copy TIDs would not follow */
			if (copy_n < meta->n)
				cagra_merge_tail_batch(index, meta, copy_n, c->nq, queries, present, c->kk, c->ids,
									   c->dists);
			else
				c->copy_tids = copy_tids;
			return;
		}
		cagra_worker_search_fallback(r, why);
	}
	for (int q = 0; q < c->nq; q++)
	{
		CagraStatus st;

		if (!present[q])
			continue;
		cagra_cpu_search_query(index, meta, queries + (Size) q * meta->dims, c->kk,
							   c->ids + (Size) q * c->kk, c->dists + (Size) q * c->kk, &st);
		if (!st.ok)
			cagra_report_status(&st);
		CHECK_FOR_INTERRUPTS();
	}
}

/* ---- ordering work by page ---- */

/* One candidate to look at: its page, its slot, where on the page. */
typedef struct CagraWork
{
	uint32		block;
	uint32		slot;
	uint32		where;			/* headers: byte offset; heap: line pointer */
} CagraWork;

static int
cagra_cmp_work(const void *a, const void *b)
{
	const CagraWork *x = (const CagraWork *) a;
	const CagraWork *y = (const CagraWork *) b;

	if (x->block != y->block)
		return x->block < y->block ? -1 : 1;
	return x->slot < y->slot ? -1 : x->slot > y->slot ? 1 : 0;
}

/* `work` ordered by block (each < nblocks), into a new array: a counting
 * sort when the block range is not much larger than the count, else a
 * comparison sort.  The records travel whole, so the loops over pages read
 * them in sequence. */
static CagraWork *
cagra_sort_work(const CagraWork *work, uint32 count, uint32 nblocks)
{
	CagraWork  *out = (CagraWork *) cagra_scratch(CAGRA_SCRATCH_SORTED, sizeof(CagraWork) * (Size) count);

	if ((uint64) nblocks > 4 * (uint64) count + 1024)
	{
		memcpy(out, work, sizeof(CagraWork) * count);
		qsort(out, count, sizeof(CagraWork), cagra_cmp_work);
		return out;
	}

	uint32	   *start = (uint32 *) cagra_scratch(CAGRA_SCRATCH_COUNTS, sizeof(uint32) * ((Size) nblocks + 1));

	memset(start, 0, sizeof(uint32) * ((Size) nblocks + 1));

	for (uint32 i = 0; i < count; i++)
		start[work[i].block + 1]++;
	for (uint32 b = 0; b < nblocks; b++)
		start[b + 1] += start[b];
	for (uint32 i = 0; i < count; i++)
		out[start[work[i].block]++] = work[i];
	return out;
}

/* ---- node headers ---- */

/* A pinned buffer of index block `blkno`, through this backend's hint. */
static Buffer
cagra_pin_index_block(Relation index, BlockNumber blkno, BlockNumber nblocks)
{
	Buffer	   *hint = cagra_buffer_hint(index, blkno, nblocks);
	Buffer		buf;

	if (hint && *hint != InvalidBuffer &&
		ReadRecentBuffer(index->rd_node, MAIN_FORKNUM, blkno, *hint))
		return *hint;
	buf = ReadBuffer(index, blkno);
	if (hint)
		*hint = buf;
	return buf;
}

/* Read the headers of the nodes of `slots` (slot numbers into c), each
 * index page once: live nodes become LIVE with their heap TID, the rest
 * DROPPED. */
static void
cagra_read_headers(Relation index, const CagraMetaData *meta, CagraCandidates *c,
				   const uint32 *slots, uint32 count)
{
	BlockNumber nblocks = cagra_blocks_for(meta, meta->n);
	CagraWork  *work = (CagraWork *) cagra_scratch(CAGRA_SCRATCH_WORK, sizeof(CagraWork) * (Size) count);

	for (uint32 i = 0; i < count; i++)
	{
		work[i].slot = slots[i];
		cagra_locate(meta, c->ids[slots[i]], 0, &work[i].block, &work[i].where);
		/* a node appended after our meta page read still has its page */
		nblocks = Max(nblocks, work[i].block + 1);
	}

	CagraWork  *sorted = cagra_sort_work(work, count, nblocks);

	/*
	 * The headers are scattered over shared buffers: each page is pinned one
	 * group ahead and its headers prefetched, so their cache misses overlap
	 * the work on the page before (the lock's atomic operations would
	 * otherwise let only one page's misses overlap at a time).
	 */
	Buffer		next = count > 0 ? cagra_pin_index_block(index, sorted[0].block, nblocks) : InvalidBuffer;

	for (uint32 i = 0; i < count;)
	{
		BlockNumber blkno = sorted[i].block;
		Buffer		buf = next;
		const char *page;
		uint32		end = i;

		while (end < count && sorted[end].block == blkno)
			end++;
		if (end < count)
		{
			const char *ahead;

			next = cagra_pin_index_block(index, sorted[end].block, nblocks);
			ahead = (const char *) BufferGetPage(next);
			for (uint32 j = end; j < count && sorted[j].block == sorted[end].block; j++)
				__builtin_prefetch(ahead + sorted[j].where);
		}
		LockBuffer(buf, BUFFER_LOCK_SHARE);
		page = (const char *) BufferGetPage(buf);
		for (; i < end; i++)
		{
			CagraNodeHeader hdr;
			uint32		s = sorted[i].slot;

			memcpy(&hdr, page + sorted[i].where, sizeof(hdr));
			if ((hdr.flags & CAGRA_NODE_LIVE) && !(hdr.flags & CAGRA_NODE_DELETED))
			{
				c->state[s] = CAGRA_SLOT_LIVE;
				c->tids[s] = hdr.heap_tid;
			}
			else
				c->state[s] = CAGRA_SLOT_DROPPED;
		}
		UnlockReleaseBuffer(buf);
	}
}

/* ---- heap visibility ---- */

/* Backend-local buffer hints for the heap of the last cagra_search: as the
 * index's (storage.cpp), they save the shared buffer table lookup of
 * blocks read by earlier batches. */
static RelFileNode cagra_heap_hint_node;
static Buffer *cagra_heap_hints;
static BlockNumber cagra_heap_hint_size;

static Buffer *
cagra_heap_hint(Relation heap, BlockNumber blkno, BlockNumber nblocks)
{
	if (!cagra_heap_hints || !RelFileNodeEquals(cagra_heap_hint_node, heap->rd_node) ||
		cagra_heap_hint_size < nblocks)
	{
		/* room to grow, so that a table growing between calls does not
		 * cost an allocation each time */
		BlockNumber size = Max(nblocks + nblocks / 4, (BlockNumber) 64);
		Buffer	   *fresh = (Buffer *) MemoryContextAllocExtended(TopMemoryContext, size * sizeof(Buffer),
																  MCXT_ALLOC_HUGE | MCXT_ALLOC_NO_OOM |
																  MCXT_ALLOC_ZERO);

		if (fresh == NULL)
			return NULL;
		if (cagra_heap_hints && RelFileNodeEquals(cagra_heap_hint_node, heap->rd_node))
			memcpy(fresh, cagra_heap_hints, Min(cagra_heap_hint_size, size) * sizeof(Buffer));
		if (cagra_heap_hints)
			pfree(cagra_heap_hints);
		cagra_heap_hints = fresh;
		cagra_heap_hint_size = size;
		cagra_heap_hint_node = heap->rd_node;
	}
	return blkno < cagra_heap_hint_size ? &cagra_heap_hints[blkno] : NULL;
}

static Buffer
cagra_pin_heap_block(Relation heap, BlockNumber blkno, BlockNumber nblocks)
{
	Buffer	   *hint = cagra_heap_hint(heap, blkno, nblocks);
	Buffer		buf;

	if (hint && *hint != InvalidBuffer &&
		ReadRecentBuffer(heap->rd_node, MAIN_FORKNUM, blkno, *hint))
		return *hint;
	buf = ReadBuffer(heap, blkno);
	if (hint)
		*hint = buf;
	return buf;
}

/* The heap TIDs of `slots`: the worker's copy's where the snapshot is MVCC
 * (see cagra_worker_search: the heap check alone is then exact), the node
 * headers' for the rest. */
static void
cagra_take_copy_tids(Relation index, const CagraMetaData *meta, CagraCandidates *c, Snapshot snapshot,
					 const uint32 *slots, uint32 count)
{
	uint32	   *rest = (uint32 *) palloc(sizeof(uint32) * Max(count, 1));
	uint32		nrest = 0;

	for (uint32 i = 0; i < count; i++)
	{
		uint32		s = slots[i];

		if (c->copy_tids && c->copy_tids[s] != 0 && IsMVCCSnapshot(snapshot))
		{
			c->state[s] = CAGRA_SLOT_LIVE;
			cagra_unpack_tid(c->copy_tids[s], &c->tids[s]);
		}
		else
			rest[nrest++] = s;
	}
	if (nrest > 0)
		cagra_read_headers(index, meta, c, rest, nrest);
	pfree(rest);
}

/*
 * The offset of the visible member of the HOT chain rooted at line pointer
 * `off` of a page that the visibility map says is all-visible (or
 * InvalidOffsetNumber): every normal tuple on it is visible to every
 * snapshot, so the chain has one member, at `off` itself or behind its
 * redirect.  The caller holds a share lock on the page.
 *
 * This is exact, not a guess, for the reason index-only scans are: the node
 * header (read under the index page's lock, after our snapshot was taken),
 * or the worker's copy of the generation the meta page showed then, said
 * live, so vacuum had not yet released the line pointer at that time; a
 * tuple put there after that would be newer than our snapshot, and the page
 * could not be all-visible while we hold the snapshot.
 */
static OffsetNumber
cagra_all_visible_member(Page page, OffsetNumber off)
{
	ItemId		lp;

	if (off < FirstOffsetNumber || off > PageGetMaxOffsetNumber(page))
		return InvalidOffsetNumber;
	lp = PageGetItemId(page, off);
	if (ItemIdIsRedirected(lp))
	{
		off = ItemIdGetRedirect(lp);
		if (off < FirstOffsetNumber || off > PageGetMaxOffsetNumber(page))
			return InvalidOffsetNumber;
		lp = PageGetItemId(page, off);
	}
	return ItemIdIsNormal(lp) ? off : InvalidOffsetNumber;
}

/*
 * Check the LIVE slots of `slots` against the snapshot, heap block by heap
 * block: VISIBLE with the visible tuple's TID (a HOT chain's member, not
 * necessarily the index's TID), or DROPPED.  On all-visible pages of a heap
 * table the line pointers say it; elsewhere the table AM's index fetch
 * does (serializable transactions always take that path: it records the
 * predicate locks).
 */
static void
cagra_check_visibility(Relation heap, Snapshot snapshot, CagraCandidates *c, const uint32 *slots,
					   uint32 count, IndexFetchTableData *fetch, TupleTableSlot *slot)
{
	BlockNumber nblocks = RelationGetNumberOfBlocks(heap);
	bool		shortcut = heap->rd_tableam == GetHeapamTableAmRoutine() &&
		IsMVCCSnapshot(snapshot) && !IsolationIsSerializable();
	CagraWork  *work = (CagraWork *) cagra_scratch(CAGRA_SCRATCH_WORK, sizeof(CagraWork) * (Size) count);
	uint32		nlive = 0;
	Buffer		vmbuf = InvalidBuffer;

	for (uint32 i = 0; i < count; i++)
		if (c->state[slots[i]] == CAGRA_SLOT_LIVE)
		{
			ItemPointer tid = &c->tids[slots[i]];

			/* blocks past the end (rows added since): last, any order */
			work[nlive].block = Min(ItemPointerGetBlockNumber(tid), nblocks);
			work[nlive].where = ItemPointerGetOffsetNumber(tid);
			work[nlive++].slot = slots[i];
		}

	CagraWork  *sorted = cagra_sort_work(work, nlive, nblocks + 1);

	for (uint32 i = 0; i < nlive;)
	{
		BlockNumber blkno = sorted[i].block;
		uint32		end = i;

		while (end < nlive && sorted[end].block == blkno)
			end++;
		if (shortcut && blkno < nblocks && VM_ALL_VISIBLE(heap, blkno, &vmbuf))
		{
			Buffer		buf = cagra_pin_heap_block(heap, blkno, nblocks);
			Page		page;

			LockBuffer(buf, BUFFER_LOCK_SHARE);
			page = BufferGetPage(buf);
			for (; i < end; i++)
			{
				uint32		s = sorted[i].slot;
				OffsetNumber off = cagra_all_visible_member(page, (OffsetNumber) sorted[i].where);

				if (off != InvalidOffsetNumber)
				{
					c->state[s] = CAGRA_SLOT_VISIBLE;
					ItemPointerSetOffsetNumber(&c->tids[s], off);
				}
				else
					c->state[s] = CAGRA_SLOT_DROPPED;
			}
			UnlockReleaseBuffer(buf);
			continue;
		}
		for (; i < end; i++)
		{
			uint32		s = sorted[i].slot;
			ItemPointerData tid = c->tids[s];
			bool		call_again = false;
			bool		all_dead = false;

			if (table_index_fetch_tuple(fetch, &tid, snapshot, slot, &call_again, &all_dead))
			{
				c->state[s] = CAGRA_SLOT_VISIBLE;
				c->tids[s] = slot->tts_tid;
			}
			else
				c->state[s] = CAGRA_SLOT_DROPPED;
		}
		CHECK_FOR_INTERRUPTS();
	}
	if (BufferIsValid(vmbuf))
		ReleaseBuffer(vmbuf);
}

/*
 * Settle the first candidates of every query until each has k visible ones
 * (or has no more candidates).  The first round takes k per query; a query
 * that lost some to deletions or invisibility asks for as many more in the
 * next round.  Each round reads its headers and heap pages in page order.
 */
static void
cagra_resolve(Relation index, const CagraMetaData *meta, Relation heap, Snapshot snapshot,
			  const bool *present, uint32 k, CagraCandidates *c)
{
	uint32	   *next = (uint32 *) palloc0(sizeof(uint32) * Max(c->nq, 1));	/* candidates taken */
	uint32	   *want = (uint32 *) palloc(sizeof(uint32) * Max(c->nq, 1));
	uint32	   *slots = (uint32 *) cagra_scratch(CAGRA_SCRATCH_SLOTS, sizeof(uint32) * (Size) c->nq * c->kk);
	IndexFetchTableData *fetch = table_index_fetch_begin(heap);
	TupleTableSlot *slot = table_slot_create(heap, NULL);

	for (int q = 0; q < c->nq; q++)
		want[q] = present[q] ? k : 0;
	for (;;)
	{
		uint32		count = 0;

		for (int q = 0; q < c->nq; q++)
		{
			const uint32 *row = c->ids + (Size) q * c->kk;
			uint32		stop = Min(c->kk, next[q] + want[q]);

			for (; next[q] < stop && row[next[q]] != CAGRA_INVALID_ID; next[q]++)
				slots[count++] = (uint32) ((Size) q * c->kk + next[q]);
		}
		if (count == 0)
			break;
		cagra_take_copy_tids(index, meta, c, snapshot, slots, count);
		cagra_check_visibility(heap, snapshot, c, slots, count, fetch, slot);

		/* the next round: what each query still lacks */
		for (int q = 0; q < c->nq; q++)
		{
			const uint8 *st = c->state + (Size) q * c->kk;
			uint32		visible = 0;

			if (!present[q])
				continue;
			for (uint32 i = 0; i < next[q]; i++)
				visible += st[i] == CAGRA_SLOT_VISIBLE;
			want[q] = visible < k ? k - visible : 0;
		}
	}
	ExecDropSingleTupleTableSlot(slot);
	table_index_fetch_end(fetch);
	pfree(next);
	pfree(want);
}

/*
 * The result rows, (query int4, ctid tid, distance float8), formed by
 * patching one tuple: the columns are fixed-length and never NULL, so every
 * row has the layout heap_form_minimal_tuple gives the first, and only the
 * bytes of the three values change.  (Forming each row from scratch was
 * most of the cost of emitting 100,000 rows.)
 */
typedef struct CagraRowFormer
{
	MinimalTuple row;
	char	   *query;			/* where each value's bytes are in `row` */
	char	   *tid;
	char	   *distance;
	TupleTableSlot *slot;
} CagraRowFormer;

static void
cagra_row_former_init(CagraRowFormer *f, TupleDesc desc)
{
	Datum		values[3];
	bool		nulls[3] = {false, false, false};
	ItemPointerData tid;
	char	   *data;
	char	  **where[3] = {&f->query, &f->tid, &f->distance};
	uint32		off = 0;

	ItemPointerSetInvalid(&tid);
	values[0] = Int32GetDatum(0);
	values[1] = PointerGetDatum(&tid);
	values[2] = Float8GetDatum(0.0);
	f->row = heap_form_minimal_tuple(desc, values, nulls);
	data = (char *) f->row + f->row->t_hoff - MINIMAL_TUPLE_OFFSET;
	for (int i = 0; i < 3; i++)
	{
		Form_pg_attribute att = TupleDescAttr(desc, i);

		off = att_align_nominal(off, att->attalign);
		*where[i] = data + off;
		off += att->attlen;
	}
	f->slot = MakeSingleTupleTableSlot(desc, &TTSOpsMinimalTuple);
}

static void
cagra_row_former_put(CagraRowFormer *f, Tuplestorestate *store, int32 query, ItemPointer tid,
					 float8 distance)
{
	memcpy(f->query, &query, sizeof(query));
	memcpy(f->tid, tid, sizeof(ItemPointerData));
	memcpy(f->distance, &distance, sizeof(distance));
	ExecStoreMinimalTuple(f->row, f->slot, false);
	tuplestore_puttupleslot(store, f->slot);	/* copies the row */
}

/* Emit up to k visible rows of each query (numbered from first + 1), in
 * distance order. */
static void
cagra_emit_results(ReturnSetInfo *rsinfo, CagraRowFormer *former, const CagraMetaData *meta,
				   const bool *present, int first, uint32 k, const CagraCandidates *c)
{
	cagra::Metric metric = (cagra::Metric) meta->metric;

	for (int q = 0; q < c->nq; q++)
	{
		uint32		emitted = 0;
		Size		base = (Size) q * c->kk;

		if (!present[q])
			continue;
		for (uint32 i = 0; i < c->kk && emitted < k; i++)
		{
			if (c->state[base + i] != CAGRA_SLOT_VISIBLE)
				continue;
			cagra_row_former_put(former, rsinfo->setResult, first + q + 1, &c->tids[base + i],
								 cagra_operator_value(metric, c->dists[base + i]));
			emitted++;
		}
	}
}

Datum
cagra_search(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	Oid			indexoid = PG_GETARG_OID(0);
	ArrayType  *arr = PG_GETARG_ARRAYTYPE_P(1);
	int32		k = PG_GETARG_INT32(2);

	if (k < 1 || k > CAGRA_WORKER_MAX_K)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("k must be between 1 and %d, not %d", CAGRA_WORKER_MAX_K, k)));
	InitMaterializedSRF(fcinfo, 0);

	Relation	index = cagra_open_search_index(indexoid);
	Relation	heap = table_open(index->rd_index->indrelid, AccessShareLock);
	AclResult	acl = pg_class_aclcheck(RelationGetRelid(heap), GetUserId(), ACL_SELECT);

	if (acl != ACLCHECK_OK)
		aclcheck_error(acl, OBJECT_TABLE, RelationGetRelationName(heap));

	CagraMetaData meta;

	cagra_read_meta(index, &meta);
	if (meta.n > 0 && meta.live > 0 && ArrayGetNItems(ARR_NDIM(arr), ARR_DIMS(arr)) > 0)
	{
		CagraCandidates c;
		bool	   *present;
		float	   *queries = cagra_collect_queries(index, &meta, arr, &c.nq, &present);
		Size		total;

		/* more candidates than k: some may be invisible to this snapshot */
		c.kk = Min((uint32) CAGRA_WORKER_MAX_K, Max((uint32) cagra_itopk_size, (uint32) k));
		total = (Size) c.nq * c.kk;
		c.ids = (uint32 *) cagra_scratch(CAGRA_SCRATCH_IDS, total * sizeof(uint32));
		c.dists = (float *) cagra_scratch(CAGRA_SCRATCH_DISTS, total * sizeof(float));
		c.state = (uint8 *) cagra_scratch(CAGRA_SCRATCH_STATE, total);
		c.tids = (ItemPointerData *) cagra_scratch(CAGRA_SCRATCH_TIDS, total * sizeof(ItemPointerData));
		c.copy_tids = NULL;
		memset(c.state, CAGRA_SLOT_UNKNOWN, total);
		for (Size i = 0; i < total; i++)
			c.ids[i] = CAGRA_INVALID_ID;	/* rows of NULL queries stay empty */

		cagra_search_candidates(index, &meta, queries, present, &c);

		/* slots are numbered in 32 bits: huge batches settle in parts */
		int			part = (int) Min((Size) c.nq, (Size) PG_UINT32_MAX / c.kk);
		CagraRowFormer former;

		cagra_row_former_init(&former, rsinfo->setDesc);

		for (int first = 0; first < c.nq; first += part)
		{
			CagraCandidates p = c;
			Size		base = (Size) first * c.kk;

			p.nq = Min(part, c.nq - first);
			p.ids += base;
			p.dists += base;
			p.state += base;
			p.tids += base;
			if (p.copy_tids)
				p.copy_tids += base;
			cagra_resolve(index, &meta, heap, GetActiveSnapshot(), present + first, (uint32) k, &p);
			cagra_emit_results(rsinfo, &former, &meta, present + first, first, (uint32) k, &p);
		}
		ExecDropSingleTupleTableSlot(former.slot);
	}
	table_close(heap, AccessShareLock);
	index_close(index, AccessShareLock);
	return (Datum) 0;
}
