/*
 * engine.cpp — the two execution engines of the worker.  GPU: the C API of
 * libcagra_gpu.so (device copies, batched cagra_gpu_search, cagra_gpu_build;
 * copies are placed on the device with the most free memory).  CPU: the
 * core library on the worker's own threads (pure core work, no PostgreSQL
 * call), used for tests and for hosts that want batching without a GPU.
 */
#include "worker/engine.h"

#include <algorithm>
#include <numeric>
#include <exception>
#include <new>
#include <thread>

#include "boundary/boundary.h"
#include "core/inner_product_graph.h"
#include "core/search.h"

/* What the protocol and the core say must hold for the GPU library too. */
static_assert(CAGRA_GPU_INVALID_NODE == cagra::kInvalidNode, "one invalid node id");
static_assert(CAGRA_WORKER_MAX_K <= CAGRA_GPU_MAX_K && CAGRA_WORKER_MAX_K <= CAGRA_GPU_MAX_ITOPK,
			  "a worker search must fit the GPU kernel");
static_assert((int) CAGRA_GPU_L2 == (int) cagra::Metric::L2 &&
			  (int) CAGRA_GPU_INNER_PRODUCT == (int) cagra::Metric::InnerProduct &&
			  (int) CAGRA_GPU_COSINE == (int) cagra::Metric::Cosine &&
			  (int) CAGRA_GPU_L1 == (int) cagra::Metric::L1 && cagra::kMetricCount == 4,
			  "the GPU library's metrics are the core's, all four");

/* A GPU filtered search measures its allowed nodes up to this many vector
 * bytes a batch (cagra_engine_search_filtered). */
#define CAGRA_GPU_MEASURE_BYTES (UINT64_C(1) << 30)

static const CagraGpuApi *gpu_api = nullptr;
static std::vector<std::string> device_names;
static std::vector<uint64_t> device_totals;

CagraIndexCopy::~CagraIndexCopy()
{
	if (gpu && gpu_api)
		gpu_api->index_free(gpu);
}

static cagra::InMemoryGraph
cagra_cpu_graph(const CagraIndexCopy &copy)
{
	return cagra::InMemoryGraph(copy.graph, copy.vectors.data(), copy.format);
}

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

/* The GPU library's parameters: an automatic width as the GPU resolves it
 * (cagra::gpu_search_params: 1). */
static cagra_gpu_search_params
cagra_gpu_search_params_of(const cagra::SearchParams &params)
{
	const cagra::SearchParams p = cagra::gpu_search_params(params);
	cagra_gpu_search_params g;

	g.itopk_size = p.itopk_size;
	g.search_width = p.search_width;
	g.max_iterations = p.max_iterations;
	g.random_entries = p.random_entries;
	g.seed = p.seed;
	g.ctas_per_query = 0;		/* the library chooses from the batch size */
	g.resident = 0;
	return g;
}

CagraSearchLane::~CagraSearchLane()
{
	for (cagra_gpu_search_context *c : contexts_)
		if (c && gpu_api)
			gpu_api->search_context_free(c);
}

static void
cagra_lane_query_done(void *arg, uint32_t query)
{
	const CagraSearchLane *lane = (const CagraSearchLane *) arg;

	if (lane->query_done)
		lane->query_done(query);
}

cagra_gpu_search_context *
CagraSearchLane::context(int device, std::string *msg)
{
	if ((int) contexts_.size() <= device)
		contexts_.resize(device + 1, nullptr);
	if (!contexts_[device])
	{
		if (gpu_api->search_context_create(device, &contexts_[device]) != CAGRA_GPU_OK)
		{
			*msg = gpu_api->last_error();
			return nullptr;
		}
		gpu_api->search_context_on_query_done(contexts_[device], cagra_lane_query_done, this);
	}
	return contexts_[device];
}

void
cagra_engine_init(const CagraGpuApi *api)
{
	gpu_api = api;
	device_names.clear();
	device_totals.clear();
	if (!api)
	{
		unsigned	threads = std::max(1u, std::thread::hardware_concurrency());

		device_names.push_back("cpu (core library, " + std::to_string(threads) + " threads)");
		device_totals.push_back(0);
		return;
	}
	int			count = 0;

	if (api->device_count(&count) != CAGRA_GPU_OK)
		count = 0;
	for (int d = 0; d < count && d < CAGRA_MAX_DEVICES; d++)
	{
		cagra_gpu_device_info info;

		if (api->get_device_info(d, &info) != CAGRA_GPU_OK)
			break;
		device_names.push_back(info.name);
		device_totals.push_back(info.total_memory);
	}
}

