/*
 * scan.cpp — index scans (ambeginscan, amrescan, amgettuple, amendscan) and
 * the page accessor the core's Searcher walks the graph with.
 *
 * A scan reads the meta page on its first amgettuple, prepares the ORDER BY
 * argument, and asks the Searcher for itopk_size results at a time; when the
 * executor keeps asking (filters, large LIMIT) the same Searcher continues,
 * up to cagra.max_scan_tuples rows in all.  Deleted nodes are traversed,
 * never returned.  When the GPU worker serves the search, its results come
 * first and the CPU Searcher takes over if the executor wants more.
 */
#include "am/accessor.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>

#include "core/search.h"
#include "vector.h"
#include "worker/client.h"

extern "C" {
#include "access/relscan.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
}

/* ---- the entry-vector cache ----
 *
 * Every search starts by measuring the distance to all fixed entry nodes
 * (hundreds), one page access each.  Node vectors never change (slots are
 * not reused; REINDEX gives a new relfilenode), so each backend keeps the
 * entry vectors of the indexes it searched, contiguous in memory.  Flags can
 * change (vacuum): they are read from the page when the node is a result.
 */
struct CagraEntryVectors
{
	RelFileNode node;
	uint32_t	count = 0;
	uint32_t	dims = 0;
	std::vector<std::pair<uint32_t, uint32_t>> rows;	/* (id, row), sorted by id */
	std::vector<float> vectors;							/* count x dims */
	cagra::EntryIndex entry_index;	/* pivots and groups: a search measures a few entries */

	const float *find(uint32_t id) const
	{
		auto		it = std::lower_bound(rows.begin(), rows.end(), std::make_pair(id, 0u));

		if (it == rows.end() || it->first != id)
			return nullptr;
		return vectors.data() + (size_t) it->second * dims;
	}
};

/* At most this many bytes of entry vectors per index, and indexes kept. */
static const size_t kEntryCacheBytes = 8 * 1024 * 1024;
static const size_t kEntryCacheIndexes = 4;
static std::vector<std::shared_ptr<const CagraEntryVectors>> cagra_entry_cache;

static std::shared_ptr<const CagraEntryVectors>
cagra_entry_vectors(const CagraPageAccessor &acc, Relation index, const CagraMetaData &meta)
{
	if (meta.entry_count == 0 || (size_t) meta.entry_count * meta.dims * sizeof(float) > kEntryCacheBytes)
		return nullptr;
	for (const auto &e : cagra_entry_cache)
		if (RelFileNodeEquals(e->node, index->rd_node) && e->count == meta.entry_count && e->dims == meta.dims)
			return e;

	auto		e = std::make_shared<CagraEntryVectors>();

	e->node = index->rd_node;
	e->count = meta.entry_count;
	e->dims = meta.dims;
	e->vectors.resize((size_t) meta.entry_count * meta.dims);
	for (uint32_t r = 0; r < meta.entry_count; r++)
	{
		acc.read_vector(meta.entries[r], e->vectors.data() + (size_t) r * meta.dims, nullptr);
		e->rows.push_back({meta.entries[r], r});
	}
	std::sort(e->rows.begin(), e->rows.end());
	e->entry_index = cagra::derive_entry_index(acc, std::vector<uint32_t>(meta.entries, meta.entries + meta.entry_count));
	if (cagra_entry_cache.size() >= kEntryCacheIndexes)
		cagra_entry_cache.erase(cagra_entry_cache.begin());
	cagra_entry_cache.push_back(e);
	return e;
}

/* ---- the accessor ---- */

CagraPageAccessor::CagraPageAccessor(Relation index, const CagraMetaData &meta, bool record_nodes,
									 bool keep_pins)
	: index_(index), meta_(meta), record_(record_nodes), vecbuf_(meta.dims), keep_pins_(keep_pins)
{
	/* never hold so many pins that other backends run out of buffers */
	max_pins_ = (uint32_t) Min(1024, NBuffers / 64);
	nblocks_ = cagra_blocks_for(&meta_, meta_.n);
	if (keep_pins_)
	{
		pins_.assign(nblocks_, InvalidBuffer);
		entry_vectors_ = cagra_entry_vectors(*this, index_, meta_);
	}
}

