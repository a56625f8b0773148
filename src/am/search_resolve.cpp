/*
 * search_resolve.cpp — the candidates of a whole cagra_search batch made
 * into visible rows (search_resolve.h): node headers read index page by page
 * (each page once), heap tuples checked block by block of the table, so a
 * batch of thousands of queries costs one buffer access per distinct page
 * instead of one per candidate; the live nodes of a filtered search's
 * allowed rows, read the same way; and the scratch arrays kept between
 * calls.
 */
#include "am/search_resolve.h"

#include "protocol/protocol.h"

extern "C" {
#include "access/heapam.h"
#include "access/tableam.h"
#include "access/visibilitymap.h"
#include "access/xact.h"
#include "executor/tuptable.h"
#include "miscadmin.h"
#include "storage/bufmgr.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
}

/* ---- scratch arrays (see search_resolve.h) ---- */

#define CAGRA_SCRATCH_KEEP ((Size) 64 * 1024 * 1024)

static void *cagra_scratch_buf[CAGRA_SCRATCH_SETS][CAGRA_SCRATCH_KINDS];
static Size cagra_scratch_len[CAGRA_SCRATCH_SETS][CAGRA_SCRATCH_KINDS];
static Size cagra_scratch_total;

void *
cagra_scratch_of(int set, CagraScratchKind kind, Size size)
{
	void	  **buf = &cagra_scratch_buf[set][kind];
	Size	   *len = &cagra_scratch_len[set][kind];

	size = Max(size, (Size) 64);
	if (size <= *len)
		return *buf;

	Size		grown = size + size / 4;	/* room for a slightly larger batch */

	if (cagra_scratch_total - *len + grown > CAGRA_SCRATCH_KEEP)
		return palloc_extended(size, MCXT_ALLOC_HUGE);
	if (*buf)
		pfree(*buf);
	cagra_scratch_total -= *len;
	*buf = NULL;
	*len = 0;
	*buf = MemoryContextAllocHuge(TopMemoryContext, grown);
	*len = grown;
	cagra_scratch_total += grown;
	return *buf;
}

void *
cagra_scratch(CagraScratchKind kind, Size size)
{
	return cagra_scratch_of(0, kind, size);
}

/* ---- the rows a filtered search may return ---- */

CagraAllowed *
cagra_allowed_packed(uint64 *packed, uint32 count)
{
	CagraAllowed *a = (CagraAllowed *) palloc0(sizeof(CagraAllowed));

	a->rows.tids = packed;
	a->rows.count = count;
	return a;
}

void
cagra_allowed_nodes(Relation index, const CagraMetaData *meta, CagraAllowed *a)
{
	if (a->bits)
		return;

	MemoryContext cxt = GetMemoryChunkContext(a);

	a->bits = (uint64 *) MemoryContextAllocExtended(cxt, sizeof(uint64) *
													Max(cagra_node_bitset_words(meta->n), (Size) 1),
													MCXT_ALLOC_HUGE | MCXT_ALLOC_ZERO);
	a->ids = (uint32 *) MemoryContextAllocExtended(cxt, sizeof(uint32) * (Size) Max(Min(a->rows.count, meta->n), 1),
												   MCXT_ALLOC_HUGE);
	a->count = 0;
	for (uint32 first = 0, end; first < meta->n && a->count < a->rows.count; first = end)
	{
		Buffer		buf = ReadBuffer(index, cagra_header_block(meta, first));
		Page		page;

		end = cagra_header_run_end(meta, first);
		LockBuffer(buf, BUFFER_LOCK_SHARE);
		page = BufferGetPage(buf);
		for (uint32 id = first; id < end; id++)
		{
			BlockNumber blkno;
			uint32		off;

			cagra_locate(meta, id, 0, &blkno, &off);

			const CagraNodeHeader *hdr = (const CagraNodeHeader *) ((const char *) page + off);

			if (cagra_node_is_live(hdr->flags) && cagra_allowed_tid(&a->rows, cagra_pack_tid(&hdr->heap_tid)))
			{
				a->bits[id >> 6] |= UINT64CONST(1) << (id & 63);
				a->ids[a->count++] = id;
			}
		}
		UnlockReleaseBuffer(buf);
		CHECK_FOR_INTERRUPTS();
	}
}

