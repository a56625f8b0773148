/*
 * engine.cpp — what the worker's two engines share (engine.h): the engine
 * chosen at start, an index copy's TID lookup made at load, the filtered
 * search's plan, and each call's failures turned into a reply.  What
 * differs is behind CagraEngine: engine_gpu.cpp (the GPU library) and
 * engine_core.cpp (the core on the CPU).
 */
#include "worker/engine.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>
#include <new>
#include <numeric>
#include <stdexcept>

#include "boundary/boundary.h"
#include "core/search.h"

/* Lives as long as the process: copies and lanes freed at exit still call it. */
static CagraEngine *engine = nullptr;
static std::vector<std::string> device_names;
static std::vector<uint64_t> device_totals;

CagraIndexCopy::~CagraIndexCopy()
{
	if (engine)
		engine->free_copy(*this);
}

CagraSearchLane::~CagraSearchLane()
{
	if (engine)
		engine->free_lane(*this);
}

void
cagra_engine_init(CagraEngine *chosen)
{
	engine = chosen;
	device_names.clear();
	device_totals.clear();
	engine->devices(&device_names, &device_totals);
}

bool
cagra_engine_is_gpu(void)
{
	return engine->is_gpu();
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
	return cagra_engine_guard(msg, [&]() -> CagraReply {
		return engine->copy_bytes(n, format, degree, bytes, msg) ? CAGRA_REPLY_OK : CAGRA_REPLY_ERROR;
	}) == CAGRA_REPLY_OK;
}

/*
 * The copy's block index of tid_order (packed TIDs hold the block number
 * above 16 bits): where each heap block's rows start, when there are not
 * far more blocks than nodes (else none, and lookups gallop).  Entries of
 * blocks below `from` are as the index already holds them (entries were
 * only added past them): it is made again from there on.
 */
static void
cagra_engine_index_blocks(CagraIndexCopy &copy, uint64_t from = 0)
{
	uint64_t	blocks = copy.tid_order.empty() ? 0 : (copy.tid_order.back() >> 16) + 1;

	if (blocks == 0 || blocks > 4 * (uint64_t) copy.tid_order.size() + 1024)
	{
		copy.block_first.clear();
		return;
	}
	if (from >= copy.block_first.size())
		from = 0;
	copy.block_first.resize(blocks + 1);
	size_t		j = copy.block_first[from];

	for (uint64_t b = from; b <= blocks; b++)
	{
		while (j < copy.tid_order.size() && (copy.tid_order[j] >> 16) < b)
			j++;
		copy.block_first[b] = (uint32_t) j;
	}
}

/* Whether every node of the copy is live (searches need no filter). */
static void
cagra_engine_check_live(CagraIndexCopy &copy)
{
	uint64_t	full = copy.key.n / 64;

	copy.all_live = true;
	for (uint64_t w = 0; w < full && copy.all_live; w++)
		copy.all_live = copy.live[w] == ~UINT64_C(0);
	for (uint64_t i = full * 64; i < copy.key.n && copy.all_live; i++)
		copy.all_live = (copy.live[i >> 6] >> (i & 63)) & 1;
}

/* The nodes in the order of their TIDs, a filter's rows are found in. */
static void
cagra_engine_index_nodes(CagraIndexCopy &copy)
{
	copy.by_tid.resize(copy.tids.size());
	std::iota(copy.by_tid.begin(), copy.by_tid.end(), 0u);
	std::sort(copy.by_tid.begin(), copy.by_tid.end(),
			  [&copy](uint32_t a, uint32_t b) { return copy.tids[a] < copy.tids[b]; });
	copy.tid_order.resize(copy.by_tid.size());
	for (size_t i = 0; i < copy.by_tid.size(); i++)
		copy.tid_order[i] = copy.tids[copy.by_tid[i]];
	cagra_engine_index_blocks(copy);
	cagra_engine_check_live(copy);
}

/*
 * The same after nodes `ids` took new TIDs (copy.tids holds them; old_n:
 * the copy's nodes before, whose old TIDs are in old_tids, one per id):
 * the old entries of those nodes removed and the new ones inserted, by
 * runs copied between them (nothing moves when the rows were appended to
 * the heap's end).  Sorting every node again at each update held the
 * worker's searches up for milliseconds, tens of them on a million nodes.
 */
