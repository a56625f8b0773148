/*
 * build.cpp — ambuild and ambuildempty: the heap scan (build_scan.cpp),
 * the graph, built by the GPU worker when it runs (the vectors streamed to
 * it during the scan), otherwise by the core here on its own threads while
 * this (the only PostgreSQL) thread reports progress and watches for
 * interrupts; then the pages (build_write.cpp) while a thread measures the
 * search buffer the graph needs, the meta page last, and the sync
 * (docs/storage.md).
 */
#include "am/build_scan.h"
#include "am/build_write.h"

#include <atomic>
#include <thread>

#include "core/build.h"

extern "C" {
#include "access/tableam.h"
#include "commands/progress.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/smgr.h"
#include "utils/memutils.h"
#include "utils/wait_event.h"
}

/* ---- the core build on its own threads ---- */

struct CagraBuildJob
{
	cagra::DatasetView data;
	cagra::Metric metric = cagra::Metric::L2;
	cagra::BuildParams params;
	cagra::BuildProgress progress;
	cagra::BuiltGraph result;
	CagraStatus status;
	std::atomic<bool> finished{false};
	std::thread thread;

	~CagraBuildJob()
	{
		progress.cancel = true;
		if (thread.joinable())
			thread.join();
	}

	void run() noexcept
	{
		cagra_guard(&status, [this] { result = cagra::build_graph(data, metric, params, &progress); });
		finished = true;
	}
};

/* Start the job's thread (signals blocked: boundary.h; the core's threads
 * inherit the mask). */
static bool
cagra_start_job(CagraBuildJob *job, CagraStatus *st) noexcept
{
	return cagra_guard(st, [job] { job->thread = cagra_start_thread([job] { job->run(); }); });
}

static void
cagra_stop_job(CagraBuildJob *job) noexcept
{
	job->progress.cancel = true;
	if (job->thread.joinable())
		job->thread.join();
}

static int64
cagra_phase_of(uint32 core_phase)
{
	return core_phase == (uint32) cagra::BuildPhase::Pruning ? CAGRA_PHASE_PRUNE : CAGRA_PHASE_KNN;
}

static void
cagra_report_worker_step(CagraWorkerBuildStep step)
{
	pgstat_progress_update_param(PROGRESS_CREATEIDX_SUBPHASE,
								 step == CAGRA_WORKER_RECEIVE_GRAPH ? CAGRA_PHASE_RECEIVE : CAGRA_PHASE_KNN);
}

/*
 * Run the core build and wait for it, reporting progress.  On a cancel
 * request the job is stopped and joined before CHECK_FOR_INTERRUPTS throws;
 * on any other error the owner's reset callback stops and joins it.
 */
static CagraBuildJob *
cagra_run_core_build(CagraBuildState *bs, CagraOwner **owner_out)
{
	CagraStatus st;
	CagraBuildJob *job = nullptr;

	if (!cagra_guard(&st, [&job] { job = new CagraBuildJob(); }))
		cagra_report_status(&st);
	CagraOwner *owner = cagra_owner_new(bs->cxt, job, cagra_delete_object<CagraBuildJob>);

	job->data.data = bs->vectors;
	job->data.n = bs->n;
	job->data.dim = bs->dims;
	job->metric = bs->metric;
	job->params = bs->params;

	if (!cagra_start_job(job, &st))
	{
		cagra_owner_free(owner);
		cagra_report_status(&st);
	}

	int64		last_phase = -1;

	while (!job->finished.load())
	{
		int			rc = WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_POSTMASTER_DEATH,
								   10L, PG_WAIT_EXTENSION);

		ResetLatch(MyLatch);
		if (rc & WL_POSTMASTER_DEATH)
		{
			cagra_stop_job(job);
			proc_exit(1);
		}

		int64		phase = cagra_phase_of(job->progress.phase.load());

		if (phase != last_phase)
		{
			pgstat_progress_update_param(PROGRESS_CREATEIDX_SUBPHASE, phase);
			last_phase = phase;
		}
		pgstat_progress_update_param(PROGRESS_CREATEIDX_TUPLES_TOTAL, (int64) job->progress.total.load());
		pgstat_progress_update_param(PROGRESS_CREATEIDX_TUPLES_DONE, (int64) job->progress.done.load());

		if (InterruptPending)
		{
			if (QueryCancelPending || ProcDiePending)
				cagra_stop_job(job);
			CHECK_FOR_INTERRUPTS();
		}
	}
	cagra_stop_job(job);		/* joins the finished thread */
	if (!job->status.ok)
	{
		st = job->status;
		cagra_owner_free(owner);
		cagra_report_status(&st);
	}
	*owner_out = owner;
	return job;
}

