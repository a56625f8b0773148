/*
 * engine_gpu.cpp — the worker's GPU engine: the C API of libcagra_gpu.so
 * (device copies, batched cagra_gpu_search, the resident kernel,
 * cagra_gpu_build; copies are placed on the device with the most free
 * memory), behind the worker's engine interface (engine.h).
 */
#include "worker/engine_gpu.h"

#include <algorithm>
#include <thread>

#include "core/inner_product_graph.h"
#include "core/search.h"
#include "core/search_plan.h"

/* What the protocol and the core say must hold for the GPU library too. */
static_assert(CAGRA_GPU_INVALID_NODE == cagra::kInvalidNode, "one invalid node id");
static_assert(CAGRA_GPU_MAX_STEP_CANDIDATES == cagra::kGpuMaxStepCandidates,
			  "one limit of the candidates a GPU search step measures");
static_assert(CAGRA_WORKER_MAX_K <= CAGRA_GPU_MAX_K && CAGRA_WORKER_MAX_K <= CAGRA_GPU_MAX_ITOPK,
			  "a worker search must fit the GPU kernel");
static_assert((int) CAGRA_GPU_L2 == (int) cagra::Metric::L2 &&
			  (int) CAGRA_GPU_INNER_PRODUCT == (int) cagra::Metric::InnerProduct &&
			  (int) CAGRA_GPU_COSINE == (int) cagra::Metric::Cosine &&
			  (int) CAGRA_GPU_L1 == (int) cagra::Metric::L1 && cagra::kMetricCount == 4,
			  "the GPU library's metrics are the core's, all four");

/* A GPU filtered search measures its allowed nodes up to this many vector
 * bytes a batch (cagra_engine_search's filtered search). */
#define CAGRA_GPU_MEASURE_BYTES (UINT64_C(1) << 30)

static const CagraGpuApi *gpu_api = nullptr;

/* ---- the GPU library's view of the core's descriptors ---- */

static cagra_gpu_dtype
cagra_gpu_dtype_of(cagra::ElementType type)
{
	switch (type)
	{
		case cagra::ElementType::Float32:
			return CAGRA_GPU_FLOAT32;
		case cagra::ElementType::Float16:
			return CAGRA_GPU_FLOAT16;
	}
	return CAGRA_GPU_FLOAT32;
}

static cagra_gpu_metric
cagra_gpu_metric_of(cagra::Metric metric)
{
	return (cagra_gpu_metric) metric;	/* equal values: asserted above */
}

static cagra_gpu_build_params
cagra_gpu_build_params_of(const cagra::BuildParams &p)
{
	cagra_gpu_build_params g;

	g.graph_degree = p.graph_degree;
	g.intermediate_degree = p.intermediate_degree;
	g.nn_descent_max_iterations = p.nn_descent_max_iterations;
	g.nn_descent_termination = p.nn_descent_termination;
	g.seed = p.seed;
	g.cancel = nullptr;
	return g;
}

static void
cagra_lane_query_done(void *arg, uint32_t query)
{
	const CagraSearchLane *lane = (const CagraSearchLane *) arg;

	if (lane->query_done)
		lane->query_done(query);
}

/* The lane's search context on `device`, made on first use; NULL (msg set)
 * when it cannot be made. */
static cagra_gpu_search_context *
cagra_gpu_lane_context(CagraSearchLane &lane, int device, std::string *msg)
{
	std::vector<cagra_gpu_search_context *> &contexts = lane.gpu_contexts;

	if ((int) contexts.size() <= device)
		contexts.resize(device + 1, nullptr);
	if (!contexts[device])
	{
		if (gpu_api->search_context_create(device, &contexts[device]) != CAGRA_GPU_OK)
		{
			*msg = gpu_api->last_error();
			return nullptr;
		}
		gpu_api->search_context_on_query_done(contexts[device], cagra_lane_query_done, &lane);
	}
	return contexts[device];
}