Buffer
CagraPageAccessor::lock_page(BlockNumber blkno) const
{
	if (!keep_pins_ || blkno >= pins_.size())
		return cagra_read_locked_buffer(index_, blkno, BUFFER_LOCK_SHARE,
										cagra_buffer_hint(index_, blkno, nblocks_));

	Buffer		buf = pins_[blkno];

	if (buf == InvalidBuffer)
	{
		buf = cagra_read_locked_buffer(index_, blkno, BUFFER_LOCK_SHARE,
									   cagra_buffer_hint(index_, blkno, nblocks_));
		if (pinned_.size() < max_pins_)
		{
			pins_[blkno] = buf;
			pinned_.push_back(blkno);
		}
		return buf;
	}
	LockBuffer(buf, BUFFER_LOCK_SHARE);
	return buf;
}

void
CagraPageAccessor::unlock_page(Buffer buf) const
{
	BlockNumber blkno = BufferGetBlockNumber(buf);

	if (keep_pins_ && blkno < pins_.size() && pins_[blkno] == buf)
		LockBuffer(buf, BUFFER_LOCK_UNLOCK);
	else
		UnlockReleaseBuffer(buf);
}

void
CagraPageAccessor::release_pins()
{
	for (BlockNumber blkno : pinned_)
		ReleaseBuffer(pins_[blkno]);
	for (BlockNumber blkno : pinned_)
		pins_[blkno] = InvalidBuffer;
	pinned_.clear();
}

const uint32_t *
CagraPageAccessor::neighbors(uint32_t id, uint32_t *scratch) const
{
	BlockNumber blkno;
	uint32		off;

	cagra_locate(&meta_, id, CAGRA_ROW_OFFSET, &blkno, &off);
	Buffer		buf = lock_page(blkno);

	memcpy(scratch, (char *) BufferGetPage(buf) + off, meta_.graph_degree * sizeof(uint32));
	unlock_page(buf);
	for (uint32_t j = 0; j < meta_.graph_degree; j++)
		if (scratch[j] >= meta_.n)
			scratch[j] = cagra::kInvalidNode;
	return scratch;
}

void
CagraPageAccessor::read_vector(uint32_t id, float *out, NodeInfo *info) const
{
	uint32		offset = 0;
	uint32		len = meta_.dims * sizeof(float);
	uint32		voff = cagra_vector_offset(meta_.graph_degree);
	char	   *dst = (char *) out;

	/* the header is on the node's first page */
	BlockNumber blkno;
	uint32		poff;

	cagra_locate(&meta_, id, 0, &blkno, &poff);
	Buffer		buf = lock_page(blkno);
	const CagraNodeHeader *hdr = (const CagraNodeHeader *) ((char *) BufferGetPage(buf) + poff);

	if (info)
	{
		info->heap_tid = hdr->heap_tid;
		info->flags = hdr->flags;
	}
	unlock_page(buf);

	while (len > 0)
	{
		cagra_locate(&meta_, id, voff + offset, &blkno, &poff);
		uint32		chunk = Min(len, BLCKSZ - poff);

		buf = lock_page(blkno);
		memcpy(dst + offset, (char *) BufferGetPage(buf) + poff, chunk);
		unlock_page(buf);
		offset += chunk;
		len -= chunk;
	}
}

float
CagraPageAccessor::distance_to(const float *query, uint32_t id, NodeInfo *info) const
{
	if (meta_.pages_per_node > 1)
	{
		read_vector(id, vecbuf_.data(), info);
		return cagra::distance(metric(), query, vecbuf_.data(), meta_.dims);
	}

	/* One page holds the whole record: compute on the page, under its lock. */
	BlockNumber blkno;
	uint32		poff;

	cagra_locate(&meta_, id, 0, &blkno, &poff);
	Buffer		buf = lock_page(blkno);
	const char *rec = (const char *) BufferGetPage(buf) + poff;
	const CagraNodeHeader *hdr = (const CagraNodeHeader *) rec;

	info->heap_tid = hdr->heap_tid;
	info->flags = hdr->flags;
	float		d = cagra::distance(metric(), query,
									(const float *) (rec + cagra_vector_offset(meta_.graph_degree)),
									meta_.dims);

	unlock_page(buf);
	return d;
}

