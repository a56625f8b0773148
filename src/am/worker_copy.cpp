/*
 * worker_copy.cpp — index copies for the GPU worker read from the index
 * pages, and the exact search of the nodes a copy lacks (worker_copy.h).
 */
#include "am/worker_copy.h"

#include <cmath>

extern "C" {
#include "miscadmin.h"
}

/* ---- the copy's nodes, read page group by page group ---- */

typedef struct CagraPageSource
{
	Relation	index;
	const CagraMetaData *meta;
	char	   *group;			/* one node group: its pages' data concatenated */
	/* a ring of buffers, as a large sequential scan reads with: a copy of a
	 * many-gigabyte index must not evict every other session's pages */
	BufferAccessStrategy strategy;
} CagraPageSource;

void
cagra_read_node_group(Relation index, const CagraMetaData *meta, uint64 g, char *group, BufferAccessStrategy strategy)
{
	BlockNumber nblocks = cagra_blocks_for(meta, meta->n);
	BlockNumber first = (BlockNumber) (1 + g * meta->pages_per_group);
	BlockNumber end = Min(first + meta->pages_per_group, nblocks);

	for (BlockNumber blkno = end; blkno < Min(end + meta->pages_per_group, nblocks); blkno++)
		PrefetchBuffer(index, MAIN_FORKNUM, blkno);
	memset(group, 0, cagra_group_bytes(meta));
	for (BlockNumber blkno = first; blkno < end; blkno++)
	{
		Buffer		buf = ReadBufferExtended(index, MAIN_FORKNUM, blkno, RBM_NORMAL, strategy);

		LockBuffer(buf, BUFFER_LOCK_SHARE);
		memcpy(group + (uint64) (blkno - first) * CAGRA_PAGE_USABLE,
			   (char *) BufferGetPage(buf) + CAGRA_PAGE_DATA_START, CAGRA_PAGE_USABLE);
		UnlockReleaseBuffer(buf);
	}
}

static void
cagra_fill_from_pages(void *arg, uint32 n, CagraUploadPayload *p)
{
	CagraPageSource *src = (CagraPageSource *) arg;
	const CagraMetaData *meta = src->meta;
	char	   *vecs = cagra_upload_vectors(p);
	uint32	   *rows = cagra_upload_rows(p);
	uint8	   *live = cagra_upload_live(p);
	uint64	   *tids = cagra_upload_tids(p);
	uint32		degree = meta->graph_degree;
	uint32		vbytes = p->format.vector_bytes();
	uint32		per_group = meta->nodes_per_group;

	for (uint32 i = 0; i < p->count; i++)
	{
		uint32		id = p->first + i;
		uint32		in_group = id % per_group;

		if (i == 0 || in_group == 0)
			cagra_read_node_group(src->index, meta, id / per_group, src->group, src->strategy);

		CagraNodeHeader hdr;
		uint32	   *row = rows + (uint64) i * degree;

		cagra_group_copy_out(meta, src->group, in_group, 0, sizeof(hdr), &hdr);
		live[i] = cagra_node_is_live(hdr.flags) ? 1 : 0;
		tids[i] = cagra_pack_tid(&hdr.heap_tid);
		cagra_group_copy_out(meta, src->group, in_group, CAGRA_ROW_OFFSET, degree * sizeof(uint32), row);
		for (uint32 j = 0; j < degree; j++)
			if (row[j] >= n)
				row[j] = cagra::kInvalidNode;	/* appended later */
		cagra_group_copy_out(meta, src->group, in_group, cagra_vector_offset(degree), vbytes,
							 vecs + (uint64) i * vbytes);
		if ((i & 4095) == 4095)
			CHECK_FOR_INTERRUPTS();
	}
}