static CagraReply
cagra_gpu_reply(cagra_gpu_status st, std::string *msg)
{
	*msg = gpu_api->last_error();
	switch (st)
	{
		case CAGRA_GPU_OK:
			return CAGRA_REPLY_OK;
		case CAGRA_GPU_OUT_OF_MEMORY:
			return CAGRA_REPLY_OUT_OF_MEMORY;
		default:
			return CAGRA_REPLY_ERROR;
	}
}

/* The lane's search context on the copy's device; NULL: the copy's own
 * (cagra_gpu_search), or an error in msg when it cannot be made. */
static bool
cagra_gpu_context(const CagraIndexCopy &copy, CagraSearchLane *lane, cagra_gpu_search_context **ctx,
				  std::string *msg)
{
	*ctx = lane ? cagra_gpu_lane_context(*lane, copy.device, msg) : nullptr;
	return !lane || *ctx;
}

/* The GPU library's settings of a traversal of nq queries (accepted: NULL,
 * or the nodes it may return): the plan's, with what follows from the batch
 * (cagra::gpu_batch_params); `params` may leave search_width automatic.
 * The library shapes the launch by the plan's rule (ctas_per_query 0:
 * cagra::gpu_search_shape). */
static cagra_gpu_search_params
cagra_gpu_traverse_params(const CagraIndexCopy &copy, uint32_t nq, const cagra::SearchParams &params,
						  const uint64_t *accepted)
{
	const cagra::GpuBatchParams batch = cagra::gpu_batch_params(params, nq, copy.degree, accepted != nullptr);
	cagra_gpu_search_params g;

	g.itopk_size = batch.params.itopk_size;
	g.search_width = batch.params.search_width;
	g.max_iterations = batch.params.max_iterations;
	g.random_entries = batch.params.random_entries;
	g.seed = batch.params.seed;
	g.ctas_per_query = 0;
	g.resident = batch.resident;
	return g;
}

/* The GPU library's traversal (accepted: NULL, or the nodes it may return);
 * `params` may leave search_width automatic. */
static CagraReply
cagra_gpu_traverse(CagraIndexCopy &copy, CagraSearchLane *lane, const float *queries, uint32_t nq, uint32_t k,
				   const cagra::SearchParams &params, const uint64_t *accepted, uint32_t *ids, float *dists,
				   double *device_ms, std::string *msg)
{
	cagra_gpu_search_params p = cagra_gpu_traverse_params(copy, nq, params, accepted);
	cagra_gpu_search_context *ctx;

	if (!cagra_gpu_context(copy, lane, &ctx, msg))
		return CAGRA_REPLY_ERROR;
	if (!ctx)
		return cagra_gpu_reply(gpu_api->search(copy.gpu, queries, nq, k, &p, accepted, ids, dists), msg);

	CagraReply	r = cagra_gpu_reply(gpu_api->search_in(ctx, copy.gpu, queries, nq, k, &p, accepted, ids, dists), msg);

	if (r == CAGRA_REPLY_OK)
	{
		*device_ms = gpu_api->search_context_device_ms(ctx);
		lane->last_resident = gpu_api->search_context_resident(ctx) != 0;
	}
	return r;
}

/* The GPU library's exact search of `nodes`. */
static CagraReply
cagra_gpu_measure(CagraIndexCopy &copy, CagraSearchLane *lane, const float *queries, uint32_t nq, uint32_t k,
				  const std::vector<uint32_t> &nodes, uint32_t *ids, float *dists, std::string *msg)
{
	cagra_gpu_search_context *ctx;
	uint32_t	count = (uint32_t) nodes.size();

	if (!cagra_gpu_context(copy, lane, &ctx, msg))
		return CAGRA_REPLY_ERROR;
	if (ctx)
		return cagra_gpu_reply(gpu_api->search_nodes_in(ctx, copy.gpu, queries, nq, k, nodes.data(), count, ids,
														dists), msg);
	return cagra_gpu_reply(gpu_api->search_nodes(copy.gpu, queries, nq, k, nodes.data(), count, ids, dists), msg);
}