const cagra::EntryIndex *
CagraPageAccessor::entry_index() const
{
	return entry_vectors_ && !entry_vectors_->entry_index.empty() ? &entry_vectors_->entry_index : nullptr;
}

std::unique_ptr<cagra::Searcher<CagraPageAccessor>>
cagra_new_searcher(const CagraPageAccessor &acc, const float *query, const cagra::SearchParams &params,
				   const std::vector<uint32_t> &entries)
{
	const cagra::EntryIndex *entry_index = acc.entry_index();

	if (entry_index)
		return std::make_unique<cagra::Searcher<CagraPageAccessor>>(acc, query, params, *entry_index);
	return std::make_unique<cagra::Searcher<CagraPageAccessor>>(acc, query, params, entries);
}

bool
CagraPageAccessor::cached_distance(const float *query, uint32_t id, float *out) const
{
	const float *v = entry_vectors_ ? entry_vectors_->find(id) : nullptr;

	if (!v)
		return false;
	*out = cagra::distance(metric(), query, v, meta_.dims);
	if (record_)
	{
		NodeInfo	info;

		ItemPointerSetInvalid(&info.heap_tid);
		info.flags = CAGRA_NODE_UNCHECKED;
		seen_.emplace(id, info);
	}
	return true;
}

Buffer
CagraPageAccessor::pin_page(BlockNumber blkno, bool *transient) const
{
	if (blkno < pins_.size() && pins_[blkno] != InvalidBuffer)
	{
		*transient = false;
		return pins_[blkno];
	}

	Buffer		buf = cagra_read_locked_buffer(index_, blkno, BUFFER_LOCK_UNLOCK,
											   cagra_buffer_hint(index_, blkno, nblocks_));

	*transient = !(blkno < pins_.size() && pinned_.size() < max_pins_);
	if (!*transient)
	{
		pins_[blkno] = buf;
		pinned_.push_back(blkno);
	}
	return buf;
}

/*
 * A scan's distances in two passes: pin every page and prefetch the records
 * first, then lock, compute and unlock one page at a time, so the memory
 * latency of the records overlaps instead of adding up.
 */
void
CagraPageAccessor::prefetched_distances(const float *query, const uint32_t *ids, uint32_t count,
										float *out) const
{
	const uint32_t voff = cagra_vector_offset(meta_.graph_degree);
	const uint32_t span = Min(meta_.record_size, (uint32_t) 1024);

	pending_.resize(count);
	for (uint32_t i = 0; i < count; i++)
	{
		BlockNumber blkno;
		Pending    &p = pending_[i];

		if (cached_distance(query, ids[i], &out[i]))
		{
			p.buf = InvalidBuffer;
			continue;
		}
		cagra_locate(&meta_, ids[i], 0, &blkno, &p.offset);
		p.buf = pin_page(blkno, &p.transient);

		const char *rec = (const char *) BufferGetPage(p.buf) + p.offset;

		for (uint32_t b = 0; b < span; b += 64)
			__builtin_prefetch(rec + b);
	}
	for (uint32_t i = 0; i < count; i++)
	{
		const Pending &p = pending_[i];

		if (p.buf == InvalidBuffer)
			continue;			/* from the entry-vector cache */
		LockBuffer(p.buf, BUFFER_LOCK_SHARE);

		const char *rec = (const char *) BufferGetPage(p.buf) + p.offset;
		const CagraNodeHeader *hdr = (const CagraNodeHeader *) rec;
		NodeInfo	info;

		info.heap_tid = hdr->heap_tid;
		info.flags = hdr->flags;
		out[i] = cagra::distance(metric(), query, (const float *) (rec + voff), meta_.dims);
		LockBuffer(p.buf, BUFFER_LOCK_UNLOCK);
		if (p.transient)
			ReleaseBuffer(p.buf);
		if (record_)
			seen_[ids[i]] = info;
	}
}