/* ---- ordering work by page ---- */

/* One candidate to look at: its page, its number, where on the page. */
typedef struct CagraWork
{
	uint32		block;
	uint32		cand;
	uint32		where;			/* headers: byte offset; heap: line pointer */
} CagraWork;

static int
cagra_cmp_work(const void *a, const void *b)
{
	const CagraWork *x = (const CagraWork *) a;
	const CagraWork *y = (const CagraWork *) b;

	if (x->block != y->block)
		return x->block < y->block ? -1 : 1;
	return x->cand < y->cand ? -1 : x->cand > y->cand ? 1 : 0;
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
	return cagra_pin_hinted(index, blkno, cagra_buffer_hint(index, blkno, nblocks));
}

/* Read the headers of the nodes of `cands` (candidate numbers into c), each
 * index page once: live nodes become LIVE with their heap TID, the rest
 * DROPPED. */
static void
cagra_read_headers(Relation index, const CagraMetaData *meta, CagraCandidates *c,
				   const uint32 *cands, uint32 count)
{
	BlockNumber nblocks = cagra_blocks_for(meta, meta->n);
	CagraWork  *work = (CagraWork *) cagra_scratch(CAGRA_SCRATCH_WORK, sizeof(CagraWork) * (Size) count);

	for (uint32 i = 0; i < count; i++)
	{
		work[i].cand = cands[i];
		cagra_locate(meta, c->ids[cands[i]], 0, &work[i].block, &work[i].where);
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
			uint32		s = sorted[i].cand;

			memcpy(&hdr, page + sorted[i].where, sizeof(hdr));
			if (cagra_node_is_live(hdr.flags))
			{
				c->state[s] = CAGRA_CAND_LIVE;
				c->tids[s] = hdr.heap_tid;
			}
			else
				c->state[s] = CAGRA_CAND_DROPPED;
		}
		UnlockReleaseBuffer(buf);
	}
}

/* ---- heap visibility ---- */

/* Buffer hints for the heap of the last cagra_search: as the index's
 * (storage.cpp), they save the shared buffer table lookup of blocks read by
 * earlier batches. */
static CagraBufferHints cagra_heap_hints;

static Buffer
cagra_pin_heap_block(Relation heap, BlockNumber blkno, BlockNumber nblocks)
{
	return cagra_pin_hinted(heap, blkno, cagra_hint_for(&cagra_heap_hints, heap, blkno, nblocks));
}

/* The heap TIDs of `cands`: the worker's copy's where the snapshot is MVCC
 * (see cagra_client_search: the heap check alone is then exact), the node
 * headers' for the rest. */