/*
 * Insert plans with the distances measured on the device: each new node's
 * row pruned from its candidates and the neighbours whose reverse edge
 * needs distances found on the copy's host rows, then every distance those
 * need (d(b, new), and d(b, w), d(new, w) for each edge b -> w) measured in
 * one call, then the plans made from them (core plan_insert_measured).
 */
static CagraReply
cagra_gpu_plan_inserts(CagraIndexCopy &copy, CagraSearchLane *lane, const float *queries, uint32_t nq, uint32_t k,
					   const uint32_t *ids, const float *dists, uint32_t *plans, std::string *msg)
{
	const uint32_t degree = copy.degree, new_id = copy.key.n;
	cagra::InMemoryGraph rows(copy.graph, nullptr, copy.format);
	std::vector<std::vector<uint32_t>> row(nq), to_measure(nq);
	std::vector<uint32_t> from, to;
	cagra_gpu_search_context *ctx;

	if (!cagra_gpu_context(copy, lane, &ctx, msg) || !ctx)
	{
		if (msg->empty())
			*msg = "no search context to measure an insert's distances";
		return CAGRA_REPLY_ERROR;
	}
	cagra_engine_each_insert(nq, [&](uint32_t q) {
		row[q] = cagra::insert_row(rows, cagra_engine_candidates(ids + (uint64_t) q * k, dists + (uint64_t) q * k, k));
		to_measure[q] = cagra::neighbours_to_measure(rows, new_id, row[q]);
	});

	std::vector<uint64_t> first_pair(nq);

	for (uint32_t q = 0; q < nq; q++)
	{
		first_pair[q] = from.size();
		for (uint32_t b : to_measure[q])
		{
			const uint32_t *b_row = copy.graph.row(b);

			from.push_back(CAGRA_GPU_PAIR_QUERY | q);
			to.push_back(b);
			for (uint32_t s = 0; s < degree; s++)
			{
				from.push_back(b);
				to.push_back(b_row[s]);
				from.push_back(CAGRA_GPU_PAIR_QUERY | q);
				to.push_back(b_row[s]);
			}
		}
	}

	std::vector<float> measured(from.size());
	CagraReply	r = cagra_gpu_reply(gpu_api->measure_pairs_in(ctx, copy.gpu, queries, nq, from.data(), to.data(),
															  from.size(), measured.data()), msg);

	if (r != CAGRA_REPLY_OK)
		return r;

	cagra_engine_each_insert(nq, [&](uint32_t q) {
		const float *d = measured.data() + first_pair[q];
		std::vector<cagra::NeighbourDistances> nd(to_measure[q].size());

		for (cagra::NeighbourDistances &one : nd)
		{
			one.from_b.reserve(degree);
			one.from_new.reserve(degree);
			one.to_new = *d++;
			for (uint32_t s = 0; s < degree; s++)
			{
				one.from_b.push_back(*d++);
				one.from_new.push_back(*d++);
			}
		}
		cagra_engine_put_plan(cagra::plan_insert_measured(rows, new_id, std::move(row[q]), nd), degree,
							  plans + (uint64_t) q * cagra_insert_plan_words(degree));
	});
	return CAGRA_REPLY_OK;
}

static int
cagra_gpu_pick_device(void)
{
	int			best = 0;
	uint64_t	best_free = 0;

	for (int d = 0; d < cagra_engine_device_count(); d++)
	{
		cagra_gpu_device_info info;

		if (gpu_api->get_device_info(d, &info) == CAGRA_GPU_OK && info.free_memory > best_free)
		{
			best = d;
			best_free = info.free_memory;
		}
	}
	return best;
}

