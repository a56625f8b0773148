/*
 * offload_build.cpp — the worker's side of CREATE INDEX offload: vectors
 * arrive in chunks while the backend's heap scan runs (BUILD_DATA, from the
 * backend and its parallel scan workers, nodes in any order), the graph is
 * built (BUILD_RUN), and its rows go back in chunks (BUILD_FETCH).  State
 * is kept per owner (the backend that leads the build) and build id; state
 * of owners that are gone is dropped before each new build.
 *
 * The graph itself is built on the build thread, one build at a time, so
 * the main loop keeps serving searches, uploads, other builds' chunks,
 * barriers (DROP DATABASE) and shutdown meanwhile.  A build whose backend
 * gave up (cancel, timeout, exit) is stopped through its CagraBuildControl;
 * further BUILD_RUN requests wait in the queue until the thread is free.
 */
#include "worker/cache.h"
#include "worker/offload_build.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <map>
#include <memory>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <thread>
#include <unistd.h>

#include "boundary/boundary.h"

extern "C" {
#include "storage/ipc.h"
}

/*
 * A build's vectors as they arrive: an anonymous mapping reserved without
 * swap and grown by mremap, which moves its pages instead of copying them,
 * so a stream of unknown length costs no copy of what arrived before.
 */
class CagraStagedVectors
{
  public:
	CagraStagedVectors() = default;
	CagraStagedVectors(const CagraStagedVectors &) = delete;
	CagraStagedVectors &operator=(const CagraStagedVectors &) = delete;
	~CagraStagedVectors() { release(); }

	/* At least `bytes` mapped; false when the host has no room. */
	bool reserve(size_t bytes)
	{
		if (bytes <= mapped_)
			return true;

		size_t		want = std::max({bytes, mapped_ * 2, (size_t) 64 * 1024 * 1024});
		void	   *p = data_ ? mremap(data_, mapped_, want, MREMAP_MAYMOVE) :
			mmap(nullptr, want, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);

		if (p == MAP_FAILED)
			return false;
		data_ = (float *) p;
		mapped_ = want;
		return true;
	}

	void release()
	{
		if (data_)
			munmap(data_, mapped_);
		data_ = nullptr;
		mapped_ = 0;
	}

	float	   *data() const { return data_; }

  private:
	float	   *data_ = nullptr;
	size_t		mapped_ = 0;
};

struct CagraBuildJobState
{
	uint64		n = 0;			/* set by BUILD_RUN */
	cagra::VectorFormat format;
	cagra::BuildParams params;
	uint64		received = 0;	/* vectors that arrived */
	uint64		extent = 0;		/* one past the highest node that arrived */
	std::string failed;			/* why the stream was refused (the vectors dropped) */
	bool		built = false;
	int			device = 0;
	bool		long_edges = false;
	CagraStagedVectors vectors;
	std::vector<uint32_t> rows;
	std::vector<uint32_t> entries;
};

typedef std::pair<pid_t, uint64> CagraBuildId;
static std::map<CagraBuildId, std::unique_ptr<CagraBuildJobState>> builds;

/* The build running on the build thread: it owns its job while it runs, so
 * nothing the main loop drops from `builds` is in use by the thread. */
struct CagraBuildLane
{
	std::thread thread;
	std::atomic<bool> finished{false};
	CagraBuildControl control;
	std::unique_ptr<CagraBuildJobState> job;
	CagraBuildId id;
	int			slot = -1;		/* the BUILD_RUN request it answers */
	CagraBuildPayload *payload = nullptr;
	dsm_segment *seg = nullptr; /* the payload's one-off segment (NULL: a mailbox) */
	CagraReply	reply = CAGRA_REPLY_OK;
	std::string msg;
	bool		retried = false;	/* once, after freeing the cached copies */
};

static CagraBuildLane *lane = nullptr;
static int	lane_event_fd = -1;

static bool
cagra_backend_gone(pid_t pid)
{
	return kill(pid, 0) != 0 && errno == ESRCH;
}

void
cagra_worker_forget_builds(void)
{
	for (auto it = builds.begin(); it != builds.end();)
	{
		if (cagra_backend_gone(it->first.first))
			it = builds.erase(it);
		else
			++it;
	}
}

/* The bytes a build's vectors may take in the worker: what a copy of an
 * index may take on the device (cagra.gpu_memory_limit, else the device's
 * memory) when the GPU builds; the host's otherwise. */
static uint64
cagra_staged_limit(void)
{
	return cagra_engine_is_gpu() || cagra_gpu_memory_limit_mb > 0 ? cagra_cache_limit() : UINT64_MAX;
}

/* The state of build `id`, made at its first chunk (the first of any
 * participant of its scan); the owner's older builds were abandoned. */
