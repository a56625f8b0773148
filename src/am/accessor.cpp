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
#include "storage/buf_internals.h"
#include "storage/bufmgr.h"
}

/* ---- the entry cache ----
 *
 * Every search starts from the fixed entry nodes (up to 1,024): through the
 * entry index it measures its pivots and the members of a few groups, one
 * page access each.  So each backend keeps, for the indexes it searched,
 * the entry index and, where they fit kEntryCacheBytes, the entry vectors,
 * contiguous in memory.  A node's vector changes only when an insert takes
 * its slot after vacuum freed it, and each such insert counts itself in the
 * meta page (`reused`, on standbys too: the meta page is WAL-logged whole)
 * and logs the slot (reuse_log) as the slot turns live; REINDEX and TRUNCATE
 * give a new relfilenode; the entry list only grows (entry_count).  Those
 * four are the key; a cache older only by reused slots that are not entries
 * (all still in the log) stays valid, so a stream of inserts into freed
 * slots does not rebuild it each time.  Flags can change (vacuum): they are
 * read from the page when the node is a result.
 */
struct CagraEntryVectors
{
	CagraRelFileId node;
	uint64_t	reused = 0;
	uint32_t	count = 0;
	uint32_t	dims = 0;
	std::vector<uint32_t> ids;	/* the entries, sorted */
	std::vector<std::pair<uint32_t, uint32_t>> rows;	/* (id, row), sorted by id; empty: not cached */
	std::vector<uint64_t> cached;	/* a bit an id up to the largest cached: asked of every node measured */
	std::vector<float> vectors;							/* count x dims */
	cagra::EntryIndex entry_index;	/* pivots and groups: a search measures a few entries */

	const float *find(uint32_t id) const
	{
		if (id / 64 >= cached.size() || !((cached[id / 64] >> (id % 64)) & 1))
			return nullptr;

		auto		it = std::lower_bound(rows.begin(), rows.end(), std::make_pair(id, 0u));

		if (it == rows.end() || it->first != id)
			return nullptr;
		return vectors.data() + (size_t) it->second * dims;
	}
};

/* At most this many bytes of entry vectors per index (1,024 entries up to
 * 2,048 dimensions), and indexes kept. */
static const size_t kEntryCacheBytes = 8 * 1024 * 1024;
static const size_t kEntryCacheIndexes = 4;
static std::vector<std::shared_ptr<CagraEntryVectors>> cagra_entry_cache;

/* Whether cache `e` holds the vectors the meta page `meta` says its entries
 * have: the same entries, and no entry's slot taken again since (every slot
 * reused since still in the log, none of them an entry); then it moves on
 * to meta's count. */
static bool
cagra_entry_cache_current(CagraEntryVectors &e, Relation index, const CagraMetaData &meta)
{
	if (!CAGRA_REL_FILE_ID_EQUALS(e.node, CAGRA_REL_FILE_ID(index)) || e.count != meta.entry_count ||
		e.dims != meta.dims || meta.reused < e.reused || meta.reused - e.reused > CAGRA_REUSE_LOG)
		return false;
	for (uint64_t r = e.reused; r < meta.reused; r++)
		if (std::binary_search(e.ids.begin(), e.ids.end(), meta.reuse_log[r % CAGRA_REUSE_LOG]))
			return false;
	e.reused = meta.reused;
	return true;
}

static std::shared_ptr<const CagraEntryVectors>
cagra_entry_vectors(const CagraPageAccessor &acc, Relation index, const CagraMetaData &meta)
{
	if (meta.entry_count == 0)
		return nullptr;
	for (const auto &e : cagra_entry_cache)
		if (cagra_entry_cache_current(*e, index, meta))
			return e;

	auto		e = std::make_shared<CagraEntryVectors>();

	e->node = CAGRA_REL_FILE_ID(index);
	e->reused = meta.reused;
	e->count = meta.entry_count;
	e->dims = meta.dims;
	e->ids.assign(meta.entries, meta.entries + meta.entry_count);
	std::sort(e->ids.begin(), e->ids.end());
	if ((size_t) meta.entry_count * meta.dims * sizeof(float) <= kEntryCacheBytes)
	{
		e->vectors.resize((size_t) meta.entry_count * meta.dims);
		for (uint32_t r = 0; r < meta.entry_count; r++)
		{
			acc.read_vector(meta.entries[r], e->vectors.data() + (size_t) r * meta.dims, nullptr);
			e->rows.push_back({meta.entries[r], r});
		}
		std::sort(e->rows.begin(), e->rows.end());
		e->cached.assign(e->rows.back().first / 64 + 1, 0);
		for (const auto &r : e->rows)
			e->cached[r.first / 64] |= uint64_t(1) << (r.first % 64);
	}
	e->entry_index = cagra::derive_entry_index(acc, std::vector<uint32_t>(meta.entries, meta.entries + meta.entry_count));
	if (cagra_entry_cache.size() >= kEntryCacheIndexes)
		cagra_entry_cache.erase(cagra_entry_cache.begin());
	cagra_entry_cache.push_back(e);
	return e;
}