/* "the sm_90 cubin", or "PTX compute_80, compiled by the driver for sm_90". */
static std::string
cagra_gpu_image_text(const cagra_gpu_device_info *info)
{
	std::string cubin = "sm_" + std::to_string(info->binary_version);

	if (info->binary_version > info->ptx_version)
		return "PTX compute_" + std::to_string(info->ptx_version) + ", compiled by the driver for " + cubin;
	return "the " + cubin + " cubin";
}

class CagraGpuEngine final : public CagraEngine
{
  public:
	void
	devices(std::vector<std::string> *names, std::vector<uint64_t> *totals) override
	{
		int			count = 0;

		if (gpu_api->device_count(&count) != CAGRA_GPU_OK)
			count = 0;
		for (int d = 0; d < count && d < CAGRA_MAX_DEVICES; d++)
		{
			cagra_gpu_device_info info;

			if (gpu_api->get_device_info(d, &info) != CAGRA_GPU_OK)
			{
				/*
				 * Devices are numbered as CUDA numbers them: none past this
				 * one.  Without device 0 the worker stops and reports the
				 * reason.
				 */
				if (d > 0)
					ereport(LOG,
							(errmsg("cagra gpu worker: device %d and those after it left out: %s",
									d, gpu_api->last_error())));
				break;
			}
			ereport(LOG,
					(errmsg("cagra gpu worker: device %d: %s, compute capability %d.%d, %.1f GiB, runs %s",
							d, info.name, info.compute_major, info.compute_minor,
							info.total_memory / 1073741824.0, cagra_gpu_image_text(&info).c_str())));
			names->push_back(info.name);
			totals->push_back(info.total_memory);
		}
	}

	bool
	is_gpu() const override
	{
		return true;
	}

	bool
	copy_bytes(uint64_t n, const cagra::VectorFormat &format, uint32_t degree, uint64_t *bytes,
			   std::string *msg) override
	{
		cagra_gpu_status st = gpu_api->index_memory(n, format.dim, degree, cagra_gpu_dtype_of(format.element), bytes);

		if (st != CAGRA_GPU_OK)
		{
			*msg = gpu_api->last_error();
			return false;
		}
		return true;
	}

	CagraReply
	load(CagraStagedIndex &staged, int device, CagraIndexCopy &copy, std::string *msg) override
	{
		cagra_gpu_status st = gpu_api->index_load(device, staged.vectors.data(),
												  cagra_gpu_dtype_of(staged.format.element), staged.key.n,
												  staged.format.dim, staged.rows.data(), staged.degree,
												  cagra_gpu_metric_of(staged.format.metric),
												  copy.entries.data(), (uint32_t) copy.entries.size(),
												  &copy.gpu);

		std::vector<char>().swap(staged.vectors);
		/* the rows stay on the host too: inserts are planned from them */
		copy.graph.degree = staged.degree;
		copy.graph.edges.swap(staged.rows);
		if (st != CAGRA_GPU_OK)
			return cagra_gpu_reply(st, msg);
		copy.bytes = gpu_api->index_device_bytes(copy.gpu);
		return CAGRA_REPLY_OK;
	}

	/* The worker serves an update with no search of the copy running
	 * (cagra_worker_serve_queue drains them first), as the library asks. */
	CagraReply
	update(CagraIndexCopy &copy, uint32_t n, CagraUpdatePayload *p, bool entries_changed,
		   std::string *msg) override
	{
		cagra_gpu_status st = gpu_api->index_update(copy.gpu, n, cagra_update_node_ids(p),
													cagra_update_node_vectors(p), cagra_update_node_rows(p),
													p->nodes, cagra_update_row_ids(p), cagra_update_rows(p),
													p->rows, copy.entries.data(),
													(uint32_t) copy.entries.size());

		if (st != CAGRA_GPU_OK)
			return cagra_gpu_reply(st, msg);
		cagra_engine_update_rows(copy, n, p);
		copy.bytes = gpu_api->index_device_bytes(copy.gpu);
		return CAGRA_REPLY_OK;
	}

