/*
 * search_job.cpp — one batch of searches, a job: made for the taken slots,
 * its index copy picked, run on a search thread (or in the main loop when
 * there is none), each request answered in its payload and slot as soon as
 * its rows are final; lone queries started on the resident kernel answered
 * by the collector thread; the job finished in the main loop.
 */
#include "worker/cache.h"
#include "worker/search_job.h"
#include "worker/slots.h"

#include <cstring>
#include <vector>

extern "C" {
#include "utils/timestamp.h"
}

/* Why the worker cannot answer this payload of a batch of `req` against
 * `copy`, or NULL. */
const char *
cagra_search_payload_problem(CagraSearchPayload *p, const CagraSearchRequest &req, const CagraIndexCopy *copy)
{
	if (!p)
		return "request segment gone";
	if (p->dim != copy->format.dim || p->k != req.k)
		return "query dimensions do not match the index copy";
	if (p->plan_degree != (req.plans_inserts ? copy->degree : 0))
		return "insert plans of another graph degree than the index copy's";
	return NULL;
}

/* Write request i of the job its answer: the reply r (with msg), or its
 * payload's problem, and when OK its rows (ids, dists: the request's own, k
 * a query; in_place: already in its payload) with their heap TIDs, and its
 * insert plans (the request's own, or NULL: none or in place); then answer
 * its slot.  Returns 1 when its backend had left (the slot then is in
 * *abandoned), else 0. */
static int
cagra_answer_request(CagraWorkerShared *sh, CagraSearchJob *job, int i, uint32 k, const uint32 *ids,
					 const float *dists, const uint32 *plans, bool in_place, CagraReply r, const char *msg,
					 int *abandoned) noexcept
{
	CagraRequestSlot *s = &sh->slots[job->picked[i]];
	CagraSearchPayload *p = (CagraSearchPayload *) job->payloads[i];
	const char *problem = cagra_search_payload_problem(p, job->search, job->copy);

	if (problem)
	{
		s->reply = CAGRA_REPLY_ERROR;
		strlcpy(s->message, problem, sizeof(s->message));
	}
	else
	{
		s->reply = r;
		s->copy.n = job->copy->key.n;
		s->copy.reused = job->copy->key.reused;
		s->copy.linked = job->copy->key.linked;
		s->copy.takes_updates = job->copy->takes_updates;
		memcpy(s->copy.linked_after, job->copy->linked_after, sizeof(s->copy.linked_after));
		strlcpy(s->message, msg, sizeof(s->message));
	}
	if (!problem && r == CAGRA_REPLY_OK)
	{
		const size_t rows = (size_t) p->nq * k;
		const std::vector<uint64_t> &copy_tids = job->copy->tids;
		uint64	   *tids = cagra_search_tids(p);

		if (!in_place)
		{
			memcpy(cagra_search_ids(p), ids, rows * sizeof(uint32));
			memcpy(cagra_search_distances(p), dists, rows * sizeof(float));
			if (plans)
				memcpy(cagra_search_plans(p), plans,
					   (size_t) p->nq * cagra_insert_plan_words(p->plan_degree) * sizeof(uint32));
		}
		for (size_t j = 0; j < rows; j++)
			tids[j] = ids[j] < copy_tids.size() ? copy_tids[ids[j]] : 0;
	}
	return cagra_answer_slots(sh, &job->picked[i], 1, abandoned);
}

/* Where the requests of a running batch stand: the rows of the batch's
 * answers that are each request's, and which requests are answered. */
struct CagraBatchAnswers
{
	CagraWorkerShared *sh;
	CagraSearchJob *job;
	uint32		k;
	const uint32 *ids;			/* the batch's rows of answers */
	const float *dists;
	const uint32 *plans;		/* the batch's insert plans, or NULL */
	uint32		plan_words;		/* of a query's plan */
	bool		in_place;		/* the only request's payload holds the rows */
	std::vector<uint32> first;	/* request i's first row (a request with a
								 * problem has none) */
	std::vector<uint32> left;	/* its rows not yet final */
	std::vector<int> request_of;	/* each row's request */
	std::vector<bool> answered;
	int			nabandoned = 0;	/* of job->abandoned, sized for every request */

	void		answer(int i, CagraReply r, const char *msg) noexcept
	{
		nabandoned += cagra_answer_request(sh, job, i, k, ids + (size_t) first[i] * k,
										   dists + (size_t) first[i] * k,
										   plans && !in_place ? plans + (size_t) first[i] * plan_words : NULL,
										   in_place, r, msg, job->abandoned.data() + nabandoned);
		answered[i] = true;
	}
};

/* Run one batch (on a search thread, or in the main loop when there is
 * none): gather the queries of every payload, search, write each answer
 * into its payload and slot.  A request is answered as soon as its
 * queries' answers are final (CagraSearchLane::query_done), the rest when
 * the search returns.  A filtered search is a batch of its own: the nodes
 * of its allowed rows are the batch's filter.  No PostgreSQL call but
 * GetCurrentTimestamp (a clock read), so that its times compare with the
 * backends'. */