/* Seconds since *mark, which moves to now. */
static double
cagra_lap(instr_time *mark)
{
	instr_time	now,
				elapsed;

	INSTR_TIME_SET_CURRENT(now);
	elapsed = now;
	INSTR_TIME_SUBTRACT(elapsed, *mark);
	*mark = now;
	return INSTR_TIME_GET_DOUBLE(elapsed);
}


static void
cagra_check_built_graph(const CagraBuildState *bs, const cagra::BuiltGraph &built)
{
	if (built.graph.degree != bs->params.graph_degree || built.graph.size() != bs->n)
		elog(ERROR, "cagra core build returned a graph of %llu x %u for %llu vectors of degree %u",
			 (unsigned long long) built.graph.size(), built.graph.degree,
			 (unsigned long long) bs->n, bs->params.graph_degree);
}

/* The graph of the collected vectors: on the worker when the scan streamed
 * them there, otherwise (or when it fails) by the core here; *owner owns a
 * core build. */
static const cagra::BuiltGraph *
cagra_build_graph(CagraBuildState *bs, int build_device, CagraOwner **owner, uint32 *built_on)
{
	const cagra::BuiltGraph *built = NULL;
	bool		on_gpu = false;
	cagra::BuiltGraph *from_worker = NULL;

	if (bs->streaming)
		from_worker = cagra_client_build_graph(RelationGetRelationName(bs->index), &bs->stream, bs->n,
											   bs->stream_failure[0] ? bs->stream_failure : NULL,
											   build_device == CAGRA_DEVICE_GPU, cagra_report_worker_step,
											   bs->cxt, &on_gpu);
	else if (build_device == CAGRA_DEVICE_GPU)
		cagra_client_require_gpu_build(RelationGetRelationName(bs->index));
	if (from_worker)
	{
		/* final as the worker's engine hands it over: connected, with its
		 * entry nodes */
		*built_on = on_gpu ? CAGRA_DEVICE_GPU : CAGRA_DEVICE_CPU;
		built = from_worker;
	}
	else
		built = &cagra_run_core_build(bs, owner)->result;
	cagra_check_built_graph(bs, *built);
	return built;
}

/*
 * The itopk_size searches of this graph use while cagra.itopk_size is 0:
 * the smallest that reaches recall 0.95 on a sample of its own rows, each
 * searched for in the graph without it, and the entry probes CPU searches
 * use while cagra.entry_probes is -1 (cagra::choose_itopk, docs/tuning.md),
 * for the meta page.  It runs on a thread of its own while the node pages
 * are written: both only read the graph and the vectors, and the meta page
 * goes last.
 */
struct CagraMeasureJob
{
	cagra::DatasetView data;
	cagra::Metric metric = cagra::Metric::L2;
	const cagra::BuiltGraph *built = nullptr;
	uint64_t	seed = 0;
	uint32_t	threads = 1;
	cagra::ItopkChoice choice;
	CagraStatus status;
	double		seconds = 0;
	std::thread thread;

	~CagraMeasureJob()
	{
		if (thread.joinable())
			thread.join();
	}

	void run() noexcept
	{
		instr_time	start;

		INSTR_TIME_SET_CURRENT(start);
		cagra_guard(&status, [this] {
			choice = cagra::choose_itopk(built->graph, data, metric, built->entry_nodes, seed, threads);
		});
		seconds = cagra_lap(&start);
	}
};

