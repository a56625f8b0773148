/*
 * search_stream.cpp — one query's rows of a search session, nearest first
 * (search_stream.h): the rounds and their widening from the plan's first
 * round, the CPU searcher's continuation, the exhaustive pass.
 */
#include "am/search_stream.h"

#include <memory>
#include <vector>

#include "am/accessor.h"
#include "am/exhaustive.h"
#include "core/search.h"

extern "C" {
#include "miscadmin.h"
#include "utils/snapmgr.h"
}

typedef enum CagraStreamStage
{
	CAGRA_STREAM_ROUNDS,
	CAGRA_STREAM_CPU,
	CAGRA_STREAM_EXHAUSTIVE,
	CAGRA_STREAM_DONE
} CagraStreamStage;

/* The CPU searcher of stage 2, a C++ object owned by the stream's memory
 * context (cagra_owner_new). */
struct CagraCpuSearch
{
	std::vector<float> query;
	std::vector<uint32_t> entries;
	std::unique_ptr<CagraPageAccessor> accessor;
	std::unique_ptr<cagra::Searcher<CagraPageAccessor>> searcher;
	std::vector<cagra::Neighbor> batch;
	size_t		pos = 0;
	bool		exhausted = false;	/* the reachable graph gave all it has */

	void		release_pins()
	{
		if (accessor)
			accessor->release_pins();
	}
};

struct CagraSearchStream
{
	CagraSearchSession session;
	MemoryContext cxt;			/* the stream's, as begun */
	float	   *query;			/* prepared */
	CagraStreamStage stage;
	uint32		cap;			/* most candidates a round may ask for */
	CagraCandidates round;		/* nq 1: ids, dists, copy TIDs of one round */
	uint32		pos;
	bool		learn;			/* the rounds' rows count for the next first rounds */
	uint32		round_rows;		/* rows the rounds returned */
	CagraCpuSearch *cpu;
	CagraOwner *cpu_owner;
	uint64		cpu_results;	/* results the CPU searcher gave */
	CagraReturnedRows returned;
	CagraExhaustivePass *pass;
	CagraStreamCounts counts;
};

/* ---- stage 1: rounds ---- */

/* One round of the kk nearest candidates: with allowed rows on the worker
 * or the CPU, else on the worker only; false when the worker did not serve
 * it (the fallback reported). */
static bool
cagra_stream_round(CagraSearchStream *s, uint32 kk)
{
	CagraCandidates *c = &s->round;
	bool		present = true;
	bool		served = true;
	MemoryContext old = MemoryContextSwitchTo(s->cxt);

	c->nq = 1;
	c->kk = kk;
	c->ids = (uint32 *) (c->ids ? repalloc(c->ids, sizeof(uint32) * kk) : palloc(sizeof(uint32) * kk));
	c->dists = (float *) (c->dists ? repalloc(c->dists, sizeof(float) * kk) : palloc(sizeof(float) * kk));
	for (uint32 i = 0; i < kk; i++)
		c->ids[i] = cagra::kInvalidNode;
	c->state = NULL;
	c->tids = NULL;
	c->copy_tids = NULL;
	c->by_worker = false;
	c->scratch_set = 0;
	if (s->session.allowed)
		cagra_session_candidates(&s->session, s->query, &present, c, true);
	else
		served = cagra_session_worker_candidates(&s->session, s->query, &present, c);
	/* the worker's TIDs are in scratch memory, valid until the next search */
	if (served && c->copy_tids)
	{
		uint64	   *tids = (uint64 *) palloc(sizeof(uint64) * kk);

		memcpy(tids, c->copy_tids, sizeof(uint64) * kk);
		c->copy_tids = tids;
	}
	s->pos = 0;
	s->counts.rounds += served;
	s->counts.worker_rounds += c->by_worker;
	MemoryContextSwitchTo(old);
	return served;
}

/* The round's next row that the stream's returned rows admit; false when
 * the round has none left. */
static bool
cagra_stream_round_next(CagraSearchStream *s, ItemPointer tid, float *distance)
{
	CagraCandidates *c = &s->round;
	/* the copy's TIDs are exact under an MVCC snapshot (cagra_client_search) */
	bool		copy_tids = c->copy_tids && IsMVCCSnapshot(s->session.snapshot);

	while (s->pos < c->kk)
	{
		uint32		i = s->pos++;
		uint32		id = c->ids[i];
		ItemPointerData root;

		if (id == cagra::kInvalidNode)
			break;
		if (copy_tids && c->copy_tids[i] != 0)
			cagra_unpack_tid(c->copy_tids[i], &root);
		else
		{
			CagraNodeHeader hdr;

			/* the page says whether vacuum removed it since the copy was made */
			cagra_read_record_bytes(s->session.index, &s->session.meta, id, 0, sizeof(hdr), &hdr);
			if (!cagra_node_is_live(hdr.flags))
				continue;
			root = hdr.heap_tid;
		}
		/* a later round may find rows an earlier one did not: keep the order */
		if (!cagra_returned_admits(&s->returned, &root, c->dists[i]))
			continue;
		*tid = root;
		*distance = c->dists[i];
		s->round_rows++;
		return true;
	}
	s->pos = c->kk;
	return false;
}