/* ---- the accessor ---- */

CagraPageAccessor::CagraPageAccessor(Relation index, const CagraMetaData &meta, bool record_nodes,
									 bool keep_pins)
	: index_(index), meta_(meta), format_(cagra_format_of(&meta)), voff_(cagra_vector_offset(meta.graph_degree)),
	  vbytes_(format_.vector_bytes()), single_page_(meta.pages_per_group == 1), record_(record_nodes),
	  vecbuf_(meta.dims), keep_pins_(keep_pins)
{
	/* never hold so many pins that other backends run out of buffers */
	max_pins_ = (uint32_t) Min(1024, NBuffers / 64);
	nblocks_ = cagra_blocks_for(&meta_, meta_.n);
	if (record_)
		seen_.assign(2048, Seen{cagra::kInvalidNode, false, 0, {}});
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
	uint32		len = meta_.graph_degree * sizeof(uint32);

	cagra_locate(&meta_, id, CAGRA_ROW_OFFSET, &blkno, &off);
	if (likely(off + len <= BLCKSZ))
	{
		Buffer		buf = lock_page(blkno);

		memcpy(scratch, (char *) BufferGetPage(buf) + off, len);
		unlock_page(buf);
	}
	else
	{
		/* a packed row (very large degrees) that crosses a page */
		char	   *dst = (char *) scratch;
		uint32		done = 0;

		while (done < len)
		{
			cagra_locate(&meta_, id, CAGRA_ROW_OFFSET + done, &blkno, &off);

			uint32		chunk = Min(len - done, BLCKSZ - off);
			Buffer		buf = lock_page(blkno);

			memcpy(dst + done, (char *) BufferGetPage(buf) + off, chunk);
			unlock_page(buf);
			done += chunk;
		}
	}
	for (uint32_t j = 0; j < meta_.graph_degree; j++)
		if (scratch[j] >= meta_.n)
			scratch[j] = cagra::kInvalidNode;
	return scratch;
}

/* Header fields not read yet: node_info reads them when asked. */
static inline void
cagra_info_unchecked(CagraPageAccessor::NodeInfo *info)
{
	ItemPointerSetInvalid(&info->heap_tid);
	info->flags = CAGRA_NODE_UNCHECKED;
}

void
CagraPageAccessor::read_vector(uint32_t id, float *out, NodeInfo *info) const
{
	uint32		offset = 0;
	uint32		len = vbytes_;
	BlockNumber blkno;
	uint32		poff;
	Buffer		buf;
	/* float32 is stored as it is read: copied straight into `out` */
	bool		as_stored = format_.element == cagra::ElementType::Float32;

	if (!as_stored)
		storedbuf_.resize(len);

	char	   *dst = as_stored ? (char *) out : storedbuf_.data();

	if (info)
	{
		cagra_locate(&meta_, id, 0, &blkno, &poff);
		buf = lock_page(blkno);

		const CagraNodeHeader *hdr = (const CagraNodeHeader *) ((char *) BufferGetPage(buf) + poff);

		info->heap_tid = hdr->heap_tid;
		info->flags = hdr->flags;
		unlock_page(buf);
	}

	/* the vector's bytes run to the end of each page it touches */
	while (len > 0)
	{
		cagra_locate(&meta_, id, voff_ + offset, &blkno, &poff);
		uint32		chunk = Min(len, BLCKSZ - poff);

		buf = lock_page(blkno);
		memcpy(dst + offset, (char *) BufferGetPage(buf) + poff, chunk);
		unlock_page(buf);
		offset += chunk;
		len -= chunk;
	}
	if (!as_stored)
		format_.load(storedbuf_.data(), out);
}