/* Start the measurement; its owner (in the build's memory context) joins
 * the thread when freed, on any error too. */
static CagraMeasureJob *
cagra_start_measure(const CagraBuildState *bs, const cagra::BuiltGraph *built, CagraOwner **owner_out)
{
	CagraStatus st;
	CagraMeasureJob *job = nullptr;

	if (!cagra_guard(&st, [&job] { job = new CagraMeasureJob(); }))
		cagra_report_status(&st);
	*owner_out = cagra_owner_new(bs->cxt, job, cagra_delete_object<CagraMeasureJob>);
	job->data = cagra::DatasetView{bs->vectors, bs->n, bs->dims};
	job->metric = bs->metric;
	job->built = built;
	job->seed = bs->params.seed;
	job->threads = bs->params.threads;
	if (!cagra_guard(&st, [job] { job->thread = cagra_start_thread([job] { job->run(); }); }))
	{
		cagra_owner_free(*owner_out);
		cagra_report_status(&st);
	}
	return job;
}

/* Wait for the measurement and put its result into the meta page; a
 * NOTICE says when itopk_size is above the default.  *seconds: how long it
 * ran (beside the writes). */
static void
cagra_finish_measure(const CagraBuildState *bs, CagraMeasureJob *job, CagraOwner *owner, CagraMetaData *meta,
					 double *seconds)
{
	pgstat_progress_update_param(PROGRESS_CREATEIDX_SUBPHASE, CAGRA_PHASE_MEASURE);
	job->thread.join();

	cagra::ItopkChoice choice = job->choice;
	CagraStatus st = job->status;

	*seconds = job->seconds;
	cagra_owner_free(owner);
	if (!st.ok)
		cagra_report_status(&st);
	if (choice.measured)
		elog(DEBUG1, "cagra build of \"%s\": itopk_size %u reaches recall@10 %.3f on %u of its rows, against %s; "
			 "from the entry index %u probes %.3f, %u probes %.3f",
			 RelationGetRelationName(bs->index), choice.itopk_size, choice.recall, cagra::kItopkSamples,
			 choice.exact_reference ? "their exact neighbours" : "a search of 1024 candidates",
			 choice.entry_probes, choice.probes_recall, cagra::SearchParams{}.entry_probes,
			 choice.default_probes_recall);
	if (choice.itopk_size > cagra::SearchParams{}.itopk_size)
		ereport(NOTICE,
				(errmsg("cagra index \"%s\" searches with itopk_size %u", RelationGetRelationName(bs->index),
						choice.itopk_size),
				 choice.recall >= cagra::kItopkTargetRecall ?
				 errdetail("A search of %u candidates found %.1f%% of the 10 nearest neighbours of %u of its rows, the smallest buffer to reach %.0f%%.",
						   choice.itopk_size, 100.0 * choice.recall, cagra::kItopkSamples,
						   100.0 * cagra::kItopkTargetRecall) :
				 errdetail("A search of %u candidates, the most the GPU allows, found %.1f%% of the 10 nearest neighbours of %u of its rows.",
						   choice.itopk_size, 100.0 * choice.recall, cagra::kItopkSamples),
				 errhint("SET cagra.itopk_size to trade recall for speed; 0, the default, uses the index's own.")));
	meta->search_itopk = choice.itopk_size;
	meta->search_probes = choice.entry_probes;
}