bool
cagra_engine_is_gpu(void)
{
	return gpu_api != nullptr;
}

int
cagra_engine_device_count(void)
{
	return (int) device_names.size();
}

void
cagra_engine_device(int d, std::string *name, uint64_t *total)
{
	*name = device_names[d];
	*total = device_totals[d];
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

static CagraReply
cagra_exception_reply(std::string *msg) noexcept
{
	try
	{
		throw;
	}
	catch (const std::bad_alloc &)
	{
		*msg = "out of memory in the cagra worker";
		return CAGRA_REPLY_OUT_OF_MEMORY;
	}
	catch (const std::exception &e)
	{
		*msg = e.what();
	}
	catch (...)
	{
		*msg = "unknown error in the cagra worker";
	}
	return CAGRA_REPLY_ERROR;
}

/* fn() with whatever it throws turned into a reply (and msg). */
template <class Fn>
static CagraReply
cagra_engine_guard(std::string *msg, Fn &&fn) noexcept
{
	try
	{
		return fn();
	}
	catch (...)
	{
		return cagra_exception_reply(msg);
	}
}

bool
cagra_engine_copy_bytes(uint64_t n, const cagra::VectorFormat &format, uint32_t degree, uint64_t *bytes,
						std::string *msg) noexcept
{
	if (!gpu_api)
	{
		*bytes = n * ((uint64_t) format.vector_bytes() + (uint64_t) degree * sizeof(uint32_t) + 1);
		return true;
	}
	cagra_gpu_status st = gpu_api->index_memory(n, format.dim, degree, cagra_gpu_dtype_of(format.element), bytes);

	if (st != CAGRA_GPU_OK)
	{
		*msg = gpu_api->last_error();
		return false;
	}
	return true;
}

/*
 * The copy's block index of tid_order (packed TIDs hold the block number
 * above 16 bits): where each heap block's rows start, when there are not
 * far more blocks than nodes (else none, and lookups gallop).
 */
static void
cagra_engine_index_blocks(CagraIndexCopy &copy)
{
	copy.block_first.clear();
	if (copy.tid_order.empty())
		return;

	uint64_t	blocks = (copy.tid_order.back() >> 16) + 1;

	if (blocks > 4 * (uint64_t) copy.tid_order.size() + 1024)
		return;
	copy.block_first.resize(blocks + 1);
	size_t		j = 0;

	for (uint64_t b = 0; b <= blocks; b++)
	{
		while (j < copy.tid_order.size() && (copy.tid_order[j] >> 16) < b)
			j++;
		copy.block_first[b] = (uint32_t) j;
	}
}

CagraReply
cagra_engine_load(CagraStagedIndex &staged, int device, CagraIndexCopy &copy,
				  std::string *msg) noexcept
{
	return cagra_engine_guard(msg, [&]() -> CagraReply {
		copy.key = staged.key;
		copy.format = staged.format;
		copy.degree = staged.degree;
		copy.device = device;
		copy.entries = staged.entries;
		copy.live.swap(staged.live);
		copy.tids.swap(staged.tids);
		copy.by_tid.resize(copy.tids.size());
		std::iota(copy.by_tid.begin(), copy.by_tid.end(), 0u);
		std::sort(copy.by_tid.begin(), copy.by_tid.end(),
				  [&copy](uint32_t a, uint32_t b) { return copy.tids[a] < copy.tids[b]; });
		copy.tid_order.resize(copy.by_tid.size());
		for (size_t i = 0; i < copy.by_tid.size(); i++)
			copy.tid_order[i] = copy.tids[copy.by_tid[i]];
		cagra_engine_index_blocks(copy);
		copy.all_live = true;
		for (uint64_t i = 0; i < copy.key.n && copy.all_live; i++)
			copy.all_live = (copy.live[i >> 6] >> (i & 63)) & 1;
		if (!gpu_api)
		{
			copy.vectors.assign(staged.vectors.begin(),
								staged.vectors.begin() + (size_t) copy.key.n * copy.format.vector_bytes());
			std::vector<char>().swap(staged.vectors);
			copy.graph.degree = staged.degree;
			copy.graph.edges.swap(staged.rows);
			copy.bytes = copy.vectors.size() + copy.graph.edges.size() * sizeof(uint32_t) +
				copy.live.size() * sizeof(uint64_t) + copy.tids.size() * sizeof(uint64_t) +
				copy.by_tid.size() * sizeof(uint32_t) + copy.tid_order.size() * sizeof(uint64_t) +
				copy.block_first.size() * sizeof(uint32_t);
			copy.entry_index = cagra::derive_entry_index(cagra_cpu_graph(copy), copy.entries);
			return CAGRA_REPLY_OK;
		}
		cagra_gpu_status st = gpu_api->index_load(device, staged.vectors.data(),
												  cagra_gpu_dtype_of(staged.format.element), staged.key.n,
												  staged.format.dim, staged.rows.data(), staged.degree,
												  cagra_gpu_metric_of(staged.format.metric),
												  copy.entries.data(), (uint32_t) copy.entries.size(),
												  &copy.gpu);

		std::vector<char>().swap(staged.vectors);
		std::vector<uint32_t>().swap(staged.rows);
		if (st != CAGRA_GPU_OK)
			return cagra_gpu_reply(st, msg);
		copy.bytes = gpu_api->index_device_bytes(copy.gpu);
		return CAGRA_REPLY_OK;
	});
}

/* ---- searches ---- */

void
cagra_engine_allowed_nodes(const CagraIndexCopy &copy, const uint64_t *tids, uint32_t count,
						   std::vector<uint32_t> &nodes)
{
	const uint64_t *order = copy.tid_order.data();
	size_t		n = copy.tid_order.size();
	size_t		at = 0;
	auto		take = [&copy, &nodes](uint32_t node) {
		if (cagra_node_bit(copy.live.data(), node))
			nodes.push_back(node);
	};

	nodes.clear();
	if (!copy.block_first.empty())
	{
		/*
		 * A row's heap block gives the entries to look at; in a table that
		 * was only inserted into, line pointer o of a block is its o-th
		 * entry, so that one is tried first.
		 */
		const uint64_t blocks = copy.block_first.size() - 1;

		for (uint32_t i = 0; i < count && (tids[i] >> 16) < blocks; i++)
		{
			const uint64_t b = tids[i] >> 16,
						offset = tids[i] & 0xFFFF;
			const size_t first = copy.block_first[b],
						end = copy.block_first[b + 1];

			if (first == end)
				continue;

			size_t		j = Min(first + (offset > 0 ? offset - 1 : 0), end - 1);

			if (order[j] != tids[i])
				j = (size_t) (std::lower_bound(order + first, order + end, tids[i]) - order);
			for (; j < end && order[j] == tids[i]; j++)
				take(copy.by_tid[j]);
		}
		return;
	}
	for (uint32_t i = 0; i < count && at < n; i++)
	{
		/*
		 * Both ascending: each search gallops on from where the last one
		 * ended (steps of 1, 2, 4, ... then a binary search of the last
		 * step), so a row costs the logarithm of the gap to the next one in
		 * memory it just read, not of the whole copy.  A TID can name
		 * several nodes (a deleted one and its slot's new row).
		 */
		size_t		step = 1,
					lo = at,
					hi = at;

		while (hi < n && order[hi] < tids[i])
		{
			lo = hi + 1;
			hi = Min(n, hi + step);
			step *= 2;
		}
		at = (size_t) (std::lower_bound(order + lo, order + hi, tids[i]) - order);
		for (; at < n && order[at] == tids[i]; at++)
			take(copy.by_tid[at]);
	}
}

/* Queries begin..end-1 traversing the copy; only nodes set in `accepted`
 * are returned. */
static void
cagra_cpu_search_range(const CagraIndexCopy &copy, const float *queries, uint32_t begin, uint32_t end,
					   uint32_t k, const cagra::SearchParams &params, const uint64_t *accepted, uint32_t *ids,
					   float *dists)
{
	cagra::InMemoryGraph g = cagra_cpu_graph(copy);
	auto		accept = [accepted](uint32_t id) { return cagra_node_bit(accepted, id); };
	std::vector<cagra::Neighbor> out(k);

	for (uint32_t q = begin; q < end; q++)
	{
		cagra::Searcher<cagra::InMemoryGraph> s(g, queries + (uint64_t) q * copy.format.dim, params,
												copy.entry_index);
		uint32_t	got = s.next(k, accept, out.data());

		for (uint32_t i = 0; i < k; i++)
		{
			ids[(uint64_t) q * k + i] = i < got ? out[i].id : cagra::kInvalidNode;
			dists[(uint64_t) q * k + i] = i < got ? out[i].distance : INFINITY;
		}
	}
}

/* Queries begin..end-1 against each of `nodes`: their k nearest. */
static void
cagra_cpu_measure_range(const CagraIndexCopy &copy, const float *queries, uint32_t begin, uint32_t end,
						uint32_t k, const std::vector<uint32_t> &nodes, uint32_t *ids, float *dists)
{
	cagra::InMemoryGraph g = cagra_cpu_graph(copy);
	std::vector<float> d(nodes.size());
	std::vector<uint32_t> order(nodes.size());
	uint32_t	take = (uint32_t) std::min<size_t>(k, nodes.size());

	for (uint32_t q = begin; q < end; q++)
	{
		g.distances(queries + (uint64_t) q * copy.format.dim, nodes.data(), (uint32_t) nodes.size(), d.data());
		for (uint32_t i = 0; i < order.size(); i++)
			order[i] = i;
		/* equal distances in id order, whatever the order of `nodes` */
		std::partial_sort(order.begin(), order.begin() + take, order.end(), [&d, &nodes](uint32_t a, uint32_t b) {
			return d[a] < d[b] || (d[a] == d[b] && nodes[a] < nodes[b]);
		});
		for (uint32_t i = 0; i < k; i++)
		{
			ids[(uint64_t) q * k + i] = i < take ? nodes[order[i]] : cagra::kInvalidNode;
			dists[(uint64_t) q * k + i] = i < take ? d[order[i]] : INFINITY;
		}
	}
}

/* Run fn(t) on `threads` threads (signals blocked: boundary.h); the
 * calling thread runs fn(0). */
template <class Fn>
static void
cagra_run_threads(uint32_t threads, Fn fn)
{
	std::vector<std::thread> pool;
	std::exception_ptr error;

	try
	{
		for (uint32_t t = 1; t < threads; t++)
			pool.push_back(cagra_start_thread([&fn, &error, t] {
				try
				{
					fn(t);
				}
				catch (...)
				{
					error = std::current_exception();
				}
			}));
	}
	catch (...)
	{
		error = std::current_exception();
	}
	try
	{
		fn(0);
	}
	catch (...)
	{
		error = std::current_exception();
	}
	for (auto &th : pool)
		th.join();
	if (error)
		std::rethrow_exception(error);
}

/* fn(begin, end) over the nq queries, split among the host's cores. */
template <class Fn>
static void
cagra_cpu_split_queries(uint32_t nq, Fn fn)
{
	uint32_t	hw = std::max(1u, std::thread::hardware_concurrency());
	uint32_t	threads = std::min<uint32_t>(hw, (nq + 7) / 8);

	cagra_run_threads(threads, [&](uint32_t t) {
		uint64_t	begin = (uint64_t) nq * t / threads;
		uint64_t	end = (uint64_t) nq * (t + 1) / threads;

		fn((uint32_t) begin, (uint32_t) end);
	});
}

/* The lane's search context on the copy's device; NULL: the copy's own
 * (cagra_gpu_search), or an error in msg when it cannot be made. */
static bool
cagra_gpu_context(const CagraIndexCopy &copy, CagraSearchLane *lane, cagra_gpu_search_context **ctx,
				  std::string *msg)
{
	*ctx = lane ? lane->context(copy.device, msg) : nullptr;
	return !lane || *ctx;
}

/* The GPU library's settings of a traversal of nq queries (accepted: NULL,
 * or the nodes it may return); `params` may leave search_width automatic. */
static cagra_gpu_search_params
cagra_gpu_traverse_params(const CagraIndexCopy &copy, uint32_t nq, const cagra::SearchParams &params,
						  const uint64_t *accepted)
{
	cagra_gpu_search_params p = cagra_gpu_search_params_of(params);

	/* A batch this small leaves most of the device idle one thread block
	 * per query, so each query expands more parents a step: fewer, wider
	 * steps at the same or better recall.  c1m on an H200, itopk 32: a lone
	 * query 0.287 -> 0.171 ms, batches of 16 51,361 -> 80,092 queries/s
	 * (bench/gpu_bench.cu).  The library searches most such batches with
	 * several blocks per query, each expanding at most an eighth of its
	 * buffer and 512 KB of vectors a step (4 of these 8 at itopk 32); the
	 * 8 is used as given for the rest (itopk_size above 128).  Only where
	 * the width is automatic (cagra.search_width 0, the default: 1 for
	 * larger batches); an explicit width is used as set. */
	constexpr uint32_t kSmallBatch = 64, kSmallBatchWidth = 8;

	if (params.search_width == cagra::kAutoSearchWidth && nq <= kSmallBatch && copy.degree > 0)
		p.search_width = std::max(1u, std::min({kSmallBatchWidth, p.itopk_size,
												CAGRA_GPU_MAX_STEP_CANDIDATES / copy.degree}));
	/* Such batches, unfiltered, go to the device's resident kernel
	 * (cagra.resident_search): no launch, copy or interrupt per batch. */
	p.resident = cagra_resident_search && nq <= kSmallBatch && !accepted;
	return p;
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
 * A filtered search of the allowed nodes the copy holds live, as the core
 * plans it for their pass rate (plan_filtered_search): when few pass, each
 * is measured; else a traversal with itopk_size (up to the kernel's 512)
 * and max_iterations widened by the inverse of the pass rate, the nodes as
 * the traversal's bitset.
 */
static CagraReply
cagra_engine_search_filtered(CagraIndexCopy &copy, CagraSearchLane *lane, const float *queries, uint32_t nq,
							 const CagraSearchRequest &req, const std::vector<uint32_t> &nodes, uint32_t *ids,
							 float *dists, double *device_ms, std::string *msg)
{
	/* planned at the width the search will run (automatic: the GPU's 1,
	 * the CPU's from the entry index) */
	const cagra::SearchParams resolved = gpu_api ? cagra::gpu_search_params(req.params)
		: cagra::cpu_search_params(req.params, true);	/* cagra_cpu_search_range: from copy.entry_index */
	cagra::FilteredSearchPlan plan = cagra::plan_filtered_search(resolved, copy.degree, nodes.size(), copy.key.n,
																 CAGRA_WORKER_MAX_K);

	/*
	 * The device measures every allowed node at memory bandwidth (all pairs
	 * at once), while a widened traversal is a chain of dependent steps in
	 * one thread block per query: up to a gigabyte of vectors read a batch
	 * (about 0.3 ms on an H200), measuring is the cheaper of the two.
	 */
	if (gpu_api && (uint64_t) nq * nodes.size() * copy.format.vector_bytes() <= CAGRA_GPU_MEASURE_BYTES)
		plan.exact = true;
	if (!plan.exact)
	{
		std::vector<uint64_t> accepted(cagra_node_bitset_words(copy.key.n), 0);

		for (uint32_t node : nodes)
			accepted[node >> 6] |= UINT64_C(1) << (node & 63);
		if (gpu_api)
		{
			/* an automatic width stays automatic: small batches widen */
			cagra::SearchParams traverse = plan.params;

			traverse.search_width = req.params.search_width == cagra::kAutoSearchWidth
				? cagra::kAutoSearchWidth : plan.params.search_width;
			return cagra_gpu_traverse(copy, lane, queries, nq, req.k, traverse, accepted.data(), ids, dists,
									  device_ms, msg);
		}
		cagra_cpu_split_queries(nq, [&](uint32_t begin, uint32_t end) {
			cagra_cpu_search_range(copy, queries, begin, end, req.k, plan.params, accepted.data(), ids, dists);
		});
		return CAGRA_REPLY_OK;
	}
	if (gpu_api)
		return cagra_gpu_measure(copy, lane, queries, nq, req.k, nodes, ids, dists, msg);
	cagra_cpu_split_queries(nq, [&](uint32_t begin, uint32_t end) {
		cagra_cpu_measure_range(copy, queries, begin, end, req.k, nodes, ids, dists);
	});
	return CAGRA_REPLY_OK;
}

CagraReply
cagra_engine_search(CagraIndexCopy &copy, CagraSearchLane *lane, const float *queries, uint32_t nq,
					const CagraSearchRequest &req, const std::vector<uint32_t> *allowed, uint32_t *ids,
					float *dists, double *device_ms, std::string *msg) noexcept
{
	*device_ms = -1.0;
	return cagra_engine_guard(msg, [&]() -> CagraReply {
		if (allowed)
			return cagra_engine_search_filtered(copy, lane, queries, nq, req, *allowed, ids, dists, device_ms, msg);
		if (gpu_api)
			return cagra_gpu_traverse(copy, lane, queries, nq, req.k, req.params,
									  copy.all_live ? nullptr : copy.live.data(), ids, dists, device_ms, msg);
		cagra_cpu_split_queries(nq, [&](uint32_t begin, uint32_t end) {
			cagra_cpu_search_range(copy, queries, begin, end, req.k, req.params, copy.live.data(), ids, dists);
		});
		return CAGRA_REPLY_OK;
	});
}

bool
cagra_engine_can_start_resident(void)
{
	return gpu_api && cagra_resident_search;
}

bool
cagra_engine_start_resident(CagraIndexCopy &copy, const float *query, const CagraSearchRequest &req,
							uint64_t tag) noexcept
{
	if (!cagra_engine_can_start_resident() || !copy.all_live)
		return false;				/* the kernel takes no filter */

	cagra_gpu_search_params p = cagra_gpu_traverse_params(copy, 1, req.params, nullptr);
	int			started = 0;

	return gpu_api->resident_start(copy.gpu, query, req.k, &p, tag, &started) == CAGRA_GPU_OK && started;
}

void
cagra_engine_collect_resident(std::vector<CagraResidentAnswer> &answers) noexcept
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

/* ---- builds ---- */

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

CagraReply
cagra_engine_build(const float *vectors, uint64_t n, const cagra::VectorFormat &format,
				   const cagra::BuildParams &params, CagraBuildControl *control,
				   std::vector<uint32_t> *rows, std::vector<uint32_t> *entries, int *device,
				   bool *long_edges, std::string *msg) noexcept
{
	return cagra_engine_guard(msg, [&]() -> CagraReply {
		if (gpu_api)
		{
			cagra_gpu_build_params p = cagra_gpu_build_params_of(params);
			uint32_t	count = 0;
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
			p.cancel = &control->gpu_cancel;
			*device = cagra_gpu_pick_device();
			rows->resize(n * params.graph_degree);
			entries->resize(CAGRA_MAX_ENTRY_NODES);
			cagra_gpu_status st = gpu_api->build(*device, vectors, n, graph_format.dim,
												 cagra_gpu_metric_of(graph_format.metric), &p, rows->data(),
												 entries->data(), CAGRA_MAX_ENTRY_NODES, &count);

			entries->resize(st == CAGRA_GPU_OK ? count : 0);
			*long_edges = false;	/* the GPU library does not report it (yet) */
			return cagra_gpu_reply(st, msg);
		}
		cagra::DatasetView data;
		cagra::BuildParams p = params;

		data.data = vectors;
		data.n = n;
		data.dim = format.dim;
		p.threads = std::max(1u, std::thread::hardware_concurrency());
		*device = 0;

		cagra::BuiltGraph built;

		{
			CagraSignalsBlocked blocked;	/* the core's threads inherit it */

			built = cagra::build_graph(data, format.metric, p, &control->progress);
		}
		rows->swap(built.graph.edges);
		*long_edges = built.long_edges;
		entries->assign(built.entry_nodes.begin(),
						built.entry_nodes.begin() + std::min<size_t>(built.entry_nodes.size(), CAGRA_MAX_ENTRY_NODES));
		return CAGRA_REPLY_OK;
	});
}