	CagraReply
	plan_inserts(CagraIndexCopy &copy, CagraSearchLane *lane, const float *queries, uint32_t nq, uint32_t k,
				 const uint32_t *ids, const float *dists, uint32_t *plans, std::string *msg) override
	{
		return cagra_gpu_plan_inserts(copy, lane, queries, nq, k, ids, dists, plans, msg);
	}

	void
	free_copy(CagraIndexCopy &copy) noexcept override
	{
		if (copy.gpu)
			gpu_api->index_free(copy.gpu);
		copy.gpu = nullptr;
	}

	void
	free_lane(CagraSearchLane &lane) noexcept override
	{
		for (cagra_gpu_search_context *c : lane.gpu_contexts)
			if (c)
				gpu_api->search_context_free(c);
		lane.gpu_contexts.clear();
	}

	cagra::SearchParams
	filter_plan_params(const cagra::SearchParams &requested) const override
	{
		return cagra::gpu_search_params(requested);
	}

	/*
	 * The device measures every allowed node at memory bandwidth (all pairs
	 * at once), while a widened traversal is a chain of dependent steps in
	 * one thread block per query: up to a gigabyte of vectors read a batch
	 * (a fraction of a millisecond), measuring is the cheaper of the two.
	 */
	bool
	measures_allowed(uint32_t nq, size_t count, const CagraIndexCopy &copy) const override
	{
		return (uint64_t) nq * count * copy.format.vector_bytes() <= CAGRA_GPU_MEASURE_BYTES;
	}

	cagra::SearchParams
	filtered_traversal(const cagra::SearchParams &requested, const cagra::SearchParams &planned) const override
	{
		/* an automatic width stays automatic: small batches widen */
		cagra::SearchParams traverse = planned;

		traverse.search_width = requested.search_width == cagra::kAutoSearchWidth
			? cagra::kAutoSearchWidth : planned.search_width;
		return traverse;
	}

	CagraReply
	traverse(CagraIndexCopy &copy, CagraSearchLane *lane, const float *queries, uint32_t nq, uint32_t k,
			 const cagra::SearchParams &params, const uint64_t *accepted, uint32_t *ids, float *dists,
			 double *device_ms, std::string *msg) override
	{
		if (!accepted)
			accepted = copy.all_live ? nullptr : copy.live.data();
		return cagra_gpu_traverse(copy, lane, queries, nq, k, params, accepted, ids, dists, device_ms, msg);
	}

	CagraReply
	measure(CagraIndexCopy &copy, CagraSearchLane *lane, const float *queries, uint32_t nq, uint32_t k,
			const std::vector<uint32_t> &nodes, uint32_t *ids, float *dists, std::string *msg) override
	{
		return cagra_gpu_measure(copy, lane, queries, nq, k, nodes, ids, dists, msg);
	}

	bool
	can_start_resident() const override
	{
		return true;
	}

	bool
	start_resident(CagraIndexCopy &copy, const float *query, const CagraSearchRequest &req,
				   uint64_t tag) override
	{
		if (!copy.all_live)
			return false;		/* the kernel takes no filter */

		cagra_gpu_search_params p = cagra_gpu_traverse_params(copy, 1, req.params, nullptr);
		int			started = 0;

		return gpu_api->resident_start(copy.gpu, query, req.k, &p, tag, &started) == CAGRA_GPU_OK && started;
	}

	void
	collect_resident(std::vector<CagraResidentAnswer> &answers) override;

	CagraReply	build(const float *vectors, uint64_t n, const cagra::VectorFormat &format,
					  const cagra::BuildParams &params, CagraBuildControl *control, std::vector<uint32_t> *rows,
					  std::vector<uint32_t> *entries, int *device, bool *long_edges, std::string *msg) override;
};