void
CagraPageAccessor::distances(const float *query, const uint32_t *ids, uint32_t count, float *out) const
{
	if (keep_pins_ && meta_.pages_per_node == 1)
	{
		prefetched_distances(query, ids, count, out);
		return;
	}
	for (uint32_t i = 0; i < count; i++)
	{
		NodeInfo	info;

		if (cached_distance(query, ids[i], &out[i]))
			continue;
		out[i] = distance_to(query, ids[i], &info);
		if (record_)
			seen_[ids[i]] = info;
	}
}

const float *
CagraPageAccessor::vector(uint32_t id, float *scratch) const
{
	read_vector(id, scratch, NULL);
	return scratch;
}

bool
CagraPageAccessor::node_info(uint32_t id, NodeInfo *out) const
{
	auto		it = seen_.find(id);

	if (it == seen_.end())
		return false;
	if (it->second.flags & CAGRA_NODE_UNCHECKED)
	{
		BlockNumber blkno;
		uint32		poff;

		cagra_locate(&meta_, id, 0, &blkno, &poff);
		Buffer		buf = lock_page(blkno);
		const CagraNodeHeader *hdr = (const CagraNodeHeader *) ((char *) BufferGetPage(buf) + poff);

		it->second.heap_tid = hdr->heap_tid;
		it->second.flags = hdr->flags;
		unlock_page(buf);
	}
	*out = it->second;
	return true;
}

/* ---- the scan's C++ state ---- */

struct CagraScanState
{
	CagraMetaData meta;
	std::vector<float> query;
	std::vector<uint32_t> entries;
	std::unique_ptr<CagraPageAccessor> accessor;
	std::unique_ptr<cagra::Searcher<CagraPageAccessor>> searcher;
	std::vector<cagra::Neighbor> batch;
	size_t		pos = 0;
	uint32		batch_size = 0; /* itopk_size the searcher was started with */
	uint64		returned = 0;
	bool		exhausted = false;

	/* Normal paths only (rescan, a new search, endscan): unpins the pages.
	 * On error the object is just deleted and the resource owner unpins. */
	void reset()
	{
		if (accessor)
			accessor->release_pins();
		searcher.reset();
		accessor.reset();
		batch.clear();
		pos = 0;
		returned = 0;
		exhausted = false;
	}
};

/* What the scan keeps in scan->opaque (plain C data). */
typedef struct CagraScanOpaqueData
{
	CagraOwner *owner;
	CagraScanState *state;
	bool		started;		/* the search has been set up since the last rescan */
	bool		empty;			/* nothing to return (empty index) */
	bool		null_query;		/* ORDER BY v <-> NULL: any order, NULL values */
	CagraWorkerScan *worker;	/* the GPU worker's results, returned first */
} CagraScanOpaqueData;

typedef CagraScanOpaqueData *CagraScanOpaque;

static CagraScanState *
cagra_new_scan_state(CagraStatus *st) noexcept
{
	try
	{
		CagraScanState *s = new CagraScanState();

		cagra_status_ok(st);
		return s;
	}
	catch (...)
	{
		cagra_status_from_current_exception(st);
		return nullptr;
	}
}

static void
cagra_reset_scan_state(CagraScanState *s) noexcept
{
	s->reset();
}

IndexScanDesc
cagra_beginscan(Relation index, int nkeys, int norderbys)
{
	IndexScanDesc scan = RelationGetIndexScan(index, nkeys, norderbys);
	CagraScanOpaque so = (CagraScanOpaque) palloc0(sizeof(CagraScanOpaqueData));
	CagraStatus st;

	so->state = cagra_new_scan_state(&st);
	if (!so->state)
		cagra_report_status(&st);
	so->owner = cagra_owner_new(CurrentMemoryContext, so->state, cagra_delete_object<CagraScanState>);
	scan->opaque = so;
	/* the AM provides the ORDER BY value arrays */
	if (norderbys > 0)
	{
		scan->xs_orderbyvals = (Datum *) palloc0(sizeof(Datum) * norderbys);
		scan->xs_orderbynulls = (bool *) palloc(sizeof(bool) * norderbys);
		memset(scan->xs_orderbynulls, true, sizeof(bool) * norderbys);
	}
	return scan;
}

