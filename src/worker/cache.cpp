/*
 * cache.cpp — the worker's cache of index copies, the uploads that fill
 * it and the updates that bring inserted nodes into it.
 *
 * One copy per index (db, index oid, relfilenode).  A search may use it when
 * its generation equals the backend's, or when the difference is explained
 * by inserts alone (every insert adds one generation and either appends a
 * node or reuses a slot vacuum freed, which the meta page counts; vacuum adds
 * a generation and neither), in which case the backend searches the appended
 * tail and the reused slots itself and merges, or drops the nodes it does
 * not count yet.  A backend that finds the tail long sends it (UPDATE): the
 * copy takes the inserted nodes and the rows their reverse edges changed,
 * with no whole upload.  Anything else is a miss: one backend
 * is told to upload the current contents (NEED_INDEX), concurrent askers
 * search on the CPU meanwhile (LOADING).  A copy larger than the limit is
 * remembered (TOO_LARGE) so that nobody uploads it again and again.  The
 * copy of an index whose file is gone (dropped, or rewritten under a new
 * relfilenode) is freed by the main loop within a second, searched again or
 * not (cagra_cache_free_dropped).
 */
#include "worker/cache.h"

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <map>
#include <tuple>

#include <sys/stat.h>

extern "C" {
#include "common/relpath.h"
#include "utils/timestamp.h"
}

typedef std::tuple<Oid, Oid, Oid> CagraIndexId;

static CagraIndexId
cagra_index_id(const CagraIndexKey &k)
{
	return CagraIndexId(k.db, k.index, k.relfilenode);
}

/* How a search's key matches the cached copy of its index. */
typedef enum CagraCopyMatch
{
	CAGRA_COPY_NONE,			/* no usable copy */
	CAGRA_COPY_EXACT,			/* same generation */
	CAGRA_COPY_INSERTS_ONLY		/* differs by appended nodes only */
} CagraCopyMatch;

static std::map<CagraIndexId, std::unique_ptr<CagraIndexCopy>> copies;
static std::map<CagraIndexId, std::unique_ptr<CagraStagedIndex>> uploads;
/* Indexes whose copy could not be loaded, and why: over the limit (until
 * the next reload: the limit is a setting) or out of device memory (retried
 * after a while: other copies or builds may have given memory back). */
typedef struct CagraLoadRefusal
{
	std::string message;
	int64_t		retry_at;		/* TimestampTz; 0: not before a reload */
} CagraLoadRefusal;

static std::map<CagraIndexId, CagraLoadRefusal> too_large;
static const int64_t cagra_oom_retry_us = 10 * 1000 * 1000;
static uint64_t lru_clock = 0;

/* An upload with no chunk for this long is given up (its backend left). */
static int64_t
cagra_upload_stale_us(void)
{
	return (int64_t) cagra_worker_timeout_ms * 1000 * 2;
}

uint64_t
cagra_cache_limit(void)
{
	if (cagra_gpu_memory_limit_mb > 0)
		return (uint64_t) cagra_gpu_memory_limit_mb * 1024 * 1024;
	if (!cagra_engine_is_gpu())
		return (uint64_t) 1024 * 1024 * 1024;

	uint64_t	smallest = UINT64_MAX;

	for (int d = 0; d < cagra_engine_device_count(); d++)
	{
		std::string name;
		uint64_t	total;

		cagra_engine_device(d, &name, &total);
		smallest = std::min(smallest, total);
	}
	return smallest == UINT64_MAX ? 0 : smallest / 10 * 9;
}

