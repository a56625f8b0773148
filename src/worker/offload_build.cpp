/*
 * offload_build.cpp — the worker's side of CREATE INDEX offload: vectors
 * arrive in chunks (BUILD_DATA), the graph is built on the device
 * (BUILD_RUN), and its rows go back in chunks (BUILD_FETCH).  State is kept
 * per backend and build id; state of backends that are gone is dropped
 * before each new build.
 */
#include "worker/cache.h"
#include "worker/worker.h"

#include <cerrno>
#include <csignal>
#include <cstring>
#include <map>
#include <memory>

struct CagraBuildJobState
{
	uint64		n = 0;
	cagra::VectorFormat format;
	cagra::BuildParams params;
	uint64		received = 0;
	bool		built = false;
	int			device = 0;
	std::vector<float> vectors;
	std::vector<uint32_t> rows;
	std::vector<uint32_t> entries;
};

typedef std::pair<pid_t, uint64> CagraBuildId;
static std::map<CagraBuildId, std::unique_ptr<CagraBuildJobState>> builds;

void
cagra_worker_forget_builds(void)
{
	for (auto it = builds.begin(); it != builds.end();)
	{
		if (kill(it->first.first, 0) != 0 && errno == ESRCH)
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
		j->vectors.resize(p->n * p->format.dim);
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

	memcpy(j.vectors.data() + (size_t) p->first * j.format.dim, cagra_build_body(p),
		   (size_t) p->count * j.format.dim * sizeof(float));
	j.received += p->count;
	return CAGRA_REPLY_OK;
}

static CagraReply
cagra_build_run(const CagraBuildId &id, CagraBuildPayload *p, char *msg, size_t msglen)
{
	auto		it = builds.find(id);

	if (it == builds.end() || it->second->received != it->second->n)
	{
		strlcpy(msg, "build started before all vectors arrived", msglen);
		return CAGRA_REPLY_ERROR;
	}
	CagraBuildJobState &j = *it->second;
	std::string err;
	CagraReply	r = cagra_engine_build(j.vectors.data(), j.n, j.format, j.params, &j.rows, &j.entries,
									   &j.device, &err);

	/* cached index copies hold device memory a build may need: free them
	 * (searches reload what they use) and try once more */
	if (r == CAGRA_REPLY_OUT_OF_MEMORY && cagra_cache_clear() > 0)
		r = cagra_engine_build(j.vectors.data(), j.n, j.format, j.params, &j.rows, &j.entries,
							   &j.device, &err);

	std::vector<float>().swap(j.vectors);
	if (r != CAGRA_REPLY_OK)
	{
		strlcpy(msg, err.c_str(), msglen);
		builds.erase(it);
		return r;
	}
	j.built = true;
	p->entry_count = (uint32) Min(j.entries.size(), (size_t) CAGRA_MAX_ENTRY_NODES);
	memcpy(p->entries, j.entries.data(), p->entry_count * sizeof(uint32));
	p->device = j.device;
	pg_atomic_fetch_add_u64(&cagra_worker_shared->builds, 1);
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

static CagraReply
cagra_build_request(CagraRequestSlot *slot, CagraBuildPayload *p) noexcept
{
	try
	{
		CagraBuildId id(slot->backend_pid, slot->build_id);

		switch (slot->kind)
		{
			case CAGRA_REQ_BUILD_DATA:
				return cagra_build_data(id, p, slot->message, sizeof(slot->message));
			case CAGRA_REQ_BUILD_RUN:
				return cagra_build_run(id, p, slot->message, sizeof(slot->message));
			case CAGRA_REQ_BUILD_FETCH:
				return cagra_build_fetch(id, p, slot->message, sizeof(slot->message));
			default:
				strlcpy(slot->message, "unknown request kind", sizeof(slot->message));
				return CAGRA_REPLY_ERROR;
		}
	}
	catch (...)
	{
		builds.erase(CagraBuildId(slot->backend_pid, slot->build_id));
		strlcpy(slot->message, "out of memory in the cagra worker during a build", sizeof(slot->message));
		return CAGRA_REPLY_OUT_OF_MEMORY;
	}
}

CagraReply
cagra_worker_run_build_request(CagraRequestSlot *slot, void *payload)
{
	return cagra_build_request(slot, (CagraBuildPayload *) payload);
}