static void
cagra_engine_reindex_nodes(CagraIndexCopy &copy, const uint32_t *ids, const uint64_t *old_tids, uint32_t count,
						   uint32_t old_n)
{
	const std::vector<uint64_t> &order = copy.tid_order;
	const size_t old_size = order.size();
	std::vector<size_t> removed;
	std::vector<std::pair<uint64_t, uint32_t>> added;	/* (TID, node) */

	for (uint32_t i = 0; i < count; i++)
	{
		const uint32_t node = ids[i];

		if (node < old_n && old_tids[i] == copy.tids[node])
			continue;			/* sent again, linked since: its entry stands */
		added.push_back({copy.tids[node], node});
		if (node >= old_n)
			continue;
		/* its old entry: among those of its old TID (a TID can name several
		 * nodes) */
		size_t		at = (size_t) (std::lower_bound(order.begin(), order.end(), old_tids[i]) - order.begin());

		while (at < old_size && order[at] == old_tids[i] && copy.by_tid[at] != node)
			at++;
		if (at < old_size && order[at] == old_tids[i])
			removed.push_back(at);
	}
	std::sort(removed.begin(), removed.end());
	removed.erase(std::unique(removed.begin(), removed.end()), removed.end());
	std::sort(added.begin(), added.end());
	added.erase(std::unique(added.begin(), added.end()), added.end());

	std::vector<size_t> insert_at(added.size());

	for (size_t a = 0; a < added.size(); a++)
		insert_at[a] = (size_t) (std::upper_bound(order.begin(), order.end(), added[a].first) - order.begin());
	if (removed.empty() && (added.empty() || insert_at[0] == old_size))
	{
		/* rows appended to the heap's end: their entries go last */
		uint64_t	last_block = old_size > 0 ? order.back() >> 16 : 0;

		for (const auto &[tid, node] : added)
		{
			copy.tid_order.push_back(tid);
			copy.by_tid.push_back(node);
		}
		cagra_engine_index_blocks(copy, last_block);
		cagra_engine_check_live(copy);
		return;
	}

	std::vector<uint32_t> by_tid(old_size - removed.size() + added.size());
	std::vector<uint64_t> tid_order(by_tid.size());
	size_t		src = 0,
				dst = 0,
				r = 0,
				a = 0;

	for (;;)
	{
		size_t		next = std::min(r < removed.size() ? removed[r] : old_size,
									a < added.size() ? insert_at[a] : old_size);

		std::copy(copy.by_tid.begin() + src, copy.by_tid.begin() + next, by_tid.begin() + dst);
		std::copy(order.begin() + src, order.begin() + next, tid_order.begin() + dst);
		dst += next - src;
		src = next;
		if (a < added.size() && insert_at[a] == src)
		{
			tid_order[dst] = added[a].first;
			by_tid[dst++] = added[a++].second;
		}
		else if (r < removed.size() && removed[r] == src)
		{
			src++;
			r++;
		}
		else
			break;
	}
	copy.by_tid.swap(by_tid);
	copy.tid_order.swap(tid_order);
	cagra_engine_index_blocks(copy);
	cagra_engine_check_live(copy);
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
		cagra_engine_index_nodes(copy);
		return engine->load(staged, device, copy, msg);
	});
}