static CagraBuildJobState *
cagra_build_job(const CagraBuildId &id, const CagraBuildPayload *p)
{
	auto		it = builds.find(id);

	if (it != builds.end())
		return it->second.get();
	for (auto old = builds.begin(); old != builds.end();)
		old = old->first.first == id.first ? builds.erase(old) : std::next(old);
	cagra_worker_forget_builds();

	std::unique_ptr<CagraBuildJobState> j(new CagraBuildJobState());

	j->format = p->format;
	j->params = p->params;
	return (builds[id] = std::move(j)).get();
}

static CagraReply
cagra_build_data(const CagraBuildId &id, CagraBuildPayload *p, char *msg, size_t msglen)
{
	CagraBuildJobState &j = *cagra_build_job(id, p);
	size_t		vector_bytes = (size_t) j.format.dim * sizeof(float);
	uint64		end = (uint64) p->first + p->count;

	if (!j.failed.empty())
	{
		strlcpy(msg, j.failed.c_str(), msglen);
		return CAGRA_REPLY_ERROR;
	}
	if (j.built || p->format != j.format || end >= cagra::kInvalidNode)
	{
		strlcpy(msg, "build chunk out of sequence", msglen);
		return CAGRA_REPLY_ERROR;
	}

	uint64		limit = cagra_staged_limit();
	CagraReply	reply = CAGRA_REPLY_OK;

	if ((double) end * vector_bytes > (double) limit)
	{
		snprintf(msg, msglen, "the build's vectors need more than the %llu MB cagra.gpu_memory_limit allows",
				 (unsigned long long) (limit / (1024 * 1024)));
		reply = CAGRA_REPLY_TOO_LARGE;
	}
	else if (!j.vectors.reserve(end * vector_bytes))
	{
		strlcpy(msg, "out of memory in the cagra worker for the build's vectors", msglen);
		reply = CAGRA_REPLY_OUT_OF_MEMORY;
	}
	if (reply != CAGRA_REPLY_OK)
	{
		/* later chunks of its other participants get the same answer */
		j.failed = msg;
		j.vectors.release();
		return reply;
	}
	memcpy((char *) j.vectors.data() + (size_t) p->first * vector_bytes, cagra_build_body(p),
		   (size_t) p->count * vector_bytes);
	j.received += p->count;
	j.extent = Max(j.extent, end);
	return CAGRA_REPLY_OK;
}

static CagraReply
cagra_build_fetch(const CagraBuildId &id, CagraBuildPayload *p, char *msg, size_t msglen)
{
	auto		it = builds.find(id);

	if (it == builds.end() || !it->second->built || (uint64) p->first + p->count > it->second->n)
	{
		strlcpy(msg, "no built graph to fetch", msglen);
		return CAGRA_REPLY_ERROR;
	}
	CagraBuildJobState &j = *it->second;

	memcpy(cagra_build_body(p), j.rows.data() + (size_t) p->first * j.params.graph_degree,
		   (size_t) p->count * j.params.graph_degree * sizeof(uint32));
	if ((uint64) p->first + p->count == j.n)
		builds.erase(it);
	return CAGRA_REPLY_OK;
}

CagraReply
cagra_worker_run_build_request(CagraRequestSlot *slot, void *payload)
{
	CagraBuildPayload *p = (CagraBuildPayload *) payload;
	CagraBuildId id(p->owner, slot->build_id);

	try
	{
		switch (slot->kind)
		{
			case CAGRA_REQ_BUILD_DATA:
				return cagra_build_data(id, p, slot->message, sizeof(slot->message));
			case CAGRA_REQ_BUILD_FETCH:
				return cagra_build_fetch(id, p, slot->message, sizeof(slot->message));
			default:
				strlcpy(slot->message, "unknown request kind", sizeof(slot->message));
				return CAGRA_REPLY_ERROR;
		}
	}
	catch (...)
	{
		builds.erase(id);
		strlcpy(slot->message, "out of memory in the cagra worker during a build", sizeof(slot->message));
		return CAGRA_REPLY_OUT_OF_MEMORY;
	}
}

/* ---- the build thread ---- */

static void
cagra_lane_run(CagraBuildLane *l) noexcept
{
	CagraBuildJobState &j = *l->job;

	l->reply = cagra_engine_build(j.vectors.data(), j.n, j.format, j.params, &l->control, &j.rows,
								  &j.entries, &j.device, &j.long_edges, &l->msg);
	l->finished = true;

	uint64_t	one = 1;

	(void) !write(lane_event_fd, &one, sizeof(one));
}

/* Start (or restart) the lane's thread; false with the reason in l->msg. */
static bool
cagra_lane_start_thread(CagraBuildLane *l) noexcept
{
	CagraStatus st;

	l->finished = false;
	if (cagra_guard(&st, [l] { l->thread = cagra_start_thread([l] { cagra_lane_run(l); }); }))
		return true;
	l->msg = "the cagra worker could not start a build thread";
	return false;
}

/* Before the worker exits: the thread may be reading staged vectors. */
static void
cagra_lane_stop(int code, Datum arg)
{
	if (lane && lane->thread.joinable())
	{
		lane->control.request();
		lane->thread.join();
	}
}