void
cagra_rescan(IndexScanDesc scan, ScanKey keys, int nkeys, ScanKey orderbys, int norderbys)
{
	CagraScanOpaque so = (CagraScanOpaque) scan->opaque;

	if (keys && scan->numberOfKeys > 0)
		memmove(scan->keyData, keys, scan->numberOfKeys * sizeof(ScanKeyData));
	if (orderbys && scan->numberOfOrderBys > 0)
		memmove(scan->orderByData, orderbys, scan->numberOfOrderBys * sizeof(ScanKeyData));
	cagra_reset_scan_state(so->state);
	so->started = false;
	cagra_worker_scan_end(so->worker);
	so->worker = NULL;
	so->empty = false;
}

/* Set up the searcher for a prepared copy of `raw`. */
static void
cagra_start_search(CagraScanState *s, Relation index, const CagraMetaData *meta, const float *raw,
				   CagraStatus *st) noexcept
{
	try
	{
		s->reset();
		s->meta = *meta;
		s->query.resize(meta->dims);
		cagra::prepare_vector((cagra::Metric) meta->metric, raw, s->query.data(), meta->dims);
		s->entries.assign(meta->entries, meta->entries + meta->entry_count);
		cagra::SearchParams params = cagra_search_params();

		s->batch_size = params.itopk_size;
		s->accessor.reset(new CagraPageAccessor(index, *meta, true, true));
		s->searcher = cagra_new_searcher(*s->accessor, s->query.data(), params, s->entries);
		cagra_status_ok(st);
	}
	catch (...)
	{
		s->reset();
		cagra_status_from_current_exception(st);
	}
}

/* The cagra.* search settings checked the way the core checks them, so a
 * search served by the GPU worker fails on bad settings as the CPU one does. */
static void
cagra_validate_search_settings(CagraStatus *st) noexcept
{
	try
	{
		cagra::validate_search_params(cagra_search_params(), 0);
		cagra_status_ok(st);
	}
	catch (...)
	{
		cagra_status_from_current_exception(st);
	}
}

/* The next batch of live results. */
static void
cagra_next_batch(CagraScanState *s, uint32 want, CagraStatus *st) noexcept
{
	try
	{
		const CagraPageAccessor &acc = *s->accessor;
		auto		live = [&acc](uint32_t id) {
			CagraPageAccessor::NodeInfo info;

			return acc.node_info(id, &info) && (info.flags & CAGRA_NODE_LIVE) &&
				!(info.flags & CAGRA_NODE_DELETED);
		};

		s->batch.resize(want);
		uint32		got = s->searcher->next(want, live, s->batch.data());

		s->batch.resize(got);
		s->pos = 0;
		if (got == 0)
			s->exhausted = true;
		cagra_status_ok(st);
	}
	catch (...)
	{
		s->batch.clear();
		s->exhausted = true;
		cagra_status_from_current_exception(st);
	}
}

/* Heap TID and operator value of the batch's next result. */
static bool
cagra_take_result(CagraScanState *s, ItemPointer tid, double *value) noexcept
{
	CagraPageAccessor::NodeInfo info;
	const cagra::Neighbor &nb = s->batch[s->pos++];

	if (!s->accessor->node_info(nb.id, &info))
		return false;
	*tid = info.heap_tid;
	*value = cagra_operator_value((cagra::Metric) s->meta.metric, nb.distance);
	s->returned++;
	return true;
}