void
cagra_run_search_job(CagraSearchJob *job, CagraSearchLane *lane) noexcept
{
	CagraWorkerShared *sh = cagra_worker_shared;
	int			n = (int) job->picked.size();
	const CagraSearchRequest &req = job->search;
	CagraIndexCopy *copy = job->copy;
	uint32		dim = copy->format.dim;
	CagraBatchAnswers b;

	TimestampTz job_started = GetCurrentTimestamp();

	b.sh = sh;
	b.job = job;
	b.k = req.k;
	/* before the try: its handler answers through them */
	b.answered.assign(n, false);
	try
	{
		std::string msg;
		CagraReply	r;
		double		device_ms = -1.0;
		uint32		nq = 0;
		/* A batch of one request (a cagra_search call, a lone client) is
		 * searched in its payload in place; others are gathered into the
		 * thread's scratch, kept between batches (fresh allocations cost
		 * page faults, which at 40 MB of queries took longer than the GPU) */
		static thread_local std::vector<float> gathered_queries;
		static thread_local std::vector<uint32> gathered_ids;
		static thread_local std::vector<float> gathered_dists;
		static thread_local std::vector<uint32> allowed_nodes;
		static thread_local std::vector<uint32> gathered_plans;
		CagraSearchPayload *only = (CagraSearchPayload *) job->payloads[0];
		const float *queries;
		uint32	   *ids;
		float	   *dists;
		const std::vector<uint32> *allowed = NULL;

		b.first.assign(n, 0);
		b.left.assign(n, 0);
		b.request_of.clear();
		b.in_place = n == 1 && !cagra_search_payload_problem(only, req, copy);
		gathered_queries.clear();
		for (int i = 0; i < n; i++)
		{
			CagraSearchPayload *p = (CagraSearchPayload *) job->payloads[i];

			if (cagra_search_payload_problem(p, req, copy))
				continue;
			b.first[i] = nq;
			b.left[i] = p->nq;
			b.request_of.insert(b.request_of.end(), p->nq, i);
			if (!b.in_place)
				gathered_queries.insert(gathered_queries.end(), cagra_search_queries(p),
										cagra_search_queries(p) + (size_t) p->nq * dim);
			nq += p->nq;
		}
		if (b.in_place)
		{
			queries = cagra_search_queries(only);
			ids = cagra_search_ids(only);
			dists = cagra_search_distances(only);
			if (req.filtered)
			{
				cagra_engine_allowed_nodes(*copy, cagra_search_filter(only), only->filter_tids, allowed_nodes);
				allowed = &allowed_nodes;
			}
		}
		else
		{
			gathered_ids.resize((size_t) nq * b.k);
			gathered_dists.resize((size_t) nq * b.k);
			queries = gathered_queries.data();
			ids = gathered_ids.data();
			dists = gathered_dists.data();
		}
		b.ids = ids;
		b.dists = dists;
		b.plans = NULL;
		b.plan_words = req.plans_inserts ? cagra_insert_plan_words(copy->degree) : 0;

		TimestampTz engine_started = GetCurrentTimestamp();

		if (lane)
		{
			lane->last_resident = false;
			/* a plan is made once the whole batch's candidates are in */
			if (!req.plans_inserts)
				lane->query_done = [&b](uint32_t q) {
					int			i = b.request_of[q];

					if (--b.left[i] == 0)
						b.answer(i, CAGRA_REPLY_OK, "");
				};
		}
		r = nq > 0 ? cagra_engine_search(*copy, lane, queries, nq, req, allowed, ids, dists, &device_ms, &msg)
			: CAGRA_REPLY_OK;

		TimestampTz engine_ended = GetCurrentTimestamp();

		if (r == CAGRA_REPLY_OK && nq > 0 && req.plans_inserts)
		{
			uint32	   *plans = b.in_place ? cagra_search_plans(only) : NULL;

			if (!plans)
			{
				gathered_plans.resize((size_t) nq * b.plan_words);
				plans = gathered_plans.data();
				b.plans = plans;
			}
			r = cagra_engine_plan_inserts(*copy, lane, queries, nq, req.k, ids, dists, plans, &msg);
			cagra_add_timing(sh, CAGRA_TIMING_PLAN, (uint64) Max(GetCurrentTimestamp() - engine_ended, 0), 1);
		}
		if (lane)
			lane->query_done = nullptr;

		uint64		engine_us = (uint64) Max(engine_ended - engine_started, 0);

		cagra_add_timing(sh, CAGRA_TIMING_ENGINE, engine_us, 1);
		if (lane && lane->last_resident)
			cagra_add_timing(sh, CAGRA_TIMING_RESIDENT, engine_us, 1);
		if (device_ms >= 0.0)
			cagra_add_timing(sh, CAGRA_TIMING_DEVICE, (uint64) (device_ms * 1000.0), 1);

		for (int i = 0; i < n; i++)
			if (!b.answered[i])
				b.answer(i, r, msg.c_str());
		job->searched = nq;
		pg_atomic_fetch_add_u64(&sh->queries, nq);
		pg_atomic_fetch_add_u64(&sh->batches, 1);
	}
	catch (...)
	{
		if (lane)
			lane->query_done = nullptr;
		for (int i = 0; i < n; i++)
		{
			CagraRequestSlot *s = &sh->slots[job->picked[i]];

			if (b.answered[i])
				continue;
			s->reply = CAGRA_REPLY_OUT_OF_MEMORY;
			strlcpy(s->message, "out of memory in the cagra worker", sizeof(s->message));
			b.nabandoned += cagra_answer_slots(sh, &job->picked[i], 1, job->abandoned.data() + b.nabandoned);
		}
	}
	job->abandoned.resize(b.nabandoned);
	job->answered = true;
	job->done_at = GetCurrentTimestamp();
	cagra_add_timing(sh, CAGRA_TIMING_JOB, (uint64) Max(job->done_at - job_started, 0), 1);
}