CagraReply
cagra_engine_update(CagraIndexCopy &copy, const CagraIndexKey &key, CagraUpdatePayload *p,
					std::string *msg) noexcept
{
	return cagra_engine_guard(msg, [&]() -> CagraReply {
		const uint32_t *ids = cagra_update_node_ids(p);
		const uint8 *live = cagra_update_node_live(p);
		const uint64 *tids = cagra_update_node_tids(p);
		std::vector<uint32_t> entries(p->entries, p->entries + Min(p->entry_count, (uint32) CAGRA_MAX_ENTRY_NODES));
		bool		entries_changed = entries != copy.entries;

		/* a bad id would send a search outside the copy: check them all */
		const uint32_t appended = key.n - copy.key.n;
		const uint32_t *rows[2] = {cagra_update_node_rows(p), cagra_update_rows(p)};
		const uint64_t edges[2] = {(uint64_t) p->nodes * copy.degree, (uint64_t) p->rows * copy.degree};

		if (key.n < copy.key.n || p->nodes < appended)
			throw std::runtime_error("an update lacks appended nodes");
		for (uint32_t i = 0; i < p->nodes; i++)
			if (ids[i] >= key.n || (i < appended && ids[i] != copy.key.n + i))
				throw std::runtime_error("an update's nodes are not the appended ones first, in order");
		for (uint32_t i = 0; i < p->rows; i++)
			if (cagra_update_row_ids(p)[i] >= key.n)
				throw std::runtime_error("an update names a row beyond the index's nodes");
		for (int a = 0; a < 2; a++)
			for (uint64_t i = 0; i < edges[a]; i++)
				if (rows[a][i] >= key.n && rows[a][i] != cagra::kInvalidNode)
					throw std::runtime_error("an update's edge points beyond the index's nodes");
		for (uint32_t e : entries)
			if (e >= key.n)
				throw std::runtime_error("an update names an entry node beyond the index's nodes");
		const uint32_t old_n = copy.key.n;
		std::vector<uint64_t> old_tids(p->nodes);

		copy.entries.swap(entries);
		copy.key = key;
		memcpy(copy.linked_after, p->linked_after, sizeof(copy.linked_after));
		copy.live.resize(cagra_node_bitset_words(key.n), 0);
		copy.tids.resize(key.n, 0);
		for (uint32_t i = 0; i < p->nodes; i++)
		{
			uint64_t	bit = UINT64_C(1) << (ids[i] & 63);

			copy.live[ids[i] >> 6] = live[i] ? copy.live[ids[i] >> 6] | bit : copy.live[ids[i] >> 6] & ~bit;
			old_tids[i] = copy.tids[ids[i]];
			copy.tids[ids[i]] = tids[i];
		}
		cagra_engine_reindex_nodes(copy, ids, old_tids.data(), p->nodes, old_n);
		return engine->update(copy, key.n, p, entries_changed, msg);
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
	const cagra::SearchParams resolved = engine->filter_plan_params(req.params);
	cagra::FilteredSearchPlan plan = cagra::plan_filtered_search(resolved, copy.degree, nodes.size(), copy.key.n,
																 CAGRA_WORKER_MAX_K);

	if (engine->measures_allowed(nq, nodes.size(), copy))
		plan.exact = true;
	if (!plan.exact)
	{
		std::vector<uint64_t> accepted(cagra_node_bitset_words(copy.key.n), 0);

		for (uint32_t node : nodes)
			accepted[node >> 6] |= UINT64_C(1) << (node & 63);
		return engine->traverse(copy, lane, queries, nq, req.k, engine->filtered_traversal(req.params, plan.params),
								accepted.data(), ids, dists, device_ms, msg);
	}
	return engine->measure(copy, lane, queries, nq, req.k, nodes, ids, dists, msg);
}


std::vector<cagra::Neighbor>
cagra_engine_candidates(const uint32_t *ids, const float *dists, uint32_t k)
{
	std::vector<cagra::Neighbor> cands;

	for (uint32_t i = 0; i < k && ids[i] != cagra::kInvalidNode; i++)
		cands.push_back({ids[i], dists[i]});
	return cands;
}

/*
 * The helper threads of cagra_engine_run_threads, started when first wanted
 * and kept for the worker's life: a thread started per call costs its start,
 * its stack and, at its exit, a TLB shootdown on every core, which a batch
 * of insert plans paid twice a request.  Callers post one task per t >= 1
 * and run their own queued tasks while they wait, so a call completes even
 * when every helper is busy with other callers' tasks (or none started).
 * Never destroyed: the process exits with its helpers waiting.
 */
namespace
{

struct RunState
{
	const std::function<void(uint32_t)> *fn;
	uint32_t	left;			/* tasks posted and not yet finished */
	std::exception_ptr error;
	std::condition_variable done;
};

struct Task
{
	RunState   *state;
	uint32_t	t;
};

class HelperPool
{
  public:
	void run(uint32_t threads, const std::function<void(uint32_t)> &fn)
	{
		RunState	state;

		state.fn = &fn;
		state.left = threads - 1;
		{
			std::lock_guard<std::mutex> hold(lock_);

			for (uint32_t t = 1; t < threads; t++)
				tasks_.push_back({&state, t});
			start_helpers(threads - 1);
		}
		ready_.notify_all();
		execute({&state, 0}, false);

		std::unique_lock<std::mutex> hold(lock_);

		while (state.left > 0)
		{
			auto		own = std::find_if(tasks_.begin(), tasks_.end(),
										   [&](const Task &task) { return task.state == &state; });

			if (own == tasks_.end())
			{
				state.done.wait(hold);
				continue;
			}

			Task		task = *own;

			tasks_.erase(own);
			hold.unlock();
			execute(task, true);
			hold.lock();
		}
		if (state.error)
			std::rethrow_exception(state.error);
	}

  private:
	/* fn(t) of the task; a posted task's end counted (under the lock) */
	void execute(Task task, bool posted)
	{
		std::exception_ptr error;

		try
		{
			(*task.state->fn)(task.t);
		}
		catch (...)
		{
			error = std::current_exception();
		}

		std::lock_guard<std::mutex> hold(lock_);

		if (error && !task.state->error)
			task.state->error = error;
		if (posted && --task.state->left == 0)
			task.state->done.notify_all();
	}

	/* under lock_: at least `want` helpers, as many as start */
	void start_helpers(uint32_t want)
	{
		try
		{
			while (helpers_ < want)
			{
				cagra_start_thread([this] { helper_main(); }).detach();
				helpers_++;
			}
		}
		catch (...)
		{
			/* fewer helpers: the callers run the rest of their tasks */
		}
	}

	void helper_main()
	{
		std::unique_lock<std::mutex> hold(lock_);

		for (;;)
		{
			if (tasks_.empty())
			{
				ready_.wait(hold);
				continue;
			}

			Task		task = tasks_.front();

			tasks_.pop_front();
			hold.unlock();
			execute(task, true);
			hold.lock();
		}
	}

	std::mutex	lock_;
	std::condition_variable ready_;
	std::deque<Task> tasks_;
	uint32_t	helpers_ = 0;
};

} // namespace

void
cagra_engine_run_threads(uint32_t threads, const std::function<void(uint32_t)> &fn)
{
	static HelperPool *pool = new HelperPool();

	if (threads <= 1)
		fn(0);
	else
		pool->run(threads, fn);
}

void
cagra_engine_each_insert(uint32_t nq, const std::function<void(uint32_t)> &fn)
{
	std::atomic<uint32_t> next{0};

	cagra_engine_run_threads(std::min<uint32_t>(nq, CAGRA_INSERT_PLAN_THREADS), [&](uint32_t) {
		for (uint32_t q; (q = next.fetch_add(1)) < nq;)
			fn(q);
	});
}

void
cagra_engine_put_plan(const cagra::InsertPlan &plan, uint32_t degree, uint32_t *words)
{
	const uint32_t count = (uint32_t) Min(plan.updates.size(), (size_t) degree);
	CagraInsertPlanParts p = cagra_insert_plan_parts(words, degree);

	if (plan.row.size() != degree)
		throw std::runtime_error("an insert plan's row is not of the graph's degree");
	*p.count = count;
	std::copy(plan.row.begin(), plan.row.end(), p.row);
	std::fill(p.nodes, words + cagra_insert_plan_words(degree), cagra::kInvalidNode);
	for (uint32_t u = 0; u < count; u++)
	{
		p.nodes[u] = plan.updates[u].node;
		p.slots[u] = plan.updates[u].slot;
		p.previous[u] = plan.updates[u].previous;
	}
}

void
cagra_engine_update_rows(CagraIndexCopy &copy, uint32_t n, CagraUpdatePayload *p)
{
	const uint32_t degree = copy.degree;
	const uint32_t *ids = cagra_update_node_ids(p);
	const uint32_t *node_rows = cagra_update_node_rows(p);
	const uint32_t *row_ids = cagra_update_row_ids(p);
	const uint32_t *rows = cagra_update_rows(p);

	copy.graph.edges.resize((size_t) n * degree, cagra::kInvalidNode);
	for (uint32_t i = 0; i < p->nodes; i++)
		memcpy(copy.graph.edges.data() + (size_t) ids[i] * degree, node_rows + (size_t) i * degree,
			   degree * sizeof(uint32_t));
	for (uint32_t i = 0; i < p->rows; i++)
		memcpy(copy.graph.edges.data() + (size_t) row_ids[i] * degree, rows + (size_t) i * degree,
			   degree * sizeof(uint32_t));
}

CagraReply
cagra_engine_plan_inserts(CagraIndexCopy &copy, CagraSearchLane *lane, const float *queries, uint32_t nq,
						  uint32_t k, const uint32_t *ids, const float *dists, uint32_t *plans,
						  std::string *msg) noexcept
{
	return cagra_engine_guard(msg, [&]() -> CagraReply {
		return engine->plan_inserts(copy, lane, queries, nq, k, ids, dists, plans, msg);
	});
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
		return engine->traverse(copy, lane, queries, nq, req.k, req.params, nullptr, ids, dists, device_ms, msg);
	});
}