static void
cagra_take_copy_tids(Relation index, const CagraMetaData *meta, CagraCandidates *c, Snapshot snapshot,
					 const uint32 *cands, uint32 count)
{
	uint32	   *rest = (uint32 *) palloc(sizeof(uint32) * Max(count, 1));
	uint32		nrest = 0;

	for (uint32 i = 0; i < count; i++)
	{
		uint32		s = cands[i];

		if (c->copy_tids && c->copy_tids[s] != 0 && IsMVCCSnapshot(snapshot))
		{
			c->state[s] = CAGRA_CAND_LIVE;
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
 * Check the LIVE candidates of `cands` against the snapshot, heap block by heap
 * block: VISIBLE with the visible tuple's TID (a HOT chain's member, not
 * necessarily the index's TID), or DROPPED.  On all-visible pages of a heap
 * table the line pointers say it; elsewhere the table AM's index fetch
 * does (serializable transactions always take that path: it records the
 * predicate locks).
 */
static void
cagra_check_visibility(Relation heap, Snapshot snapshot, CagraCandidates *c, const uint32 *cands,
					   uint32 count, IndexFetchTableData *fetch, TupleTableSlot *slot)
{
	BlockNumber nblocks = RelationGetNumberOfBlocks(heap);
	bool		shortcut = heap->rd_tableam == GetHeapamTableAmRoutine() &&
		IsMVCCSnapshot(snapshot) && !IsolationIsSerializable();
	CagraWork  *work = (CagraWork *) cagra_scratch(CAGRA_SCRATCH_WORK, sizeof(CagraWork) * (Size) count);
	uint32		nlive = 0;
	Buffer		vmbuf = InvalidBuffer;

	for (uint32 i = 0; i < count; i++)
		if (c->state[cands[i]] == CAGRA_CAND_LIVE)
		{
			ItemPointer tid = &c->tids[cands[i]];

			/* blocks past the end (rows added since): last, any order */
			work[nlive].block = Min(ItemPointerGetBlockNumber(tid), nblocks);
			work[nlive].where = ItemPointerGetOffsetNumber(tid);
			work[nlive++].cand = cands[i];
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
				uint32		s = sorted[i].cand;
				OffsetNumber off = cagra_all_visible_member(page, (OffsetNumber) sorted[i].where);

				if (off != InvalidOffsetNumber)
				{
					c->state[s] = CAGRA_CAND_VISIBLE;
					ItemPointerSetOffsetNumber(&c->tids[s], off);
				}
				else
					c->state[s] = CAGRA_CAND_DROPPED;
			}
			UnlockReleaseBuffer(buf);
			continue;
		}
		for (; i < end; i++)
		{
			uint32		s = sorted[i].cand;
			ItemPointerData tid = c->tids[s];
			bool		call_again = false;
			bool		all_dead = false;

			if (table_index_fetch_tuple(fetch, &tid, snapshot, slot, &call_again, &all_dead))
			{
				c->state[s] = CAGRA_CAND_VISIBLE;
				c->tids[s] = slot->tts_tid;
			}
			else
				c->state[s] = CAGRA_CAND_DROPPED;
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
 * next round, or, widening, for at least as many as it took so far (a
 * long list of mostly dead candidates then takes a few rounds, not one
 * per k of them).  Each round reads its headers and heap pages in page
 * order.
 */
static void
cagra_resolve_rounds(Relation index, const CagraMetaData *meta, Relation heap, Snapshot snapshot,
					 const bool *present, uint32 k, CagraCandidates *c, bool widening)
{
	uint32	   *next = (uint32 *) palloc0(sizeof(uint32) * Max(c->nq, 1));	/* candidates taken */
	uint32	   *want = (uint32 *) palloc(sizeof(uint32) * Max(c->nq, 1));
	uint32	   *cands = (uint32 *) cagra_scratch(CAGRA_SCRATCH_CANDS, sizeof(uint32) * (Size) c->nq * c->kk);
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

			for (; next[q] < stop && row[next[q]] != cagra::kInvalidNode; next[q]++)
				cands[count++] = (uint32) ((Size) q * c->kk + next[q]);
		}
		if (count == 0)
			break;
		cagra_take_copy_tids(index, meta, c, snapshot, cands, count);
		cagra_check_visibility(heap, snapshot, c, cands, count, fetch, slot);

		/* the next round: what each query still lacks */
		for (int q = 0; q < c->nq; q++)
		{
			const uint8 *st = c->state + (Size) q * c->kk;
			uint32		visible = 0;

			if (!present[q])
				continue;
			for (uint32 i = 0; i < next[q]; i++)
				visible += st[i] == CAGRA_CAND_VISIBLE;
			want[q] = visible >= k ? 0 : widening ? Max(k - visible, next[q]) : k - visible;
		}
	}
	ExecDropSingleTupleTableSlot(slot);
	table_index_fetch_end(fetch);
	pfree(next);
	pfree(want);
}

void
cagra_resolve(Relation index, const CagraMetaData *meta, Relation heap, Snapshot snapshot,
			  const bool *present, uint32 k, CagraCandidates *c)
{
	cagra_resolve_rounds(index, meta, heap, snapshot, present, k, c, false);
}

void
cagra_resolve_widening(Relation index, const CagraMetaData *meta, Relation heap, Snapshot snapshot,
					   const bool *present, uint32 k, CagraCandidates *c)
{
	cagra_resolve_rounds(index, meta, heap, snapshot, present, k, c, true);
}
