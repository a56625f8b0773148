/*
 * accessor.cpp — the core's graph Accessor over index pages (accessor.h),
 * and the backend's cache of entry vectors that scans start from.
 */
#include "am/accessor.h"

#include <algorithm>
#include <cstring>
#include <memory>

extern "C" {
#include "miscadmin.h"
#include "storage/bufmgr.h"
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
	: index_(index), meta_(meta), format_(cagra_format_of(&meta)), record_(record_nodes), vecbuf_(meta.dims),
	  keep_pins_(keep_pins)
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
	uint32		len = format_.vector_bytes();
	uint32		voff = cagra_vector_offset(meta_.graph_degree);

	storedbuf_.resize(len);
	char	   *dst = storedbuf_.data();

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
	format_.load(storedbuf_.data(), out);
}

float
CagraPageAccessor::distance_to(const float *query, uint32_t id, NodeInfo *info) const
{
	if (meta_.pages_per_node > 1)
	{
		read_vector(id, vecbuf_.data(), info);
		return cagra::distance(metric(), query, vecbuf_.data(), meta_.dims);	/* decoded */
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
	float		d = format_.distance(query, rec + cagra_vector_offset(meta_.graph_degree));

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
	*out = cagra::distance(metric(), query, v, meta_.dims);	/* cached decoded */
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
		out[i] = format_.distance(query, rec + voff);
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