static CagraCopyMatch
cagra_copy_match(const CagraIndexCopy &c, const CagraIndexKey &key)
{
	if (c.key.generation == key.generation && c.key.n == key.n && c.key.reused == key.reused)
		return CAGRA_COPY_EXACT;
	/* signed differences: the copy may be older or newer than the asker */
	int64_t		dgen = (int64_t) key.generation - (int64_t) c.key.generation;
	int64_t		dn = (int64_t) key.n - (int64_t) c.key.n;
	int64_t		dreused = (int64_t) key.reused - (int64_t) c.key.reused;

	/* every generation between the two an insert: appended, or into a slot
	 * vacuum freed (the meta page logs the last CAGRA_REUSE_LOG of those) */
	if (dgen != dn + dreused)
		return CAGRA_COPY_NONE;
	if (dn >= 0 && dreused >= 0 && dreused <= CAGRA_REUSE_LOG && dn + dreused <= cagra_copy_tail_limit(c.key.n))
		return CAGRA_COPY_INSERTS_ONLY;
	/* an update (from a backend that read the meta page later) took nodes
	 * this asker does not count: the client drops them from the answer */
	if (dn <= 0 && dreused <= 0)
		return CAGRA_COPY_INSERTS_ONLY;
	return CAGRA_COPY_NONE;
}

CagraIndexCopy *
cagra_cache_lookup(const CagraIndexKey &key)
{
	auto		it = copies.find(cagra_index_id(key));

	if (it == copies.end() || cagra_copy_match(*it->second, key) == CAGRA_COPY_NONE)
		return nullptr;
	it->second->last_used = ++lru_clock;
	return it->second.get();
}

CagraReply
cagra_cache_miss_reply(const CagraIndexKey &key, pid_t asker, char *msg, size_t msglen)
{
	CagraIndexId id = cagra_index_id(key);
	auto		big = too_large.find(id);
	int64_t		now = GetCurrentTimestamp();

	if (big != too_large.end() && (big->second.retry_at == 0 || now < big->second.retry_at))
	{
		strlcpy(msg, big->second.message.c_str(), msglen);
		return CAGRA_REPLY_TOO_LARGE;
	}
	if (big != too_large.end())
		too_large.erase(big);
	auto		up = uploads.find(id);

	/* another backend's upload, unless it went quiet or its backend exited
	 * (a session cancelled mid-upload must not hold the copy off for long) */
	if (up != uploads.end() && up->second->owner != asker &&
		now - up->second->last_touch < cagra_upload_stale_us() &&
		!(kill(up->second->owner, 0) != 0 && errno == ESRCH))
		return CAGRA_REPLY_LOADING;
	if (up != uploads.end())
		uploads.erase(up);

	/* the asker uploads; its first chunk creates the staging entry */
	std::unique_ptr<CagraStagedIndex> s(new CagraStagedIndex());

	s->key = key;
	s->owner = asker;
	s->last_touch = now;
	uploads[id] = std::move(s);
	return CAGRA_REPLY_NEED_INDEX;
}

/* Device with the most room under the limit, after evicting least recently
 * used copies until `bytes` fit; -1 when it cannot fit at all. */
static int
cagra_cache_make_room(uint64_t bytes, const CagraIndexId &replacing)
{
	uint64_t	limit = cagra_cache_limit();
	int			ndev = std::max(1, cagra_engine_device_count());

	if (bytes > limit)
		return -1;
	copies.erase(replacing);
	for (;;)
	{
		std::vector<uint64_t> used(ndev, 0);

		for (auto &c : copies)
			used[c.second->device] += c.second->bytes;
		int			best = (int) (std::min_element(used.begin(), used.end()) - used.begin());

		if (used[best] + bytes <= limit)
			return best;

		auto		victim = copies.end();

		for (auto it = copies.begin(); it != copies.end(); ++it)
			if (victim == copies.end() || it->second->last_used < victim->second->last_used)
				victim = it;
		if (victim == copies.end())
			return -1;
		copies.erase(victim);
	}
}

