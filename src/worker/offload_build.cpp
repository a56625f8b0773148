/*
 * offload_build.cpp — the worker's side of CREATE INDEX offload: vectors
 * arrive in chunks (BUILD_DATA), the graph is built (BUILD_RUN), and its
 * rows go back in chunks (BUILD_FETCH).  State is kept per backend and
 * build id; state of backends that are gone is dropped before each new
 * build.
 *
 * The graph itself is built on the build thread, one build at a time, so
 * the main loop keeps serving searches, uploads, other builds' chunks,
 * barriers (DROP DATABASE) and shutdown meanwhile.  A build whose backend
 * gave up (cancel, timeout, exit) is stopped through its CagraBuildControl;
 * further BUILD_RUN requests wait in the queue until the thread is free.
 */
#include "worker/cache.h"
#include "worker/offload_build.h"

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <map>
#include <memory>
#include <sys/eventfd.h>
#include <thread>
#include <unistd.h>

#include "boundary/boundary.h"

extern "C" {
#include "storage/ipc.h"
}

struct CagraBuildJobState
{
	uint64		n = 0;
	cagra::VectorFormat format;
	cagra::BuildParams params;
	uint64		received = 0;
	bool		built = false;
	int			device = 0;
	bool		long_edges = false;
	std::unique_ptr<float[]> vectors;	/* n x dim; not zeroed: every chunk fills its part */
	dsm_segment *vectors_seg = nullptr; /* or the backend's segment that holds them */
	const float *vectors_in_seg = nullptr;
	std::vector<uint32_t> rows;
	std::vector<uint32_t> entries;

	const float *data() const { return vectors_seg ? vectors_in_seg : vectors.get(); }

	/* the vectors are not needed any more (on the main thread: DSM calls) */
	void drop_vectors()
	{
		vectors.reset();
		if (vectors_seg)
			dsm_detach(vectors_seg);
		vectors_seg = nullptr;
		vectors_in_seg = nullptr;
	}

	~CagraBuildJobState() { drop_vectors(); }
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

static CagraReply
cagra_build_data(const CagraBuildId &id, CagraBuildPayload *p, char *msg, size_t msglen)
{
	if (p->first == 0)
	{
		/* a backend runs one build at a time: older ones were abandoned */
		for (auto it = builds.begin(); it != builds.end();)
			it = it->first.first == id.first ? builds.erase(it) : std::next(it);
		cagra_worker_forget_builds();
		std::unique_ptr<CagraBuildJobState> j(new CagraBuildJobState());

		j->n = p->n;
		j->format = p->format;
		j->params = p->params;
		/* a parallel build's segment is read where it is (below) */
		if (p->segment == DSM_HANDLE_INVALID)
			j->vectors.reset(new float[p->n * p->format.dim]);
		builds[id] = std::move(j);
	}
	auto		it = builds.find(id);

	if (it == builds.end() || p->first != it->second->received ||
		(uint64) p->first + p->count > it->second->n || p->format != it->second->format)
	{
		strlcpy(msg, "build chunk out of sequence", msglen);
		return CAGRA_REPLY_ERROR;
	}
	CagraBuildJobState &j = *it->second;
	size_t		bytes = (size_t) p->count * j.format.dim * sizeof(float);

	if (p->segment == DSM_HANDLE_INVALID)
	{
		if (!j.vectors)
		{
			strlcpy(msg, "build chunk out of sequence", msglen);
			return CAGRA_REPLY_ERROR;
		}
		memcpy(j.vectors.get() + (size_t) p->first * j.format.dim, cagra_build_body(p), bytes);
	}
	else
	{
		/* a parallel build's rows segment, all vectors at once: kept mapped
		 * and read in place until the build is answered (the backend's own
		 * detach on a cancel leaves this mapping valid) */
		dsm_segment *seg = p->first == 0 && p->count == j.n ? dsm_attach(p->segment) : NULL;

		if (seg == NULL || p->segment_offset + bytes > dsm_segment_map_length(seg))
		{
			if (seg)
				dsm_detach(seg);
			strlcpy(msg, "the build's vectors segment is gone or does not hold them", msglen);
			return CAGRA_REPLY_ERROR;
		}
		dsm_pin_mapping(seg);	/* past the request's resource owner */
		j.vectors_seg = seg;
		j.vectors_in_seg = (const float *) ((const char *) dsm_segment_address(seg) + p->segment_offset);
	}
	j.received += p->count;
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
	CagraBuildId id(slot->backend_pid, slot->build_id);

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

	l->reply = cagra_engine_build(j.data(), j.n, j.format, j.params, &l->control, &j.rows,
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

/* Before shared memory goes: the thread may be reading staged vectors. */
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
	CagraBuildId id(slot->backend_pid, slot->build_id);
	auto		it = builds.find(id);

	if (it == builds.end() || it->second->received != it->second->n)
	{
		strlcpy(slot->message, "build started before all vectors arrived", sizeof(slot->message));
		slot->reply = CAGRA_REPLY_ERROR;
		return false;
	}
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

	j.drop_vectors();
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