/* The build's state, before the heap scan. */
static CagraBuildState *
cagra_build_state_new(Relation heap, Relation index, int build_device, MemoryContext cxt)
{
	CagraBuildState *bs = (CagraBuildState *) palloc0(sizeof(CagraBuildState));
	int32		typmod = TupleDescAttr(RelationGetDescr(index), 0)->atttypmod;
	BlockNumber heap_pages;
	double		heap_tuples,
				allvisfrac;

	bs->index = index;
	bs->metric = cagra_index_metric(index);
	bs->dims = typmod > 0 ? (uint32) typmod : 0;
	bs->params = cagra_build_params(index);
	bs->halfvec = cagra_index_is_halfvec(index);
	bs->element = cagra_option_element_type(index);
	bs->mem_limit = (double) maintenance_work_mem * 1024.0;
	bs->cxt = cxt;
	bs->tuple_cxt = AllocSetContextCreate(cxt, "cagra build tuple", ALLOCSET_DEFAULT_SIZES);
	bs->vectors = (float *) palloc(sizeof(float));
	bs->tids = (ItemPointerData *) palloc(sizeof(ItemPointerData));
	bs->stream_wanted = build_device != CAGRA_DEVICE_CPU;

	table_relation_estimate_size(heap, NULL, &heap_pages, &heap_tuples, &allvisfrac);
	bs->expected = (uint64) Min(heap_tuples * 1.1 + 1024, (double) cagra::kInvalidNode);
	return bs;
}

/* The seconds of each phase, for the DEBUG1 line at the end. */
typedef struct CagraBuildTimes
{
	double		scan;
	double		graph;
	double		write;
	double		measure;		/* beside the write */
	double		measure_wait;	/* after it */
	double		sync;
} CagraBuildTimes;

/* The node pages of the built graph, beside the measurement of its search
 * buffer, which goes into the meta page. */
static void
cagra_write_graph(Relation index, IndexInfo *indexInfo, CagraBuildState *bs, const cagra::BuiltGraph *built,
				  CagraMetaData *meta, CagraBuildTimes *times, instr_time *mark)
{
	meta->entry_count = (uint32) Min(built->entry_nodes.size(), (size_t) CAGRA_MAX_ENTRY_NODES);
	if (built->long_edges)
		meta->build_flags |= CAGRA_BUILT_LONG_EDGES;
	for (uint32 i = 0; i < meta->entry_count; i++)
		meta->entries[i] = built->entry_nodes[i];

	CagraOwner *measure_owner;
	CagraMeasureJob *measure = cagra_start_measure(bs, built, &measure_owner);

	pgstat_progress_update_param(PROGRESS_CREATEIDX_SUBPHASE, CAGRA_PHASE_WRITE);
	pgstat_progress_update_param(PROGRESS_CREATEIDX_TUPLES_TOTAL, (int64) bs->n);
	/* The measurement reads the rows segment and the mappings, which an
	 * abort releases before it deletes this memory context: joined first. */
	PG_TRY();
	{
		cagra_write_node_pages(index, indexInfo, meta, bs, &built->graph);
	}
	PG_CATCH();
	{
		cagra_owner_free(measure_owner);
		PG_RE_THROW();
	}
	PG_END_TRY();
	times->write = cagra_lap(mark);
	cagra_finish_measure(bs, measure, measure_owner, meta, &times->measure);
	times->measure_wait = cagra_lap(mark);
}

/* The DEBUG1 lines of the scan's memory and each phase's seconds, and the
 * NOTICE of rows left out. */
static void
cagra_build_report(const CagraBuildState *bs, const CagraBuildTimes *t)
{
	const char *name = RelationGetRelationName(bs->index);

	ereport(DEBUG1,
			(errmsg_internal("cagra build of \"%s\": the heap scan held at most %zu bytes of rows in memory (maintenance_work_mem %d kB)%s",
							 name, bs->peak_bytes, maintenance_work_mem,
							 bs->streaming && bs->stream_failure[0] == '\0' ?
							 "; it streamed them to the worker" : "")));
	ereport(DEBUG1,
			(errmsg_internal("cagra build of \"%s\": %llu rows; seconds: scan %.3f, graph %.3f, write %.3f, measure %.3f (beside the write; then waited for %.3f), sync %.3f",
							 name, (unsigned long long) bs->n, t->scan, t->graph, t->write, t->measure,
							 t->measure_wait, t->sync)));
	if (bs->skipped_zero > 0)
		ereport(NOTICE,
				(errmsg_plural("%llu vector was not indexed: its cosine distance is undefined (a zero vector, or a squared norm beyond the float range)",
							   "%llu vectors were not indexed: their cosine distance is undefined (zero vectors, or a squared norm beyond the float range)",
							   (unsigned long) bs->skipped_zero,
							   (unsigned long long) bs->skipped_zero)));
}