/* Read the meta page and the query; false when the scan returns nothing. */
static bool
cagra_setup_scan(IndexScanDesc scan, CagraScanOpaque so)
{
	CagraMetaData meta;
	CagraStatus st;

	if (scan->numberOfOrderBys == 0 || scan->orderByData[0].sk_attno != 1)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("cagra index scans need an ORDER BY distance operator")));
	cagra_read_meta(scan->indexRelation, &meta);
	if (meta.n == 0 || meta.live == 0)
		return false;

	const float *raw;

	so->null_query = (scan->orderByData[0].sk_flags & SK_ISNULL) != 0;
	if (so->null_query)
	{
		/* every distance is NULL: walk from the zero vector, any order will do */
		raw = (const float *) palloc0(meta.dims * sizeof(float));
	}
	else
	{
		Vector	   *q = DatumGetVector(scan->orderByData[0].sk_argument);

		cagra_check_dims(scan->indexRelation, meta.dims, q->dim);
		raw = q->x;
	}
	cagra_validate_search_settings(&st);
	if (!st.ok)
		cagra_report_status(&st);
	if (!so->null_query)
		so->worker = cagra_worker_scan_begin(scan->indexRelation, &meta, raw,
											 (uint32) cagra_itopk_size,
											 IsMVCCSnapshot(scan->xs_snapshot));
	if (so->worker)
		return true;			/* the CPU search starts if the executor wants more */
	cagra_start_search(so->state, scan->indexRelation, &meta, raw, &st);
	if (!st.ok)
		cagra_report_status(&st);
	return true;
}

bool
cagra_gettuple(IndexScanDesc scan, ScanDirection dir)
{
	CagraScanOpaque so = (CagraScanOpaque) scan->opaque;
	CagraScanState *s = so->state;
	CagraStatus st;

	if (!IsMVCCSnapshot(scan->xs_snapshot))
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("cagra index scans need an MVCC snapshot")));

	if (!so->started)
	{
		so->started = true;
		so->empty = !cagra_setup_scan(scan, so);
		pgstat_count_index_scan(scan->indexRelation);
	}
	if (so->empty)
		return false;

	for (;;)
	{
		ItemPointerData wtid;
		double		wvalue;

		if (so->worker && !s->searcher && cagra_worker_scan_next(so->worker, &wtid, &wvalue))
		{
			scan->xs_heaptid = wtid;
			scan->xs_recheck = false;
			scan->xs_recheckorderby = false;
			scan->xs_orderbyvals[0] = Float8GetDatum(wvalue);
			scan->xs_orderbynulls[0] = false;
			return true;
		}
		if (so->worker && !s->searcher)
		{
			/* the worker's results ran out: continue with the CPU search */
			cagra_start_search(s, scan->indexRelation, cagra_worker_scan_meta(so->worker),
							   DatumGetVector(scan->orderByData[0].sk_argument)->x, &st);
			if (!st.ok)
				cagra_report_status(&st);
		}
		if (s->pos < s->batch.size())
		{
			ItemPointerData tid;
			double		value;

			if (!cagra_take_result(s, &tid, &value))
				elog(ERROR, "cagra scan lost the heap TID of a result");
			if (so->worker && cagra_worker_scan_skip(so->worker, &tid, value))
				continue;
			scan->xs_heaptid = tid;
			scan->xs_recheck = false;
			scan->xs_recheckorderby = false;
			scan->xs_orderbyvals[0] = so->null_query ? (Datum) 0 : Float8GetDatum(value);
			scan->xs_orderbynulls[0] = so->null_query;
			return true;
		}
		if (s->exhausted || s->returned >= (uint64) cagra_max_scan_tuples)
			return false;

		uint64		left = (uint64) cagra_max_scan_tuples - s->returned;
		uint32		want = (uint32) Min(left, (uint64) s->batch_size);

		cagra_next_batch(s, want, &st);
		if (!st.ok)
			cagra_report_status(&st);
		CHECK_FOR_INTERRUPTS();
	}
}

void
cagra_endscan(IndexScanDesc scan)
{
	CagraScanOpaque so = (CagraScanOpaque) scan->opaque;

	cagra_reset_scan_state(so->state);
	cagra_worker_scan_end(so->worker);
	cagra_owner_free(so->owner);
	pfree(so);
	scan->opaque = NULL;
}