static CagraIndexKey
cagra_copy_key(Relation index, const CagraMetaData *meta)
{
	CagraIndexKey key;

	memset(&key, 0, sizeof(key));
	key.db = MyDatabaseId;
	key.index = RelationGetRelid(index);
	key.relfilenode = CAGRA_REL_FILE_NUMBER(index);
	key.tablespace = CAGRA_REL_TABLESPACE(index);
	key.backend = index->rd_backend;
	key.generation = meta->generation;
	key.n = meta->n;
	key.reused = meta->reused;
	key.linked = cagra_first_unlinked(meta);
	return key;
}

/* ---- what inserts changed, sent to the copy ---- */

/*
 * An update of the worker's copy: the nodes it lacks, read whole (header,
 * row and vector, each node's record at once), and the nodes their rows
 * point at, whose rows took their reverse edges (an insert links only its
 * own neighbours to it).  A row is missed only when it took a new node's
 * reverse edge and then left that node's row to a later insert's edge,
 * the hand-off keeping it out of every new row: the copy may lack such an
 * edge until its next whole upload (cagra_cache_update bounds how long).
 */
typedef struct CagraCopyUpdateRead
{
	Relation	index;
	const CagraMetaData *meta;
	uint32		nodes;
	uint32	   *node_ids;
	char	   *records;		/* nodes x record_bytes, as the pages hold them */
	uint32		record_bytes;
	uint32		rows;
	uint32	   *row_ids;
	CagraCopyExtent after;		/* linked and linked_after of the copy after it */
} CagraCopyUpdateRead;

/* Edges to nodes the copy will not hold (appended since the meta page was
 * read) as padding. */
static void
cagra_copy_row_out(const CagraMetaData *meta, const uint32 *row, uint32 *out)
{
	for (uint32 j = 0; j < meta->graph_degree; j++)
		out[j] = row[j] < meta->n ? row[j] : cagra::kInvalidNode;
}

static void
cagra_fill_update(void *arg, CagraUpdatePayload *p)
{
	CagraCopyUpdateRead *u = (CagraCopyUpdateRead *) arg;
	const CagraMetaData *meta = u->meta;
	uint32		degree = meta->graph_degree;
	uint32		vbytes = p->format.vector_bytes();
	uint32		voff = cagra_vector_offset(degree);
	uint32	   *row = (uint32 *) palloc(sizeof(uint32) * degree);

	memcpy(p->linked_after, u->after.linked_after, sizeof(p->linked_after));
	p->entry_count = Min(meta->entry_count, (uint32) CAGRA_MAX_ENTRY_NODES);
	memcpy(p->entries, meta->entries, p->entry_count * sizeof(uint32));
	memcpy(cagra_update_node_ids(p), u->node_ids, sizeof(uint32) * u->nodes);
	for (uint32 i = 0; i < u->nodes; i++)
	{
		const char *rec = u->records + (Size) i * u->record_bytes;
		CagraNodeHeader hdr;

		memcpy(&hdr, rec, sizeof(hdr));
		cagra_update_node_live(p)[i] = cagra_node_is_live(hdr.flags) ? 1 : 0;
		cagra_update_node_tids(p)[i] = cagra_pack_tid(&hdr.heap_tid);
		memcpy(row, rec + CAGRA_ROW_OFFSET, sizeof(uint32) * degree);
		cagra_copy_row_out(meta, row, cagra_update_node_rows(p) + (Size) i * degree);
		memcpy(cagra_update_node_vectors(p) + (Size) i * vbytes, rec + voff, vbytes);
	}
	memcpy(cagra_update_row_ids(p), u->row_ids, sizeof(uint32) * u->rows);
	for (uint32 i = 0; i < u->rows; i++)
	{
		cagra_read_record_bytes(u->index, meta, u->row_ids[i], CAGRA_ROW_OFFSET, sizeof(uint32) * degree, row);
		cagra_copy_row_out(meta, row, cagra_update_rows(p) + (Size) i * degree);
		if ((i & 1023) == 1023)
			CHECK_FOR_INTERRUPTS();
	}
	pfree(row);
}