float
CagraPageAccessor::distance_to(const float *query, uint32_t id, NodeInfo *info) const
{
	BlockNumber vblk,
				hblk;
	uint32		vpoff,
				hpoff;

	cagra_locate(&meta_, id, voff_, &vblk, &vpoff);
	if (vpoff + vbytes_ > BLCKSZ)
	{
		/* the vector spans pages: copy it out; the header when asked */
		read_vector(id, vecbuf_.data(), NULL);
		cagra_info_unchecked(info);
		return cagra::distance(metric(), query, vecbuf_.data(), meta_.dims);	/* decoded */
	}

	/* One page holds the whole vector: compute on the page, under its lock
	 * (and take the header when it is on that page too). */
	cagra_locate(&meta_, id, 0, &hblk, &hpoff);

	Buffer		buf = lock_page(vblk);
	const char *page = (const char *) BufferGetPage(buf);

	if (hblk == vblk)
	{
		const CagraNodeHeader *hdr = (const CagraNodeHeader *) (page + hpoff);

		info->heap_tid = hdr->heap_tid;
		info->flags = hdr->flags;
	}
	else
		cagra_info_unchecked(info);

	float		d = format_.distance(query, page + vpoff);

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
	std::unique_ptr<cagra::Searcher<CagraPageAccessor>> s;

	if (entry_index)
		s = std::make_unique<cagra::Searcher<CagraPageAccessor>>(acc, query, params, *entry_index);
	else
		s = std::make_unique<cagra::Searcher<CagraPageAccessor>>(acc, query, params, entries);

	/* nodes inserted but not linked yet: no edge leads to them */
	std::vector<uint32_t> unlinked;

	for (uint32_t id = acc.first_unlinked(); id < acc.size(); id++)
		unlinked.push_back(id);
	if (!unlinked.empty())
		s->add_entries(unlinked.data(), (uint32_t) unlinked.size());
	return s;
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

		cagra_info_unchecked(&info);
		record_node(id, info, true, query, *out);
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

/* Where node `id`'s vector lies, and its header when on the same page. */
void
CagraPageAccessor::locate_node(uint32_t id, Pending *p) const
{
	const uint32_t k = meta_.nodes_per_group;

	p->slow = false;
	if (single_page_)
	{
		/* one page a group: its rows are on it (no hole), then its vectors */
		uint32_t	j = id % k;

		p->blkno = 1 + id / k;
		p->header = CAGRA_PAGE_DATA_START + j * meta_.row_stride;
		p->offset = CAGRA_PAGE_DATA_START + meta_.vector_start + j * vbytes_;
	}
	else
	{
		BlockNumber hblk;
		uint32		hoff;

		cagra_locate(&meta_, id, voff_, &p->blkno, &p->offset);
		p->slow = p->offset + vbytes_ > BLCKSZ;
		cagra_locate(&meta_, id, 0, &hblk, &hoff);
		p->header = hblk == p->blkno ? hoff : 0;
	}
}

/* Pin node `id`'s page and prefetch its vector and header (p->slow:
 * nothing pinned for it but its pieces, prefetch_spanning). */
void
CagraPageAccessor::prefetch_node(uint32_t id, Pending *p) const
{
	const uint32_t span = Min(vbytes_, (uint32_t) 1024);

	if (p->slow)
	{
		prefetch_spanning(id);
		p->buf = InvalidBuffer;
		return;
	}
	p->buf = pin_page(p->blkno, &p->transient);

	const char *page = (const char *) BufferGetPage(p->buf);

	__builtin_prefetch(page + p->header);
	for (uint32_t b = 0; b < span; b += 64)
		__builtin_prefetch(page + p->offset + b);
}

/* Pinning a block through its recent buffer reads and writes that buffer's
 * header in shared memory: prefetched for the whole batch before any pin,
 * so those misses overlap too. */
void
CagraPageAccessor::prefetch_buffer_header(BlockNumber blkno) const
{
	if (blkno >= pins_.size() || pins_[blkno] != InvalidBuffer)
		return;

	Buffer	   *hint = cagra_buffer_hint(index_, blkno, nblocks_);

	if (hint && *hint != InvalidBuffer && !BufferIsLocal(*hint))
		__builtin_prefetch(GetBufferDescriptor(*hint - 1), 1);
}

/* Prefetch the start of each piece of node `id`'s vector, which spans
 * pages, where those pages can stay pinned until it is read (distance_to,
 * after the rest of the batch is pinned and prefetched). */
void
CagraPageAccessor::prefetch_spanning(uint32_t id) const
{
	uint32		offset = 0;

	while (offset < vbytes_)
	{
		BlockNumber blkno;
		uint32		poff;
		bool		transient;

		cagra_locate(&meta_, id, voff_ + offset, &blkno, &poff);
		if (blkno >= pins_.size() || (pins_[blkno] == InvalidBuffer && pinned_.size() >= max_pins_))
			return;

		uint32		chunk = Min(vbytes_ - offset, BLCKSZ - poff);
		const char *page = (const char *) BufferGetPage(pin_page(blkno, &transient));

		for (uint32 b = 0; b < Min(chunk, (uint32) 1024); b += 64)
			__builtin_prefetch(page + poff + b);
		offset += chunk;
	}
}

/*
 * A scan's distances in three passes: prefetch the buffer headers, then pin
 * every page and prefetch the vectors (and headers), then lock, compute and
 * unlock one page at a time, so the memory latency of the records overlaps
 * instead of adding up.  With one page a group (the common case: small
 * vectors), a node's header and vector are on its page; otherwise a vector
 * within one page is computed there, and one that spans pages is copied out.
 */
void
CagraPageAccessor::prefetched_distances(const float *query, const uint32_t *ids, uint32_t count,
										float *out) const
{
	pending_.resize(count);
	for (uint32_t i = 0; i < count; i++)
	{
		Pending    &p = pending_[i];

		p.buf = InvalidBuffer;
		p.known = remembered_distance(query, ids[i], &out[i]) || cached_distance(query, ids[i], &out[i]);
		if (p.known)
			continue;
		locate_node(ids[i], &p);
		prefetch_buffer_header(p.blkno);
		if (p.slow)
			prefetch_buffer_header(p.blkno + 1);
	}
	for (uint32_t i = 0; i < count; i++)
		if (!pending_[i].known)
			prefetch_node(ids[i], &pending_[i]);
	for (uint32_t i = 0; i < count; i++)
	{
		const Pending &p = pending_[i];
		NodeInfo	info;

		if (p.known)
			continue;
		if (p.slow)
		{
			out[i] = distance_to(query, ids[i], &info);
			if (record_)
				record_node(ids[i], info, false, query, out[i]);
			continue;
		}
		LockBuffer(p.buf, BUFFER_LOCK_SHARE);

		const char *page = (const char *) BufferGetPage(p.buf);

		if (p.header)
		{
			const CagraNodeHeader *hdr = (const CagraNodeHeader *) (page + p.header);

			info.heap_tid = hdr->heap_tid;
			info.flags = hdr->flags;
		}
		else
			cagra_info_unchecked(&info);
		out[i] = format_.distance(query, page + p.offset);
		LockBuffer(p.buf, BUFFER_LOCK_UNLOCK);
		if (p.transient)
			ReleaseBuffer(p.buf);
		if (record_)
			record_node(ids[i], info, false, query, out[i]);
	}
}

void
CagraPageAccessor::distances(const float *query, const uint32_t *ids, uint32_t count, float *out) const
{
	if (keep_pins_)
	{
		prefetched_distances(query, ids, count, out);
		return;
	}
	for (uint32_t i = 0; i < count; i++)
	{
		NodeInfo	info;

		if (remembered_distance(query, ids[i], &out[i]) || cached_distance(query, ids[i], &out[i]))
			continue;
		out[i] = distance_to(query, ids[i], &info);
		if (record_)
			record_node(ids[i], info, false, query, out[i]);
	}
}

const float *
CagraPageAccessor::vector(uint32_t id, float *scratch) const
{
	read_vector(id, scratch, NULL);
	return scratch;
}

CagraPageAccessor::Seen *
CagraPageAccessor::seen_slot(uint32_t id) const
{
	const uint32_t mask = (uint32_t) seen_.size() - 1;
	/* Fibonacci hashing: the product's high bits, the table's size a power of two */
	uint32_t	h = (uint32_t) (((uint64_t) (id * 0x9E3779B1u) * seen_.size()) >> 32);

	while (seen_[h].id != cagra::kInvalidNode && seen_[h].id != id)
		h = (h + 1) & mask;
	return &seen_[h];
}

void
CagraPageAccessor::record_node(uint32_t id, const NodeInfo &info, bool keep_recorded, const float *query,
							   float d) const
{
	if (2 * (seen_count_ + 1) > seen_.size())
	{
		std::vector<Seen> old(2 * seen_.size(), Seen{cagra::kInvalidNode, false, 0, {}});

		old.swap(seen_);
		for (const Seen &e : old)
			if (e.id != cagra::kInvalidNode)
				*seen_slot(e.id) = e;
	}

	Seen	   *e = seen_slot(id);

	if (e->id == cagra::kInvalidNode)
	{
		*e = Seen{id, false, 0, info};
		seen_count_++;
	}
	else if (!keep_recorded)
		e->info = info;
	if (query == remembered_)
	{
		e->measured = true;
		e->distance = d;
	}
}

bool
CagraPageAccessor::remembered_distance(const float *query, uint32_t id, float *out) const
{
	if (query != remembered_ || !record_)
		return false;

	const Seen *e = seen_slot(id);

	if (e->id != id || !e->measured)
		return false;
	*out = e->distance;
	return true;
}

bool
CagraPageAccessor::node_info(uint32_t id, NodeInfo *out) const
{
	if (!record_)
		return false;

	Seen	   *e = seen_slot(id);

	if (e->id != id)
		return false;
	if (e->info.flags & CAGRA_NODE_UNCHECKED)
	{
		BlockNumber blkno;
		uint32		poff;

		cagra_locate(&meta_, id, 0, &blkno, &poff);
		Buffer		buf = lock_page(blkno);
		const CagraNodeHeader *hdr = (const CagraNodeHeader *) ((char *) BufferGetPage(buf) + poff);

		e->info.heap_tid = hdr->heap_tid;
		e->info.flags = hdr->flags;
		unlock_page(buf);
	}
	*out = e->info;
	return true;
}

