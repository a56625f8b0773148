/*
 * engine_core.cpp — the worker's CPU engine: the core library on the
 * worker's own threads (pure core work, no PostgreSQL call), behind the
 * worker's engine interface (engine.h); for tests and for hosts that want
 * batching without a GPU (cagra.worker_backend = cpu).
 */
#include "worker/engine_core.h"

#include <algorithm>
#include <cmath>
#include <exception>
#include <thread>

#include "boundary/boundary.h"
#include "core/search.h"

static cagra::InMemoryGraph
cagra_cpu_graph(const CagraIndexCopy &copy)
{
	return cagra::InMemoryGraph(copy.graph, copy.vectors.data(), copy.format);
}

/* Host memory the copy holds. */
static uint64_t
cagra_cpu_copy_bytes(const CagraIndexCopy &copy)
{
	return copy.vectors.size() + copy.graph.edges.size() * sizeof(uint32_t) + copy.live.size() * sizeof(uint64_t) +
		copy.tids.size() * sizeof(uint64_t) + copy.by_tid.size() * sizeof(uint32_t) +
		copy.tid_order.size() * sizeof(uint64_t) + copy.block_first.size() * sizeof(uint32_t);
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

/* fn(begin, end) over the nq queries, split among the host's cores. */
template <class Fn>
static void
cagra_cpu_split_queries(uint32_t nq, Fn fn)
{
	uint32_t	hw = std::max(1u, std::thread::hardware_concurrency());
	uint32_t	threads = std::min<uint32_t>(hw, (nq + 7) / 8);

	cagra_engine_run_threads(threads, [&](uint32_t t) {
		uint64_t	begin = (uint64_t) nq * t / threads;
		uint64_t	end = (uint64_t) nq * (t + 1) / threads;

		fn((uint32_t) begin, (uint32_t) end);
	});
}

class CagraCoreEngine final : public CagraEngine
{
  public:
	void
	devices(std::vector<std::string> *names, std::vector<uint64_t> *totals) override
	{
		unsigned	threads = std::max(1u, std::thread::hardware_concurrency());

		names->push_back("cpu (core library, " + std::to_string(threads) + " threads)");
		totals->push_back(0);
	}

	bool
	is_gpu() const override
	{
		return false;
	}

	bool
	copy_bytes(uint64_t n, const cagra::VectorFormat &format, uint32_t degree, uint64_t *bytes,
			   std::string *msg) override
	{
		*bytes = n * ((uint64_t) format.vector_bytes() + (uint64_t) degree * sizeof(uint32_t) + 1);
		return true;
	}

	CagraReply
	load(CagraStagedIndex &staged, int device, CagraIndexCopy &copy, std::string *msg) override
	{
		copy.vectors.assign(staged.vectors.begin(),
							staged.vectors.begin() + (size_t) copy.key.n * copy.format.vector_bytes());
		std::vector<char>().swap(staged.vectors);
		copy.graph.degree = staged.degree;
		copy.graph.edges.swap(staged.rows);
		copy.bytes = cagra_cpu_copy_bytes(copy);
		copy.entry_index = cagra::derive_entry_index(cagra_cpu_graph(copy), copy.entries);
		return CAGRA_REPLY_OK;
	}

	CagraReply
	update(CagraIndexCopy &copy, uint32_t n, CagraUpdatePayload *p, bool entries_changed,
		   std::string *msg) override
	{
		const size_t vbytes = copy.format.vector_bytes();
		const uint32_t *ids = cagra_update_node_ids(p);
		const char *vecs = cagra_update_node_vectors(p);

		copy.vectors.resize((size_t) n * vbytes);
		for (uint32_t i = 0; i < p->nodes; i++)
			memcpy(copy.vectors.data() + (size_t) ids[i] * vbytes, vecs + (size_t) i * vbytes, vbytes);
		cagra_engine_update_rows(copy, n, p);
		if (entries_changed)
			copy.entry_index = cagra::derive_entry_index(cagra_cpu_graph(copy), copy.entries);
		copy.bytes = cagra_cpu_copy_bytes(copy);
		return CAGRA_REPLY_OK;
	}

	void
	free_copy(CagraIndexCopy &copy) noexcept override
	{
	}

	CagraReply
	plan_inserts(CagraIndexCopy &copy, CagraSearchLane *lane, const float *queries, uint32_t nq, uint32_t k,
				 const uint32_t *ids, const float *dists, uint32_t *plans, std::string *msg) override
	{
		cagra::InMemoryGraph g = cagra_cpu_graph(copy);
		const uint32_t words = cagra_insert_plan_words(copy.degree);

		cagra_engine_each_insert(nq, [&](uint32_t q) {
			cagra_engine_put_plan(cagra::plan_insert_from(g, queries + (uint64_t) q * copy.format.dim, copy.key.n,
														  cagra_engine_candidates(ids + (uint64_t) q * k,
																				  dists + (uint64_t) q * k, k)),
								  copy.degree, plans + (uint64_t) q * words);
		});
		return CAGRA_REPLY_OK;
	}

	void
	free_lane(CagraSearchLane &lane) noexcept override
	{
	}

	cagra::SearchParams
	filter_plan_params(const cagra::SearchParams &requested) const override
	{
		/* cagra_cpu_search_range: from copy.entry_index */
		return cagra::cpu_search_params(requested, true);
	}

	bool
	measures_allowed(uint32_t nq, size_t count, const CagraIndexCopy &copy) const override
	{
		return false;			/* as the filtered search plans it */
	}

	cagra::SearchParams
	filtered_traversal(const cagra::SearchParams &requested, const cagra::SearchParams &planned) const override
	{
		return planned;
	}

	CagraReply
	traverse(CagraIndexCopy &copy, CagraSearchLane *lane, const float *queries, uint32_t nq, uint32_t k,
			 const cagra::SearchParams &params, const uint64_t *accepted, uint32_t *ids, float *dists,
			 double *device_ms, std::string *msg) override
	{
		if (!accepted)
			accepted = copy.live.data();
		cagra_cpu_split_queries(nq, [&](uint32_t begin, uint32_t end) {
			cagra_cpu_search_range(copy, queries, begin, end, k, params, accepted, ids, dists);
		});
		return CAGRA_REPLY_OK;
	}

	CagraReply
	measure(CagraIndexCopy &copy, CagraSearchLane *lane, const float *queries, uint32_t nq, uint32_t k,
			const std::vector<uint32_t> &nodes, uint32_t *ids, float *dists, std::string *msg) override
	{
		cagra_cpu_split_queries(nq, [&](uint32_t begin, uint32_t end) {
			cagra_cpu_measure_range(copy, queries, begin, end, k, nodes, ids, dists);
		});
		return CAGRA_REPLY_OK;
	}

	bool
	can_start_resident() const override
	{
		return false;
	}

	bool
	start_resident(CagraIndexCopy &copy, const float *query, const CagraSearchRequest &req,
				   uint64_t tag) override
	{
		return false;
	}

	void
	collect_resident(std::vector<CagraResidentAnswer> &answers) override
	{
		answers.clear();
	}

	CagraReply
	build(const float *vectors, uint64_t n, const cagra::VectorFormat &format, const cagra::BuildParams &params,
		  CagraBuildControl *control, std::vector<uint32_t> *rows, std::vector<uint32_t> *entries, int *device,
		  bool *long_edges, std::string *msg) override
	{
		cagra::DatasetView data;

		data.data = vectors;
		data.n = n;
		data.dim = format.dim;

		cagra::BuildParams p = params;

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
	}
};

CagraEngine *
cagra_core_engine_make(void)
{
	return new CagraCoreEngine();
}