static void
cagra_cache_begin_upload(CagraStagedIndex &s, const CagraUploadPayload *p)
{
	s.format = p->format;
	s.degree = p->degree;
	s.entries.assign(p->entries, p->entries + Min(p->entry_count, (uint32) CAGRA_MAX_ENTRY_NODES));
	s.vectors.resize((size_t) s.key.n * s.format.vector_bytes());
	s.rows.resize((size_t) s.key.n * s.degree);
	s.live.assign(((size_t) s.key.n + 63) / 64, 0);
	s.tids.resize(s.key.n);
	s.received = 0;
}

static void
cagra_cache_store_chunk(CagraStagedIndex &s, CagraUploadPayload *p)
{
	memcpy(s.vectors.data() + (size_t) p->first * s.format.vector_bytes(), cagra_upload_vectors(p),
		   (size_t) p->count * s.format.vector_bytes());
	memcpy(s.rows.data() + (size_t) p->first * s.degree, cagra_upload_rows(p),
		   (size_t) p->count * s.degree * sizeof(uint32));
	memcpy(s.tids.data() + p->first, cagra_upload_tids(p), (size_t) p->count * sizeof(uint64));
	const uint8 *live = cagra_upload_live(p);

	for (uint32 i = 0; i < p->count; i++)
		if (live[i])
		{
			uint32		id = p->first + i;

			s.live[id >> 6] |= (uint64_t) 1 << (id & 63);
		}
	s.received += p->count;
}

static CagraReply
cagra_cache_finish_upload(const CagraIndexId &id, CagraStagedIndex &s, char *msg, size_t msglen)
{
	uint64_t	bytes;
	std::string err;

	if (!cagra_engine_copy_bytes(s.key.n, s.format, s.degree, &bytes, &err))
	{
		strlcpy(msg, err.c_str(), msglen);
		return CAGRA_REPLY_ERROR;
	}
	int			device = cagra_cache_make_room(bytes, id);

	if (device < 0)
	{
		snprintf(msg, msglen, "a copy of this index needs %llu MB of device memory, cagra.gpu_memory_limit allows %llu MB",
				 (unsigned long long) (bytes >> 20), (unsigned long long) (cagra_cache_limit() >> 20));
		too_large[id] = CagraLoadRefusal{msg, 0};
		return CAGRA_REPLY_TOO_LARGE;
	}
	std::unique_ptr<CagraIndexCopy> copy(new CagraIndexCopy());
	CagraReply	r = cagra_engine_load(s, device, *copy, &err);

	if (r != CAGRA_REPLY_OK)
	{
		/* the device had less free memory than the limit allows: do not
		 * let every search upload it again, but try again later */
		if (r == CAGRA_REPLY_OUT_OF_MEMORY)
			too_large[id] = CagraLoadRefusal{err, GetCurrentTimestamp() + cagra_oom_retry_us};
		strlcpy(msg, err.c_str(), msglen);
		return r;
	}
	copy->last_used = ++lru_clock;
	copy->loaded_at = GetCurrentTimestamp();
	copy->uploaded_n = s.key.n;
	copy->takes_updates = true;
	copies[id] = std::move(copy);
	pg_atomic_fetch_add_u64(&cagra_worker_shared->uploads, 1);
	return CAGRA_REPLY_OK;
}

CagraReply
cagra_cache_upload(const CagraIndexKey &key, pid_t owner, CagraUploadPayload *p,
				   char *msg, size_t msglen) noexcept
{
	try
	{
		CagraIndexId id = cagra_index_id(key);
		auto		it = uploads.find(id);

		if (it == uploads.end() || it->second->owner != owner ||
			it->second->key.generation != key.generation || it->second->key.n != key.n)
		{
			strlcpy(msg, "the upload was given up by the worker", msglen);
			return CAGRA_REPLY_ERROR;
		}
		CagraStagedIndex &s = *it->second;

		if (p->first == 0)
			cagra_cache_begin_upload(s, p);
		if (p->format != s.format || p->degree != s.degree || p->first != s.received ||
			(uint64_t) p->first + p->count > s.key.n)
		{
			uploads.erase(it);
			strlcpy(msg, "upload chunk out of sequence", msglen);
			return CAGRA_REPLY_ERROR;
		}
		cagra_cache_store_chunk(s, p);
		s.last_touch = GetCurrentTimestamp();
		if (s.received < s.key.n)
			return CAGRA_REPLY_OK;

		std::unique_ptr<CagraStagedIndex> done = std::move(it->second);

		uploads.erase(it);
		return cagra_cache_finish_upload(id, *done, msg, msglen);
	}
	catch (...)
	{
		uploads.erase(cagra_index_id(key));
		strlcpy(msg, "out of memory in the cagra worker while receiving an index copy", msglen);
		return CAGRA_REPLY_OUT_OF_MEMORY;
	}
}