bool
cagra_worker_build_busy(void)
{
	return lane != nullptr;
}

int
cagra_worker_build_event_fd(void)
{
	if (lane_event_fd < 0)
	{
		lane_event_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
		if (lane_event_fd >= 0)
			before_shmem_exit(cagra_lane_stop, (Datum) 0);
	}
	return lane_event_fd;
}

bool
cagra_worker_start_build(CagraRequestSlot *slot, int idx, void *payload, dsm_segment *seg)
{
	CagraBuildPayload *p = (CagraBuildPayload *) payload;
	CagraBuildId id(p->owner, slot->build_id);
	auto		it = builds.find(id);

	/* the chunks' node ranges come from one counter: disjoint, so n of them
	 * below n are all of 0 .. n - 1 */
	if (it == builds.end() || !it->second->failed.empty() || it->second->received != p->n ||
		it->second->extent != p->n || p->n == 0)
	{
		strlcpy(slot->message,
				it != builds.end() && !it->second->failed.empty() ? it->second->failed.c_str() :
				"build started before all vectors arrived", sizeof(slot->message));
		slot->reply = CAGRA_REPLY_ERROR;
		return false;
	}
	it->second->n = p->n;
	if (cagra_worker_build_event_fd() < 0)
	{
		strlcpy(slot->message, "the cagra worker could not make a build event", sizeof(slot->message));
		slot->reply = CAGRA_REPLY_ERROR;
		return false;
	}
	CagraStatus st;
	CagraBuildLane *l = nullptr;

	if (!cagra_guard(&st, [&l] { l = new CagraBuildLane(); }))
	{
		strlcpy(slot->message, "out of memory in the cagra worker during a build", sizeof(slot->message));
		slot->reply = CAGRA_REPLY_OUT_OF_MEMORY;
		return false;
	}
	l->job = std::move(it->second);
	builds.erase(it);
	l->id = id;
	l->slot = idx;
	l->payload = (CagraBuildPayload *) payload;
	l->seg = seg;
	if (!cagra_lane_start_thread(l))
	{
		strlcpy(slot->message, l->msg.c_str(), sizeof(slot->message));
		slot->reply = CAGRA_REPLY_ERROR;
		delete l;
		return false;
	}
	lane = l;
	return true;
}

/* The finished build's answer into its slot and payload; the job goes back
 * to `builds` for BUILD_FETCH when it succeeded.  Returns the slot, for the
 * caller to answer. */
static int
cagra_lane_answer(CagraWorkerShared *sh, CagraBuildLane *l)
{
	CagraRequestSlot *s = &sh->slots[l->slot];
	CagraBuildJobState &j = *l->job;

	j.vectors.release();
	s->reply = l->reply;
	strlcpy(s->message, l->control.requested() ? "the build was cancelled" : l->msg.c_str(), sizeof(s->message));
	if (l->reply == CAGRA_REPLY_OK)
	{
		CagraBuildPayload *p = l->payload;

		j.built = true;
		p->entry_count = (uint32) Min(j.entries.size(), (size_t) CAGRA_MAX_ENTRY_NODES);
		memcpy(p->entries, j.entries.data(), p->entry_count * sizeof(uint32));
		p->device = j.device;
		p->long_edges = j.long_edges;
		pg_atomic_fetch_add_u64(&sh->builds, 1);
		try
		{
			builds[l->id] = std::move(l->job);
		}
		catch (...)
		{
			s->reply = CAGRA_REPLY_OUT_OF_MEMORY;
			strlcpy(s->message, "out of memory in the cagra worker during a build", sizeof(s->message));
		}
	}
	if (l->seg)
		dsm_detach(l->seg);
	return l->slot;
}

int
cagra_worker_poll_build(void (*drain_searches) (void))
{
	CagraWorkerShared *sh = cagra_worker_shared;
	CagraBuildLane *l = lane;

	if (!l)
		return -1;
	if (!l->finished)
	{
		/* the backend gave up (cancel, timeout) or exited: stop the build */
		bool		abandoned = cagra_slot_state(&sh->slots[l->slot]) == CAGRA_SLOT_ABANDONED;

		if (abandoned || cagra_backend_gone(l->id.first))
			l->control.request();
		return -1;
	}
	uint64_t	count;

	(void) !read(lane_event_fd, &count, sizeof(count));
	l->thread.join();
	/* cached index copies hold device memory a build may need: free them
	 * (searches reload what they use) and try once more */
	if (l->reply == CAGRA_REPLY_OUT_OF_MEMORY && !l->retried && !l->control.requested())
	{
		drain_searches();
		if (cagra_cache_clear() > 0)
		{
			l->retried = true;
			if (cagra_lane_start_thread(l))
				return -1;
		}
	}
	lane = nullptr;

	int			slot = cagra_lane_answer(sh, l);

	delete l;
	return slot;
}