/*
 * Bring the worker's copy (extent `copy`, older than `meta` by inserts)
 * to `key` when its tail has grown long: the appended nodes, the nodes it
 * holds unlinked that are linked now, the slots reused since, and the rows
 * those nodes point at.  When the copy does not take it, nothing changes:
 * the next searches merge the tail as before.
 */
static void
cagra_update_worker_copy(Relation index, const CagraMetaData *meta, const CagraIndexKey *key,
						 const CagraCopyExtent *copy)
{
	uint32		degree = meta->graph_degree;
	uint32		appended = meta->n - copy->n;
	uint64		reused = meta->reused - copy->reused;
	uint32		held_from = Min(copy->linked, copy->n);
	CagraCopyUpdateRead u;
	uint64	   *sent;

	if (reused > CAGRA_REUSE_LOG)
		return;					/* the log no longer names them all */
	u.index = index;
	u.meta = meta;
	u.record_bytes = cagra_vector_offset(degree) + cagra_format_of(meta).vector_bytes();
	u.node_ids = (uint32 *) palloc(sizeof(uint32) * (appended + (copy->n - held_from) + reused + 1));
	u.nodes = 0;
	sent = (uint64 *) palloc0(sizeof(uint64) * cagra_node_bitset_words(meta->n));
	for (uint32 i = 0; i < appended; i++)
		u.node_ids[u.nodes++] = copy->n + i;
	for (uint32 id = held_from; id < copy->n; id++)
		if (!cagra_copy_holds_linked(copy, id) && !cagra_node_unlinked(index, meta, id))
			u.node_ids[u.nodes++] = id;
	for (uint32 i = 0; i < u.nodes; i++)
		sent[u.node_ids[i] >> 6] |= UINT64CONST(1) << (u.node_ids[i] & 63);
	for (uint64 r = 0; r < reused; r++)
	{
		uint32		id = meta->reuse_log[(copy->reused + r) % CAGRA_REUSE_LOG];

		if (!cagra_node_bit(sent, id))
		{
			sent[id >> 6] |= UINT64CONST(1) << (id & 63);
			u.node_ids[u.nodes++] = id;
		}
	}
	u.records = (char *) palloc((Size) u.nodes * u.record_bytes + 1);

	/* what the copy will hold linked past the key's first unlinked node:
	 * what it held, and the nodes sent linked */
	memset(&u.after, 0, sizeof(u.after));
	u.after.n = meta->n;
	u.after.linked = key->linked;
	for (uint32 id = key->linked; id < copy->n && id - key->linked < CAGRA_LINKED_WINDOW; id++)
		if (!cagra_node_bit(sent, id) && cagra_copy_holds_linked(copy, id))
			cagra_copy_mark_linked(&u.after, id);

	/* the nodes whole, and the set of the rows they point at */
	u.row_ids = (uint32 *) palloc(sizeof(uint32) * ((Size) u.nodes * degree + 1));
	u.rows = 0;
	for (uint32 i = 0; i < u.nodes; i++)
	{
		char	   *rec = u.records + (Size) i * u.record_bytes;
		const uint32 *row = (const uint32 *) (rec + CAGRA_ROW_OFFSET);
		CagraNodeHeader hdr;

		cagra_read_record_bytes(index, meta, u.node_ids[i], 0, u.record_bytes, rec);
		memcpy(&hdr, rec, sizeof(hdr));
		if (!(hdr.flags & CAGRA_NODE_UNLINKED))
			cagra_copy_mark_linked(&u.after, u.node_ids[i]);
		for (uint32 j = 0; j < degree; j++)
			if (row[j] < meta->n && !cagra_node_bit(sent, row[j]))
			{
				sent[row[j] >> 6] |= UINT64CONST(1) << (row[j] & 63);
				u.row_ids[u.rows++] = row[j];
			}
		if ((i & 255) == 255)
			CHECK_FOR_INTERRUPTS();
	}
	(void) cagra_client_update_copy(key, copy, cagra_format_of(meta), degree, u.nodes, u.rows, cagra_fill_update,
									&u);
	pfree(sent);
	pfree(u.row_ids);
	pfree(u.records);
	pfree(u.node_ids);
}