/* After a round ran out: the next, of twice its k (at most the cap); false
 * when there is none (the last was of the cap, or not full: the search
 * found no more), or the worker did not serve it. */
static bool
cagra_stream_widen(CagraSearchStream *s)
{
	CagraCandidates *c = &s->round;

	if (c->kk >= s->cap || c->ids[c->kk - 1] == cagra::kInvalidNode)
		return false;
	CHECK_FOR_INTERRUPTS();
	return cagra_stream_round(s, (uint32) Min((uint64) 2 * c->kk, (uint64) s->cap));
}

/* ---- stage 2: the CPU searcher ---- */

static void
cagra_stream_start_cpu(CagraSearchStream *s)
{
	const CagraSearchSession *session = &s->session;
	const CagraMetaData *meta = &session->meta;
	CagraCpuSearch *cpu = NULL;
	CagraStatus st;

	if (!cagra_guard(&st, [&] {
			cpu = new CagraCpuSearch();
			cpu->query.assign(s->query, s->query + meta->dims);
			cpu->entries.assign(meta->entries, meta->entries + meta->entry_count);
			cpu->accessor.reset(new CagraPageAccessor(session->index, *meta, true, true));
			cpu->searcher = cagra_new_searcher(*cpu->accessor, cpu->query.data(), session->plan.params, cpu->entries);
		}))
	{
		if (cpu)
			cpu->release_pins();
		delete cpu;
		cagra_report_status(&st);
	}
	s->cpu = cpu;
	s->cpu_owner = cagra_owner_new(s->cxt, cpu, cagra_delete_object<CagraCpuSearch>);
	s->stage = CAGRA_STREAM_CPU;
}

/* The CPU searcher's next batch of live results, `want` of them; ERROR on
 * failure. */
static void
cagra_stream_cpu_batch(CagraCpuSearch *cpu, uint32 want)
{
	CagraStatus st;

	if (cagra_guard(&st, [&] {
			const CagraPageAccessor &acc = *cpu->accessor;
			auto		live = [&acc](uint32_t id) {
				CagraPageAccessor::NodeInfo info;

				return acc.node_info(id, &info) && cagra_node_is_live(info.flags);
			};

			cpu->batch.resize(want);
			uint32		got = cpu->searcher->next(want, live, cpu->batch.data());

			/*
			 * Fewer than asked: the reachable graph is exhausted, and what it
			 * still gave may lie beyond nodes it cannot reach; the exhaustive
			 * pass returns those together with the rest, in order.
			 */
			cpu->batch.resize(got < want ? 0 : got);
			cpu->pos = 0;
			if (got < want)
				cpu->exhausted = true;
		}))
		return;
	cpu->batch.clear();
	cpu->exhausted = true;
	cagra_report_status(&st);
}

/* One step of the CPU searcher: true with a row to return; false after a
 * result the stream does not admit, a new batch, or the searcher's end
 * (the stage is then the exhaustive pass). */
static bool
cagra_stream_cpu_next(CagraSearchStream *s, ItemPointer tid, float *distance)
{
	CagraCpuSearch *cpu = s->cpu;

	if (cpu->pos < cpu->batch.size())
	{
		const cagra::Neighbor &nb = cpu->batch[cpu->pos++];
		CagraPageAccessor::NodeInfo info;

		if (!cpu->accessor->node_info(nb.id, &info))
			elog(ERROR, "cagra scan lost the heap TID of a result");
		s->cpu_results++;
		/* after the worker's rounds: what they returned, or the order, skips it */
		if (s->counts.worker_rounds > 0 && !cagra_returned_admits(&s->returned, &info.heap_tid, nb.distance))
			return false;
		*tid = info.heap_tid;
		*distance = nb.distance;
		return true;
	}
	if (cpu->exhausted)
	{
		s->stage = CAGRA_STREAM_EXHAUSTIVE;
		return false;
	}

	uint64		left = (uint64) cagra_max_scan_tuples - s->returned.count;

	cagra_stream_cpu_batch(cpu, (uint32) Min(left, (uint64) s->session.plan.params.itopk_size));
	CHECK_FOR_INTERRUPTS();
	return false;
}

/*
 * Whether a stream without allowed rows stops searching the graph here for
 * the exhaustive pass: at cagra.max_scan_tuples rows, or once the CPU
 * searcher has given live / graph_degree results.  By then it has measured
 * about graph_degree vectors a result, as many as the pass measures in all
 * (reading them in order, not at random), and the farther a search goes the
 * more rows it misses, which the pass must skip when they lie before the
 * last row returned.  (With allowed rows the rounds' cap bounds the search.)
 */