/* Why the copy `c` does not take update `p` to `key`, or NULL. */
static const char *
cagra_cache_update_refusal(const CagraIndexCopy &c, const CagraIndexKey &key, const CagraUpdatePayload *p)
{
	int64_t		dn = (int64_t) key.n - (int64_t) c.key.n;
	int64_t		dreused = (int64_t) key.reused - (int64_t) c.key.reused;

	if (!c.takes_updates)
		return "the copy has grown by a quarter through updates (it is uploaded whole again)";
	if (p->base.n != c.key.n || p->base.reused != c.key.reused)
		return "the copy has changed since the update was read";
	if (p->format != c.format || p->degree != c.degree || dn < 0 || dreused < 0 ||
		(int64_t) key.generation - (int64_t) c.key.generation != dn + dreused)
		return "the update is not of inserts into this copy";
	return NULL;
}

/* Rows outside the inserted nodes' reach may lack their reverse edges (an
 * insert's edge into a row that dropped it since): a copy that has grown by
 * a quarter through updates takes no more, and is uploaded again whole. */
static bool
cagra_copy_may_grow(const CagraIndexCopy &c)
{
	return (uint64_t) c.key.n - c.uploaded_n < std::max<uint64_t>(c.uploaded_n / 4, cagra_copy_tail_limit(c.uploaded_n));
}

CagraReply
cagra_cache_update(const CagraIndexKey &key, CagraUpdatePayload *p, char *msg, size_t msglen) noexcept
{
	try
	{
		auto		it = copies.find(cagra_index_id(key));
		const char *refusal = it == copies.end() ? "no copy of this index" :
			cagra_cache_update_refusal(*it->second, key, p);
		uint64_t	bytes = 0;
		uint64_t	used = 0;
		std::string err;

		if (refusal)
		{
			strlcpy(msg, refusal, msglen);
			return CAGRA_REPLY_NEED_INDEX;
		}
		CagraIndexCopy &c = *it->second;

		if (!cagra_engine_copy_bytes(key.n, c.format, c.degree, &bytes, &err))
		{
			strlcpy(msg, err.c_str(), msglen);
			return CAGRA_REPLY_ERROR;
		}
		for (auto &other : copies)
			if (other.second->device == c.device && other.second.get() != &c)
				used += other.second->bytes;
		if (used + bytes > cagra_cache_limit())
		{
			strlcpy(msg, "the grown copy would not fit cagra.gpu_memory_limit", msglen);
			return CAGRA_REPLY_NEED_INDEX;
		}
		CagraReply	r = cagra_engine_update(c, key, p, &err);

		if (r != CAGRA_REPLY_OK)
		{
			copies.erase(it);	/* half updated: the next search uploads it */
			strlcpy(msg, err.c_str(), msglen);
			return r;
		}
		c.takes_updates = cagra_copy_may_grow(c);
		return CAGRA_REPLY_OK;
	}
	catch (...)
	{
		copies.erase(cagra_index_id(key));
		strlcpy(msg, "out of memory in the cagra worker while updating an index copy", msglen);
		return CAGRA_REPLY_OUT_OF_MEMORY;
	}
}