/* Nodes inserted since the copy of extent `copy` was made that it lacks
 * for certain: appended, reused, or linked before the first unlinked node
 * of `meta` but held unlinked. */
static uint64
cagra_copy_lag(const CagraMetaData *meta, const CagraCopyExtent *copy)
{
	uint64		lag = (uint64) (meta->n - Min(copy->n, meta->n)) + (meta->reused - copy->reused);
	uint32		linked_now = Min(cagra_first_unlinked(meta), copy->n);

	for (uint32 id = Min(copy->linked, linked_now); id < linked_now; id++)
		lag += !cagra_copy_holds_linked(copy, id);
	return lag;
}

CagraOffload
cagra_search_through_worker(Relation index, const CagraMetaData *meta, const CagraSearchRequest *req,
							uint32 nq, const float *queries, const CagraAllowedTids *allowed, uint32 *ids,
							float *dists, uint64 *tids, uint32 *plans, CagraCopyExtent *copy, char *why,
							size_t whylen)
{
	CagraIndexKey key = cagra_copy_key(index, meta);
	CagraPageSource pages;
	CagraCopySource source;

	pages.index = index;
	pages.meta = meta;
	pages.group = NULL;
	pages.strategy = NULL;
	source.format = cagra_format_of(meta);
	source.degree = meta->graph_degree;
	source.entry_count = meta->entry_count;
	source.entries = meta->entries;
	source.chunk_nodes = meta->nodes_per_group;
	source.fill = cagra_fill_from_pages;
	source.arg = &pages;
	pages.group = (char *) palloc((Size) cagra_group_bytes(meta));
	pages.strategy = GetAccessStrategy(BAS_BULKREAD);

	CagraOffload r = cagra_client_search(&key, &source, req, nq, queries, allowed, ids, dists, tids, plans,
										 copy, why, whylen);

	FreeAccessStrategy(pages.strategy);
	pfree(pages.group);
	if (r == CAGRA_OFFLOAD_OK && copy->takes_updates && cagra_copy_lag(meta, copy) >= cagra_copy_update_at(copy->n) &&
		cagra_client_claim_update())
	{
		PG_TRY();
		{
			cagra_update_worker_copy(index, meta, &key, copy);
		}
		PG_FINALLY();
		{
			cagra_client_release_update();
		}
		PG_END_TRY();
	}
	return r;
}

float *
cagra_search_begin_through_worker(Relation index, const CagraMetaData *meta, const CagraSearchRequest *req,
								  uint32 nq, CagraSearchPending *pending)
{
	CagraIndexKey key = cagra_copy_key(index, meta);

	return cagra_client_search_begin(&key, cagra_format_of(meta).dim, req, nq, pending);
}

/* ---- nodes the copy lacks ---- */

/*
 * The nodes this backend read for its last merge, kept for the next: a
 * backend that inserts or searches again reads only the nodes inserted
 * since.  A counted node's header and vector change only when a vacuum
 * deletes it (and an insert takes its slot after that), and a vacuum adds
 * one to the meta page's generation without counting a node, while each
 * insert adds one and counts one: generation - n - reused (the epoch)
 * stays the same exactly while only inserts came between.  Within an
 * epoch the i-th appended node and the slot the i-th insert into a freed
 * slot took (reuse_log) hold what they held when they were counted.
 */
typedef struct CagraTailRun
{
	uint64		first;			/* positions first .. first + count - 1 */
	uint32		count;
	uint32		capacity;
	uint32	   *ids;
	uint64	   *tids;			/* packed heap TIDs; 0: not live */
	char	   *vecs;
} CagraTailRun;