IndexBuildResult *
cagra_build(Relation heap, Relation index, IndexInfo *indexInfo)
{
	int			build_device = cagra_option_build_device(index);

	if (RelationGetNumberOfBlocks(index) != 0)
		elog(ERROR, "index \"%s\" already contains data", RelationGetRelationName(index));
	if (build_device == CAGRA_DEVICE_GPU)
		cagra_client_require_gpu_build(RelationGetRelationName(index));

	MemoryContext cxt = AllocSetContextCreate(CurrentMemoryContext, "cagra build", ALLOCSET_DEFAULT_SIZES);
	MemoryContext old = MemoryContextSwitchTo(cxt);
	CagraBuildState *bs = cagra_build_state_new(heap, index, build_device, cxt);
	CagraBuildTimes times = {0, 0, 0, 0, 0, 0};
	instr_time	mark;

	pgstat_progress_update_param(PROGRESS_CREATEIDX_SUBPHASE, CAGRA_PHASE_LOAD);
	INSTR_TIME_SET_CURRENT(mark);

	double		reltuples = cagra_build_scan(heap, index, indexInfo, bs);

	times.scan = cagra_lap(&mark);

	CagraMetaData meta;
	CagraOwner *owner = NULL;
	uint32		built_on = CAGRA_DEVICE_CPU;
	const cagra::BuiltGraph *built = bs->n > 0 ? cagra_build_graph(bs, build_device, &owner, &built_on) : NULL;

	times.graph = cagra_lap(&mark);
	cagra_fill_meta(&meta, index, bs->dims);
	meta.n = meta.live = meta.built_nodes = (uint32) bs->n;
	meta.max_norm = (float4) bs->max_norm;
	meta.build_device = built_on;
	if (built)
		cagra_write_graph(index, indexInfo, bs, built, &meta, &times, &mark);
	else
		pgstat_progress_update_param(PROGRESS_CREATEIDX_SUBPHASE, CAGRA_PHASE_WRITE);
	cagra_write_meta_page(index, &meta, built != NULL);
	times.write += cagra_lap(&mark);
	if (RelationNeedsWAL(index))
	{
		pgstat_progress_update_param(PROGRESS_CREATEIDX_SUBPHASE, CAGRA_PHASE_SYNC);
		smgrimmedsync(RelationGetSmgr(index), MAIN_FORKNUM);
	}
	times.sync = cagra_lap(&mark);
	cagra_build_report(bs, &times);
	MemoryContextSwitchTo(old);

	IndexBuildResult *result = (IndexBuildResult *) palloc(sizeof(IndexBuildResult));

	result->heap_tuples = reltuples;
	result->index_tuples = (double) bs->n;
	if (owner)
		cagra_owner_free(owner);
	if (bs->rows_seg)
		dsm_detach(bs->rows_seg);
	MemoryContextDelete(cxt);
	return result;
}

/* The init fork of an unlogged index: a meta page with no nodes. */
void
cagra_buildempty(Relation index)
{
	CagraMetaData meta;
	int32		typmod = TupleDescAttr(RelationGetDescr(index), 0)->atttypmod;
	Page		page = (Page) palloc(BLCKSZ);

	cagra_fill_meta(&meta, index, typmod > 0 ? (uint32) typmod : 0);
	cagra_init_meta_page(page, &meta);
	PageSetChecksumInplace(page, CAGRA_METAPAGE_BLKNO);
	smgrwrite(RelationGetSmgr(index), INIT_FORKNUM, CAGRA_METAPAGE_BLKNO, (char *) page, true);
	log_newpage(&CAGRA_REL_FILE_ID(index), INIT_FORKNUM, CAGRA_METAPAGE_BLKNO,
				page, true);
	smgrimmedsync(RelationGetSmgr(index), INIT_FORKNUM);
	pfree(page);
}