int
cagra_cache_clear(void)
{
	int			n = (int) copies.size();

	copies.clear();
	return n;
}

/*
 * Whether the index file a copy was made from is gone.  The worker has no
 * database connection, so it looks at the file itself: a committed drop
 * unlinks it, or (the main fork outside recovery) truncates it to nothing
 * and unlinks it at the next checkpoint.  A cagra index always has its
 * meta page, so an empty file is a dropped one.
 */
static bool
cagra_copy_file_gone(const CagraIndexKey &key)
{
	char	   *path = GetRelationPath(key.db, key.tablespace, key.relfilenode, key.backend, MAIN_FORKNUM);
	struct stat st;
	bool		gone = stat(path, &st) != 0 ? errno == ENOENT : st.st_size == 0;

	pfree(path);
	return gone;
}

int
cagra_cache_free_dropped(void (*wait_for_searches) (void))
{
	std::vector<CagraIndexId> gone;

	try
	{
		for (auto &c : copies)
			if (cagra_copy_file_gone(c.second->key))
				gone.push_back(c.first);
	}
	catch (...)
	{
		return 0;				/* out of memory: next time */
	}
	if (gone.empty())
		return 0;
	wait_for_searches();
	for (const CagraIndexId &id : gone)
		copies.erase(id);
	return (int) gone.size();
}

void
cagra_cache_forget_limits(void)
{
	too_large.clear();
}

/*
 * What cagra_status shows was last published, and when.  Every request's
 * backend takes the worker's lock shared; publishing takes it exclusively,
 * and doing so after every busy turn of the main loop (130,000 a second
 * with 64 clients) made backends queue on it.
 */
static CagraPublishedCopy published[CAGRA_MAX_PUBLISHED_CACHE];
static int	published_n = -1;
static uint64_t published_used = 0;
static uint64_t published_limit = 0;
static TimestampTz published_at = 0;

bool
cagra_cache_publish(void)
{
	CagraPublishedCopy list[CAGRA_MAX_PUBLISHED_CACHE];
	uint64_t	used = 0;
	uint64_t	limit = cagra_cache_limit();
	int			n = 0;

	for (auto &c : copies)
	{
		used += c.second->bytes;
		if (n < CAGRA_MAX_PUBLISHED_CACHE)
		{
			CagraPublishedCopy *pc = &list[n++];

			memset(pc, 0, sizeof(*pc));
			pc->db = c.second->key.db;
			pc->index = c.second->key.index;
			pc->generation = c.second->key.generation;
			pc->n = c.second->key.n;
			pc->device = c.second->device;
			pc->bytes = c.second->bytes;
			pc->searches = c.second->searches;
			pc->loaded_at = c.second->loaded_at;
		}
	}
	/* the same copies, and the same search counts? */
	bool		same_copies = n == published_n && used == published_used && limit == published_limit;
	bool		same_counts = true;

	for (int i = 0; i < n && same_copies; i++)
	{
		CagraPublishedCopy a = list[i];

		same_counts = same_counts && a.searches == published[i].searches;
		a.searches = published[i].searches;
		same_copies = memcmp(&a, &published[i], sizeof(a)) == 0;
	}
	if (same_copies && same_counts)
		return false;

	TimestampTz now = GetCurrentTimestamp();

	if (same_copies && now - published_at < CAGRA_PUBLISH_INTERVAL_MS * 1000)
		return true;			/* only search counts moved: soon */

	CagraWorkerShared *sh = cagra_worker_shared;

	LWLockAcquire(sh->lock, LW_EXCLUSIVE);
	memcpy(sh->copies, list, sizeof(CagraPublishedCopy) * n);
	sh->ncopies = n;
	sh->memory_used = used;
	sh->memory_limit = limit;
	LWLockRelease(sh->lock);
	memcpy(published, list, sizeof(CagraPublishedCopy) * n);
	published_n = n;
	published_used = used;
	published_limit = limit;
	published_at = now;
	return false;
}