typedef struct CagraTailCache
{
	Oid			index;
	Oid			relfilenode;
	uint64		epoch;
	uint32		vector_bytes;
	CagraTailRun appended;		/* position: the node id */
	CagraTailRun reused;		/* position: inserts into freed slots so far */
} CagraTailCache;

static CagraTailCache tail_cache;

/* Make `run` hold positions [from, to), node id_of(position) each. */
template <class IdOf>
static void
cagra_tail_run_cover(Relation index, const CagraMetaData *meta, CagraTailRun *run, uint64 from, uint64 to,
					 IdOf id_of)
{
	uint32		vbytes = tail_cache.vector_bytes;
	uint32		voff = cagra_vector_offset(meta->graph_degree);

	if (from < run->first || from > run->first + run->count)
	{
		run->first = from;
		run->count = 0;
	}
	else if (from > run->first)
	{
		/* a newer copy holds the first ones */
		uint32		drop = (uint32) (from - run->first);

		run->count -= drop;
		memmove(run->ids, run->ids + drop, (Size) run->count * sizeof(uint32));
		memmove(run->tids, run->tids + drop, (Size) run->count * sizeof(uint64));
		memmove(run->vecs, run->vecs + (Size) drop * vbytes, (Size) run->count * vbytes);
		run->first = from;
	}
	if (to - run->first > run->capacity)
	{
		uint32		capacity = (uint32) Max(to - run->first, 2 * (uint64) run->capacity);

		if (run->tids == NULL)
		{
			run->ids = (uint32 *) MemoryContextAllocHuge(TopMemoryContext, (Size) capacity * sizeof(uint32));
			run->tids = (uint64 *) MemoryContextAllocHuge(TopMemoryContext, (Size) capacity * sizeof(uint64));
			run->vecs = (char *) MemoryContextAllocHuge(TopMemoryContext, (Size) capacity * vbytes);
		}
		else
		{
			run->ids = (uint32 *) repalloc_huge(run->ids, (Size) capacity * sizeof(uint32));
			run->tids = (uint64 *) repalloc_huge(run->tids, (Size) capacity * sizeof(uint64));
			run->vecs = (char *) repalloc_huge(run->vecs, (Size) capacity * vbytes);
		}
		run->capacity = capacity;
	}
	while (run->first + run->count < to)
	{
		uint32		id = id_of(run->first + run->count);
		CagraNodeHeader hdr;

		cagra_read_record_bytes(index, meta, id, 0, sizeof(hdr), &hdr);
		run->ids[run->count] = id;
		run->tids[run->count] = cagra_node_is_live(hdr.flags) ? cagra_pack_tid(&hdr.heap_tid) : 0;
		if (run->tids[run->count] != 0)
			cagra_read_record_bytes(index, meta, id, voff, vbytes, run->vecs + (Size) run->count * vbytes);
		run->count++;
	}
}

/* Make tail_cache hold the nodes appended from `from` on and the slots of
 * the inserts into freed slots from the `reused_from`-th on. */
static void
cagra_tail_cache_cover(Relation index, const CagraMetaData *meta, uint32 from, uint64 reused_from)
{
	CagraTailCache *c = &tail_cache;
	uint32		vbytes = cagra_format_of(meta).vector_bytes();
	uint64		epoch = meta->generation - meta->n - meta->reused;

	if (c->index != RelationGetRelid(index) || c->relfilenode != CAGRA_REL_FILE_NUMBER(index) ||
		c->epoch != epoch || c->vector_bytes != vbytes)
	{
		c->index = RelationGetRelid(index);
		c->relfilenode = CAGRA_REL_FILE_NUMBER(index);
		c->epoch = epoch;
		c->vector_bytes = vbytes;
		c->appended.count = 0;
		c->reused.count = 0;
	}
	cagra_tail_run_cover(index, meta, &c->appended, from, meta->n, [](uint64 pos) { return (uint32) pos; });
	cagra_tail_run_cover(index, meta, &c->reused, reused_from, meta->reused,
						 [meta](uint64 pos) { return meta->reuse_log[pos % CAGRA_REUSE_LOG]; });
}

