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
	return key;
}

CagraOffload
cagra_search_through_worker(Relation index, const CagraMetaData *meta, const CagraSearchRequest *req,
							uint32 nq, const float *queries, const CagraAllowedTids *allowed, uint32 *ids,
							float *dists, uint64 *tids, CagraCopyExtent *copy, char *why, size_t whylen)
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

	CagraOffload r = cagra_worker_search(&key, &source, req, nq, queries, allowed, ids, dists, tids, copy,
										 why, whylen);

	FreeAccessStrategy(pages.strategy);
	pfree(pages.group);
	return r;
}

float *
cagra_search_begin_through_worker(Relation index, const CagraMetaData *meta, const CagraSearchRequest *req,
								  uint32 nq, CagraSearchPending *pending)
{
	CagraIndexKey key = cagra_copy_key(index, meta);

	return cagra_worker_search_begin(&key, cagra_format_of(meta).dim, req, nq, pending);
}

/* ---- nodes the copy lacks ---- */

/*
 * The appended nodes this backend read for its last merge, kept for the
 * next: a backend that inserts or searches again reads only the nodes
 * appended since.  A counted node's header and vector change only when a
 * vacuum deletes it (and an insert takes its slot after that), and a
 * vacuum adds one to the meta page's generation without counting a node,
 * while each insert adds one and counts one: generation - n - reused (the
 * epoch) stays the same exactly while only inserts came between.
 */
typedef struct CagraTailCache
{
	Oid			index;
	Oid			relfilenode;
	uint64		epoch;
	uint32		vector_bytes;
	uint32		first;			/* nodes first .. first + count - 1 */
	uint32		count;
	uint32		capacity;
	uint64	   *tids;			/* packed heap TIDs; 0: not live */
	char	   *vecs;
} CagraTailCache;

static CagraTailCache tail_cache;

/* Make tail_cache hold nodes [from, meta->n) of `index`. */
static void
cagra_tail_cache_cover(Relation index, const CagraMetaData *meta, uint32 from)
{
	CagraTailCache *c = &tail_cache;
	uint32		vbytes = cagra_format_of(meta).vector_bytes();
	uint64		epoch = meta->generation - meta->n - meta->reused;
	uint32		voff = cagra_vector_offset(meta->graph_degree);

	if (c->index != RelationGetRelid(index) || c->relfilenode != CAGRA_REL_FILE_NUMBER(index) ||
		c->epoch != epoch || c->vector_bytes != vbytes || from < c->first || from > c->first + c->count)
	{
		c->index = RelationGetRelid(index);
		c->relfilenode = CAGRA_REL_FILE_NUMBER(index);
		c->epoch = epoch;
		c->vector_bytes = vbytes;
		c->first = from;
		c->count = 0;
	}
	else if (from > c->first)
	{
		/* a newer copy holds the first ones */
		uint32		drop = from - c->first;

		c->count -= drop;
		memmove(c->tids, c->tids + drop, (Size) c->count * sizeof(uint64));
		memmove(c->vecs, c->vecs + (Size) drop * vbytes, (Size) c->count * vbytes);
		c->first = from;
	}
	if (meta->n - c->first > c->capacity)
	{
		uint32		capacity = Max(meta->n - c->first, 2 * c->capacity);

		if (c->tids == NULL)
		{
			c->tids = (uint64 *) MemoryContextAllocHuge(TopMemoryContext, (Size) capacity * sizeof(uint64));
			c->vecs = (char *) MemoryContextAllocHuge(TopMemoryContext, (Size) capacity * vbytes);
		}
		else
		{
			c->tids = (uint64 *) repalloc_huge(c->tids, (Size) capacity * sizeof(uint64));
			c->vecs = (char *) repalloc_huge(c->vecs, (Size) capacity * vbytes);
		}
		c->capacity = capacity;
	}
	while (c->first + c->count < meta->n)
	{
		uint32		id = c->first + c->count;
		CagraNodeHeader hdr;

		cagra_read_record_bytes(index, meta, id, 0, sizeof(hdr), &hdr);
		c->tids[c->count] = cagra_node_is_live(hdr.flags) ? cagra_pack_tid(&hdr.heap_tid) : 0;
		if (c->tids[c->count] != 0)
			cagra_read_record_bytes(index, meta, id, voff, vbytes, c->vecs + (Size) c->count * vbytes);
		c->count++;
	}
}

void
cagra_merge_tail(Relation index, const CagraMetaData *meta, const CagraCopyExtent *copy, int nq,
				 const float *queries, const bool *present, const CagraAllowedTids *allowed, uint32 kk,
				 uint32 *ids, float *dists)
{
	cagra::VectorFormat format = cagra_format_of(meta);
	uint32		from = Min(copy->n, meta->n);
	uint64		reused_from = Min(copy->reused, meta->reused);
	uint32		nreused = (uint32) Min(meta->reused - reused_from, (uint64) CAGRA_REUSE_LOG);
	uint32		span = meta->n - from + nreused;
	uint32		vbytes = format.vector_bytes();
	uint32	   *tail_ids = (uint32 *) palloc(sizeof(uint32) * Max(span, (uint32) 1));
	const char **tail_vecs = (const char **) palloc(sizeof(char *) * Max(span, (uint32) 1));
	char	   *reused_vecs = (char *) palloc((Size) Max(nreused, (uint32) 1) * vbytes);
	float	   *d = (float *) palloc(sizeof(float) * Max(span, (uint32) 1));
	uint32		voff = cagra_vector_offset(meta->graph_degree);
	uint32		ntail = 0;
	CagraStatus st;

	/* the appended nodes, then the reused slots (all below `from`) */
	cagra_tail_cache_cover(index, meta, from);
	for (uint32 i = 0; i < meta->n - from; i++)
	{
		uint64		tid = tail_cache.tids[i];

		if (tid == 0 || (allowed && !cagra_allowed_tid(allowed, tid)))
			continue;
		tail_vecs[ntail] = tail_cache.vecs + (Size) i * vbytes;
		tail_ids[ntail++] = from + i;
	}
	for (uint32 r = 0; r < nreused; r++)
	{
		uint32		id = meta->reuse_log[(reused_from + r) % CAGRA_REUSE_LOG];
		CagraNodeHeader hdr;
		char	   *vec = reused_vecs + (Size) r * vbytes;

		if (id >= from)
			continue;

		cagra_read_record_bytes(index, meta, id, 0, sizeof(hdr), &hdr);
		if (!cagra_node_is_live(hdr.flags) || (allowed && !cagra_allowed_tid(allowed, cagra_pack_tid(&hdr.heap_tid))))
			continue;
		cagra_read_record_bytes(index, meta, id, voff, vbytes, vec);
		tail_vecs[ntail] = vec;
		tail_ids[ntail++] = id;
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
		for (uint32 t = 0; t < ntail; t++)
		{
			uint32		pos = kk - 1;

			if (!(d[t] < rowd[kk - 1]))
				continue;

			bool		present_already = false;

			for (uint32 j = 0; j < kk && !present_already; j++)
				present_already = row[j] == tail_ids[t];
			if (present_already)
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
	pfree(tail_vecs);
	pfree(reused_vecs);
	pfree(d);
}