void
CagraGpuEngine::collect_resident(std::vector<CagraResidentAnswer> &answers)
{
	static thread_local std::vector<cagra_gpu_resident_done> done(CAGRA_RESIDENT_COLLECT_MAX);
	static thread_local std::vector<uint32_t> ids((size_t) CAGRA_RESIDENT_COLLECT_MAX * CAGRA_GPU_MAX_K);
	static thread_local std::vector<float> dists((size_t) CAGRA_RESIDENT_COLLECT_MAX * CAGRA_GPU_MAX_K);

	answers.clear();
	for (int d = 0; d < cagra_engine_device_count(); d++)
	{
		uint32_t	count = 0;
		cagra_gpu_status st = gpu_api->resident_collect(d, CAGRA_RESIDENT_COLLECT_MAX, done.data(), ids.data(),
														dists.data(), &count);
		std::string msg;
		CagraReply	failed = st == CAGRA_GPU_OK ? CAGRA_REPLY_OK : cagra_gpu_reply(st, &msg);

		for (uint32_t i = 0; i < count; i++)
		{
			CagraResidentAnswer a;

			a.tag = done[i].tag;
			a.reply = done[i].k > 0 ? CAGRA_REPLY_OK : (failed != CAGRA_REPLY_OK ? failed : CAGRA_REPLY_ERROR);
			a.message = a.reply == CAGRA_REPLY_OK ? std::string() : msg;
			a.ids = ids.data() + (size_t) i * CAGRA_GPU_MAX_K;
			a.dists = dists.data() + (size_t) i * CAGRA_GPU_MAX_K;
			a.device_ms = done[i].device_ms;
			answers.push_back(std::move(a));
		}
	}
}

CagraReply
CagraGpuEngine::build(const float *vectors, uint64_t n, const cagra::VectorFormat &format,
					  const cagra::BuildParams &params, CagraBuildControl *control, std::vector<uint32_t> *rows,
					  std::vector<uint32_t> *entries, int *device, bool *long_edges, std::string *msg)
{
	cagra::VectorFormat graph_format = format;
	std::vector<float> augmented;

	/* the core's inner-product graph: L2 over augmented vectors */
	if (cagra::graph_is_augmented(format.metric))
	{
		augmented = cagra::augmented_copy(cagra::DatasetView{vectors, n, format.dim},
										  std::max(1u, std::thread::hardware_concurrency()));
		vectors = augmented.data();
		graph_format.dim = format.dim + 1;
		graph_format.metric = cagra::Metric::L2;
	}

	cagra::DatasetView data;

	data.data = vectors;
	data.n = n;
	data.dim = graph_format.dim;
	cagra_gpu_build_params p = cagra_gpu_build_params_of(params);
	cagra_gpu_build_result result;

	p.cancel = &control->gpu_cancel;
	*device = cagra_gpu_pick_device();
	rows->resize(n * params.graph_degree);
	entries->resize(CAGRA_MAX_ENTRY_NODES);
	cagra_gpu_status st = gpu_api->build(*device, vectors, n, graph_format.dim,
										 cagra_gpu_metric_of(graph_format.metric), &p, rows->data(),
										 entries->data(), CAGRA_MAX_ENTRY_NODES, &result);

	if (st != CAGRA_GPU_OK)
	{
		entries->clear();
		return cagra_gpu_reply(st, msg);
	}
	entries->resize(result.entry_count);
	*long_edges = result.long_edges != 0;

	/*
	 * The device's connect step is bounded: what it left unreached
	 * the core's step links here, so that the graph is final when
	 * it leaves the worker.
	 */
	if (result.unreached > 0 && !entries->empty())
	{
		cagra::Graph graph;

		graph.degree = params.graph_degree;
		graph.edges.swap(*rows);
		cagra::connect_graph(graph, data, graph_format.metric, *entries, &control->progress);
		rows->swap(graph.edges);
	}
	return CAGRA_REPLY_OK;
}

CagraEngine *
cagra_gpu_engine_make(const CagraGpuApi *api)
{
	gpu_api = api;
	return new CagraGpuEngine();
}