/* Nodes `ids` at distances `d` merged into a query's `kk` results (`row`,
 * `rowd`, closest first): each closer than the last and not there yet goes
 * in its place, the last dropped. */
static void
cagra_merge_into_row(uint32 *row, float *rowd, uint32 kk, const uint32 *ids, const float *d, uint32 n)
{
	for (uint32 t = 0; t < n; t++)
	{
		uint32		pos = kk - 1;

		if (!(d[t] < rowd[kk - 1]))
			continue;

		bool		present_already = false;

		for (uint32 j = 0; j < kk && !present_already; j++)
			present_already = row[j] == ids[t];
		if (present_already)
			continue;
		/* insert into the sorted row, dropping the last */
		while (pos > 0 && rowd[pos - 1] > d[t])
		{
			row[pos] = row[pos - 1];
			rowd[pos] = rowd[pos - 1];
			pos--;
		}
		row[pos] = ids[t];
		rowd[pos] = d[t];
	}
}

void
cagra_merge_tail(Relation index, const CagraMetaData *meta, const CagraCopyExtent *copy, int nq,
				 const float *queries, const bool *present, const CagraAllowedTids *allowed, uint32 kk,
				 uint32 *ids, float *dists)
{
	cagra::VectorFormat format = cagra_format_of(meta);
	uint32		from = Min(Min(copy->n, copy->linked), meta->n);
	uint64		reused_from = Min(copy->reused, meta->reused);
	uint32		nreused = (uint32) Min(meta->reused - reused_from, (uint64) CAGRA_REUSE_LOG);
	uint32		span = meta->n - from + nreused;
	uint32		vbytes = format.vector_bytes();
	uint32	   *tail_ids = (uint32 *) palloc(sizeof(uint32) * Max(span, (uint32) 1));
	const char **tail_vecs = (const char **) palloc(sizeof(char *) * Max(span, (uint32) 1));
	float	   *d = (float *) palloc(sizeof(float) * Max(span, (uint32) 1));
	uint32		ntail = 0;
	CagraStatus st;

	/* the appended nodes, then the reused slots (all below `from`) */
	cagra_tail_cache_cover(index, meta, from, meta->reused - nreused);
	for (const CagraTailRun *run : {&tail_cache.appended, &tail_cache.reused})
		for (uint32 i = 0; i < run->count; i++)
		{
			uint64		tid = run->tids[i];
			bool		reused = run == &tail_cache.reused;

			/* (a run may hold nodes counted after this meta page was read) */
			if (tid == 0 || run->first + i >= (reused ? meta->reused : meta->n) || (reused && run->ids[i] >= from) ||
				(!reused && cagra_copy_holds_linked(copy, run->ids[i])) || (allowed && !cagra_allowed_tid(allowed, tid)))
				continue;
			tail_vecs[ntail] = run->vecs + (Size) i * vbytes;
			tail_ids[ntail++] = run->ids[i];
		}
	for (int q = 0; q < nq && ntail > 0; q++)
	{
		uint32	   *row = ids + (Size) q * kk;
		float	   *rowd = dists + (Size) q * kk;
		const float *query = queries + (Size) q * meta->dims;

		if (present && !present[q])
			continue;
		if (!cagra_guard(&st, [&] {
				for (uint32 t = 0; t < ntail; t++)
					d[t] = format.distance(query, tail_vecs[t]);
			}))
			cagra_report_status(&st);
		cagra_merge_into_row(row, rowd, kk, tail_ids, d, ntail);
		CHECK_FOR_INTERRUPTS();
	}
	pfree(tail_ids);
	pfree(tail_vecs);
	pfree(d);
}