static bool
cagra_stream_stops(const CagraSearchStream *s)
{
	const CagraMetaData *meta = &s->session.meta;
	uint64		cpu_budget = Max((uint64) meta->live / Max(meta->graph_degree, 1),
								 (uint64) s->session.plan.params.itopk_size);

	if (s->session.allowed)
		return false;
	return s->returned.count >= (uint64) cagra_max_scan_tuples || (s->cpu && s->cpu_results >= cpu_budget);
}

/* ---- stage 3: the exhaustive pass ---- */

/* The next node the search did not return; false when the stream returned
 * every live (allowed) node, or none is left. */
static bool
cagra_stream_exhaustive_next(CagraSearchStream *s, ItemPointer tid, float *distance)
{
	const CagraSearchSession *session = &s->session;

	if (!s->pass)
	{
		uint64		rows = session->allowed ? session->allowed->rows.count : session->meta.live;

		if (s->returned.count >= rows)
			return false;

		MemoryContext old = MemoryContextSwitchTo(s->cxt);

		s->pass = cagra_exhaustive_begin(session->index, &session->meta, s->query, session->allowed);
		s->counts.exhaustive_passes++;
		MemoryContextSwitchTo(old);
	}
	return cagra_exhaustive_next(s->pass, &s->returned, tid, distance);
}

/* ---- the stream ---- */

/* The first stage of a stream without allowed rows: the worker's rounds
 * when it runs, else the CPU searcher. */
static void
cagra_stream_start_unfiltered(CagraSearchStream *s, bool ask_worker)
{
	s->cap = CAGRA_WORKER_MAX_K;
	if (!ask_worker || !cagra_session_on_worker(&s->session))
	{
		cagra_stream_start_cpu(s);
		return;
	}
	/* no first round: itopk_size is over what the worker answers */
	if (s->session.plan.first_round_k == 0)
	{
		if (cagra_device == CAGRA_SEARCH_GPU)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("cagra.itopk_size %u is larger than the GPU allows (%d)",
							s->session.plan.params.itopk_size, CAGRA_WORKER_MAX_K)));
		cagra_stream_start_cpu(s);
		return;
	}
	s->learn = true;
	if (!cagra_stream_round(s, s->session.plan.first_round_k))
		cagra_stream_start_cpu(s);
}

CagraSearchStream *
cagra_stream_begin(const CagraSearchSession *session, const float *query, bool ask_worker, uint32 limit)
{
	CagraSearchStream *s = (CagraSearchStream *) palloc0(sizeof(CagraSearchStream));
	const CagraAllowed *allowed = session->allowed;

	s->session = *session;
	s->cxt = CurrentMemoryContext;
	s->query = (float *) palloc(sizeof(float) * session->meta.dims);
	memcpy(s->query, query, sizeof(float) * session->meta.dims);
	cagra_returned_init(&s->returned, s->cxt);
	s->stage = CAGRA_STREAM_ROUNDS;
	if (!allowed)
	{
		cagra_stream_start_unfiltered(s, ask_worker);
		return s;
	}
	/* past what one traversal keeps, the exhaustive pass measures them once,
	 * rather than rounds of every allowed node for twice as many each */
	s->cap = (uint32) Min(Min((uint64) allowed->rows.count, (uint64) session->meta.live),
						  Min((uint64) cagra_max_scan_tuples, (uint64) cagra::kMaxItopk));
	cagra_stream_round(s, Max(Min(cagra_session_candidates_per_query(session, limit), s->cap), (uint32) 1));
	return s;
}

bool
cagra_stream_next(CagraSearchStream *s, ItemPointer tid, float *distance)
{
	for (;;)
	{
		/* cagra.max_scan_tuples bounds the search, not the answer */
		if (s->stage < CAGRA_STREAM_EXHAUSTIVE && cagra_stream_stops(s))
			s->stage = CAGRA_STREAM_EXHAUSTIVE;
		switch (s->stage)
		{
			case CAGRA_STREAM_ROUNDS:
				if (cagra_stream_round_next(s, tid, distance))
					break;
				if (cagra_stream_widen(s))
					continue;
				if (s->session.allowed)
					s->stage = CAGRA_STREAM_EXHAUSTIVE;
				else
					cagra_stream_start_cpu(s);
				continue;
			case CAGRA_STREAM_CPU:
				if (cagra_stream_cpu_next(s, tid, distance))
					break;
				continue;
			case CAGRA_STREAM_EXHAUSTIVE:
				if (cagra_stream_exhaustive_next(s, tid, distance))
					break;
				s->stage = CAGRA_STREAM_DONE;
				return false;
			case CAGRA_STREAM_DONE:
				return false;
		}
		cagra_returned_add(&s->returned, tid, *distance);
		return true;
	}
}

const CagraStreamCounts *
cagra_stream_counts(const CagraSearchStream *s)
{
	return &s->counts;
}

void
cagra_stream_end(CagraSearchStream *s)
{
	if (!s)
		return;
	if (s->learn)
		cagra_session_remember_rows(&s->session, s->round_rows);
	s->learn = false;
	if (s->cpu)
	{
		s->cpu->release_pins();
		cagra_owner_free(s->cpu_owner);
		s->cpu = NULL;
	}
}