bool
cagra_engine_can_start_resident(void)
{
	return engine->can_start_resident();
}

bool
cagra_engine_start_resident(CagraIndexCopy &copy, const float *query, const CagraSearchRequest &req,
							uint64_t tag) noexcept
{
	std::string msg;

	return cagra_engine_can_start_resident() &&
		cagra_engine_guard(&msg, [&]() -> CagraReply {
			return engine->start_resident(copy, query, req, tag) ? CAGRA_REPLY_OK : CAGRA_REPLY_ERROR;
		}) == CAGRA_REPLY_OK;
}

void
cagra_engine_collect_resident(std::vector<CagraResidentAnswer> &answers) noexcept
{
	std::string msg;

	answers.clear();
	(void) cagra_engine_guard(&msg, [&]() -> CagraReply {
		engine->collect_resident(answers);
		return CAGRA_REPLY_OK;
	});
}

/* ---- builds ---- */

CagraReply
cagra_engine_build(const float *vectors, uint64_t n, const cagra::VectorFormat &format,
				   const cagra::BuildParams &params, CagraBuildControl *control,
				   std::vector<uint32_t> *rows, std::vector<uint32_t> *entries, int *device,
				   bool *long_edges, std::string *msg) noexcept
{
	return cagra_engine_guard(msg, [&]() -> CagraReply {
		return engine->build(vectors, n, format, params, control, rows, entries, device, long_edges, msg);
	});
}