/* A job for the n picked slots, or NULL when memory is short. */
CagraSearchJob *
cagra_new_search_job(const int *picked, int n, uint64 queries, bool filtered) noexcept
{
	try
	{
		CagraSearchJob *job = new CagraSearchJob();

		job->picked.assign(picked, picked + n);
		job->search = cagra_worker_shared->slots[picked[0]].search;
		job->payloads.assign(n, nullptr);
		job->segs.assign(n, nullptr);
		job->abandoned.assign(n, -1);	/* as many as may leave, so answering allocates nothing */
		job->queries = queries;
		job->filtered = filtered;
		return job;
	}
	catch (...)
	{
		return nullptr;
	}
}

/* The copy the job searches (touching it); false, with every slot's reply
 * set, when there is none yet. */
bool
cagra_pick_copy(CagraWorkerShared *sh, CagraSearchJob *job) noexcept
{
	try
	{
		const CagraRequestSlot *first = &sh->slots[job->picked[0]];

		job->copy = cagra_cache_lookup(first->key);
		if (job->copy)
			return true;
		for (int i : job->picked)
		{
			CagraRequestSlot *s = &sh->slots[i];

			s->reply = cagra_cache_miss_reply(s->key, s->backend_pid, s->message, sizeof(s->message));
		}
	}
	catch (...)
	{
		for (int i : job->picked)
		{
			CagraRequestSlot *s = &sh->slots[i];

			s->reply = CAGRA_REPLY_OUT_OF_MEMORY;
			strlcpy(s->message, "out of memory in the cagra worker", sizeof(s->message));
		}
	}
	return false;
}

/* The collector thread's turn (search_pool.h): every started lone query
 * that is done answered, its job finished.  No PostgreSQL call but
 * GetCurrentTimestamp and SetLatch, as on the search threads. */
void
cagra_collect_started(std::vector<CagraSearchJob *> &finished) noexcept
{
	CagraWorkerShared *sh = cagra_worker_shared;
	static thread_local std::vector<CagraResidentAnswer> answers;

	cagra_engine_collect_resident(answers);
	for (const CagraResidentAnswer &a : answers)
	{
		CagraSearchJob *job = (CagraSearchJob *) a.tag;
		const uint32 k = job->search.k;

		job->abandoned.resize(cagra_answer_request(sh, job, 0, k, a.ids, a.dists, NULL, false, a.reply,
												   a.message.c_str(), job->abandoned.data()));
		job->answered = true;
		job->done_at = GetCurrentTimestamp();
		job->searched = 1;

		uint64		engine_us = (uint64) Max(job->done_at - job->started_at, 0);

		cagra_add_timing(sh, CAGRA_TIMING_ENGINE, engine_us, 1);
		cagra_add_timing(sh, CAGRA_TIMING_JOB, engine_us, 1);
		if (a.reply == CAGRA_REPLY_OK)
		{
			cagra_add_timing(sh, CAGRA_TIMING_RESIDENT, engine_us, 1);
			cagra_add_timing(sh, CAGRA_TIMING_DEVICE, (uint64) (a.device_ms * 1000.0), 1);
		}
		pg_atomic_fetch_add_u64(&sh->queries, 1);
		pg_atomic_fetch_add_u64(&sh->batches, 1);
		finished.push_back(job);
	}
}

static void
cagra_detach_job_segments(CagraSearchJob *job)
{
	for (dsm_segment *seg : job->segs)
		if (seg)
			dsm_detach(seg);
}

/* A job never started: its one-off segments detached, freed. */
void
cagra_drop_search_job(CagraSearchJob *job)
{
	cagra_detach_job_segments(job);
	delete job;
}

/* Detach a job's one-off segments, answer its slots (unless the job did),
 * free it. */
void
cagra_finish_search_job(CagraWorkerShared *sh, CagraSearchJob *job)
{
	cagra_detach_job_segments(job);
	if (job->done_at != 0)
		cagra_add_timing(sh, CAGRA_TIMING_HANDBACK, (uint64) Max(GetCurrentTimestamp() - job->done_at, 0), 1);
	if (job->copy)
		job->copy->searches += job->searched;
	if (job->answered)
		cagra_free_abandoned(sh, job->abandoned.data(), (int) job->abandoned.size());
	else
		cagra_answer(sh, job->picked.data(), (int) job->picked.size());
	delete job;
}
