/*
 * engine.h — what executes the worker's requests: the GPU library through
 * its C API (engine_gpu.h), or the core library on the CPU
 * (cagra.worker_backend = cpu: engine_core.h), behind one interface
 * (CagraEngine), chosen once when the worker starts.  Both serve the same
 * requests through the same IPC path.  Worker process only; no
 * cagra_engine_* function throws or calls ereport.
 */
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/build.h"
#include "core/entry_index.h"
#include "core/format.h"
#include "core/huge_pages.h"
#include "core/update.h"
#include "protocol/protocol.h"
#include "gpu/cagra_gpu.h"

/* A whole index copy as received from a backend, in host memory. */
struct CagraStagedIndex
{
	CagraIndexKey key;
	cagra::VectorFormat format;
	uint32_t	degree = 0;
	std::vector<uint32_t> entries;
	std::vector<char> vectors;		/* n vectors as the index stores them */
	std::vector<uint32_t> rows;		/* n x degree */
	std::vector<uint64_t> live;		/* bitmap, ceil(n / 64) words */
	std::vector<uint64_t> tids;		/* heap TID of each node, packed */
	uint32_t	received = 0;
	pid_t		owner = 0;
	int64_t		last_touch = 0;		/* TimestampTz */
};

/* A copy ready for searches (device memory, or host memory for the CPU). */
struct CagraIndexCopy
{
	CagraIndexKey key;
	cagra::VectorFormat format;
	uint32_t	degree = 0;
	int			device = 0;
	uint64_t	bytes = 0;
	uint64_t	searches = 0;
	uint64_t	last_used = 0;		/* LRU clock */
	uint32_t	uploaded_n = 0;		/* nodes of the whole upload it was made from */
	bool		takes_updates = false;	/* cagra_cache_update would take one now */
	uint64_t	linked_after[CAGRA_LINKED_WINDOW / 64] = {};	/* CagraCopyExtent's */
	int64_t		loaded_at = 0;
	std::vector<uint64_t> live;
	bool		all_live = false;	/* searches need no filter */
	std::vector<uint64_t> tids;		/* heap TID of each node, packed (host memory) */
	std::vector<uint32_t> by_tid;	/* the nodes in ascending order of their TIDs */
	std::vector<uint64_t> tid_order;	/* tids[by_tid[i]]: a filter's rows are looked up here */
	std::vector<uint32_t> block_first;	/* heap block b's first index in tid_order; b + 1's ends it */
	std::vector<uint32_t> entries;
	/* GPU */
	cagra_gpu_index *gpu = nullptr;
	/* CPU */
	cagra::HugePageVector<char> vectors;	/* n vectors as the index stores them (float16
											 * stays half: half the bytes a distance
											 * loads); on huge pages: searches read
											 * them at random */
	cagra::Graph graph;
	cagra::EntryIndex entry_index;

	~CagraIndexCopy();
};

/* What one search thread owns: a GPU search context per device, made by
 * the GPU engine on first use, so that threads search the same copies at
 * the same time. */
class CagraSearchLane
{
  public:
	CagraSearchLane() = default;
	CagraSearchLane(const CagraSearchLane &) = delete;
	CagraSearchLane &operator=(const CagraSearchLane &) = delete;
	~CagraSearchLane();
	std::vector<cagra_gpu_search_context *> gpu_contexts;	/* by device; NULL: not made yet */
	/* whether the device's resident kernel answered the lane's last search */
	bool		last_resident = false;
	/* Called on the lane's thread as the answer of one query of its GPU
	 * search in progress is final (cagra_gpu_search_context_on_query_done),
	 * so that the caller can hand it out before the batch ends; queries
	 * without a call are final when the search returns.  Must not throw. */
	std::function<void(uint32_t)> query_done;
};

struct CagraResidentAnswer;
struct CagraBuildControl;

/*
 * What differs between the engines.  Their methods may throw; the
 * cagra_engine_* functions below turn that into a reply.  A search's
 * `accepted` is NULL for the copy's live nodes, else the nodes it may
 * return (a bitset of the copy's nodes).
 */
class CagraEngine
{
  public:
	virtual		~CagraEngine() = default;
	/* the name and total memory (bytes) of each device */
	virtual void devices(std::vector<std::string> *names, std::vector<uint64_t> *totals) = 0;
	virtual bool is_gpu() const = 0;
	virtual bool copy_bytes(uint64_t n, const cagra::VectorFormat &format, uint32_t degree, uint64_t *bytes,
							std::string *msg) = 0;
	/* the staged vectors and rows into `copy` (its other fields set) */
	virtual CagraReply load(CagraStagedIndex &staged, int device, CagraIndexCopy &copy, std::string *msg) = 0;
	/* copy.vectors and rows of the engine grown to n nodes (the new ones and
	 * the changed ones in p: cagra_engine_update); entries_changed: take
	 * copy.entries, set already */
	virtual CagraReply update(CagraIndexCopy &copy, uint32_t n, CagraUpdatePayload *p, bool entries_changed,
							  std::string *msg) = 0;
	virtual void free_copy(CagraIndexCopy &copy) noexcept = 0;
	virtual void free_lane(CagraSearchLane &lane) noexcept = 0;
	/* the parameters a filtered search is planned at: an automatic width
	 * resolved as this engine runs it */
	virtual cagra::SearchParams filter_plan_params(const cagra::SearchParams &requested) const = 0;
	/* whether a filtered search measures every allowed node, whatever its plan */
	virtual bool measures_allowed(uint32_t nq, size_t count, const CagraIndexCopy &copy) const = 0;
	/* the traversal of a filtered search planned at `planned` */
	virtual cagra::SearchParams filtered_traversal(const cagra::SearchParams &requested,
												   const cagra::SearchParams &planned) const = 0;
	virtual CagraReply traverse(CagraIndexCopy &copy, CagraSearchLane *lane, const float *queries, uint32_t nq,
								uint32_t k, const cagra::SearchParams &params, const uint64_t *accepted,
								uint32_t *ids, float *dists, double *device_ms, std::string *msg) = 0;
	/* the k nearest of `nodes`, each measured */
	virtual CagraReply measure(CagraIndexCopy &copy, CagraSearchLane *lane, const float *queries, uint32_t nq,
							   uint32_t k, const std::vector<uint32_t> &nodes, uint32_t *ids, float *dists,
							   std::string *msg) = 0;
	/* the insert plans of nq new nodes (queries) from their candidates
	 * (ids, dists: nq x k, nearest first, kInvalidNode padding), each for
	 * a node past the copy's, into plans (cagra_insert_plan_words of the
	 * copy's degree each) */
	virtual CagraReply plan_inserts(CagraIndexCopy &copy, CagraSearchLane *lane, const float *queries, uint32_t nq,
									uint32_t k, const uint32_t *ids, const float *dists, uint32_t *plans,
									std::string *msg) = 0;
	virtual bool can_start_resident() const = 0;
	virtual bool start_resident(CagraIndexCopy &copy, const float *query, const CagraSearchRequest &req,
								uint64_t tag) = 0;
	virtual void collect_resident(std::vector<CagraResidentAnswer> &answers) = 0;
	/* the graph, final: every node reached from (*entries)[0] */
	virtual CagraReply build(const float *vectors, uint64_t n, const cagra::VectorFormat &format,
							 const cagra::BuildParams &params, CagraBuildControl *control,
							 std::vector<uint32_t> *rows, std::vector<uint32_t> *entries, int *device,
							 bool *long_edges, std::string *msg) = 0;
};

/* Starts the worker's engine (engine_gpu.h or engine_core.h), once; it
 * lives as long as the process. */
void		cagra_engine_init(CagraEngine *engine);
bool		cagra_engine_is_gpu(void);
int			cagra_engine_device_count(void);
/* name and total memory (bytes) of device `d` */
void		cagra_engine_device(int d, std::string *name, uint64_t *total);

/* Bytes a copy of this shape holds on a device. */
bool		cagra_engine_copy_bytes(uint64_t n, const cagra::VectorFormat &format, uint32_t degree,
									uint64_t *bytes, std::string *msg) noexcept;

/* Move a staged index onto `device`; the staging buffers are released. */
CagraReply	cagra_engine_load(CagraStagedIndex &staged, int device, CagraIndexCopy &copy,
							  std::string *msg) noexcept;


/* What inserts changed, into a loaded copy that no search uses now: nodes
 * up to key.n, p's nodes and rows written (its base is the copy's extent),
 * copy.key = key.  Anything but OK leaves the copy unusable: free it. */
CagraReply	cagra_engine_update(CagraIndexCopy &copy, const CagraIndexKey &key, CagraUpdatePayload *p,
								std::string *msg) noexcept;

/* nq queries against a copy: nq x k ids (cagra::kInvalidNode padding)
 * and distances, each row sorted; with `allowed` (live nodes of the copy,
 * cagra_engine_allowed_nodes) only those.  Safe on
 * several threads at once for different lanes (lane NULL: the copy's own
 * context, one thread only).  *device_ms: the GPU's own time of the search,
 * negative when not known (the CPU engine, the index's own context). */
CagraReply	cagra_engine_search(CagraIndexCopy &copy, CagraSearchLane *lane, const float *queries, uint32_t nq,
								const CagraSearchRequest &req, const std::vector<uint32_t> *allowed,
								uint32_t *ids, float *dists, double *device_ms, std::string *msg) noexcept;

/* The insert plans of a batch of plans_inserts searches, from their
 * answers (cagra_engine_search's ids and dists, nq x k): the core's plan,
 * made from the copy's rows and its vectors' distances
 * (cagra_insert_plan_words of the copy's degree each, into plans). */
CagraReply	cagra_engine_plan_inserts(CagraIndexCopy &copy, CagraSearchLane *lane, const float *queries, uint32_t nq,
									  uint32_t k, const uint32_t *ids, const float *dists, uint32_t *plans,
									  std::string *msg) noexcept;

/* For the engines: query q's candidates as the core takes them (its row
 * of ids and dists up to the padding), and a plan into its words. */
std::vector<cagra::Neighbor> cagra_engine_candidates(const uint32_t *ids, const float *dists, uint32_t k);
void		cagra_engine_put_plan(const cagra::InsertPlan &plan, uint32_t degree, uint32_t *words);

/* For the engines: fn(t) for each t below `threads`, at once on the
 * calling thread (fn(0)) and the worker's kept helper threads (signals
 * blocked: boundary.h cagra_start_thread); an exception of any is
 * rethrown once all have ended.  A caller runs its own tasks that no
 * helper took, so calls complete with every helper busy (or nested). */
void		cagra_engine_run_threads(uint32_t threads, const std::function<void(uint32_t)> &fn);

/* For the engines: fn(q) for each of a batch's nq inserts, on up to
 * CAGRA_INSERT_PLAN_THREADS threads (each plan reads the copy only). */
#define CAGRA_INSERT_PLAN_THREADS 8
void		cagra_engine_each_insert(uint32_t nq, const std::function<void(uint32_t)> &fn);

/* For the engines: the rows an update writes (appended and changed nodes'),
 * into copy.graph grown to n nodes. */
void		cagra_engine_update_rows(CagraIndexCopy &copy, uint32_t n, CagraUpdatePayload *p);

/*
 * Lone queries started on the device's resident kernel and collected when
 * done (cagra_gpu_resident_start / _collect), so that each index scan's
 * search is answered as soon as it is done, with no batch window and no
 * thread of its own.  GPU engine only.
 */
bool		cagra_engine_can_start_resident(void);

/* Starts one query (prepared, format.dim floats) against the copy with
 * `tag`; false when the kernel cannot take it now (search it in a batch). */
bool		cagra_engine_start_resident(CagraIndexCopy &copy, const float *query, const CagraSearchRequest &req,
										uint64_t tag) noexcept;

/* Most answers one collect takes from a device. */
#define CAGRA_RESIDENT_COLLECT_MAX 128

/* An answer of a started query: its rows (valid until the next collect on
 * this thread) when reply is OK. */
struct CagraResidentAnswer
{
	uint64_t	tag = 0;
	CagraReply	reply = CAGRA_REPLY_OK;
	std::string message;
	const uint32_t *ids = nullptr;
	const float *dists = nullptr;
	double		device_ms = 0.0;
};

/* The started queries of every device that are done, without waiting; a
 * failed kernel answers its queries with an error.  One thread only. */
void		cagra_engine_collect_resident(std::vector<CagraResidentAnswer> &answers) noexcept;

/* The copy's live nodes whose heap TIDs are among `tids` (packed,
 * ascending), into `nodes`: how a filtered request's rows become the nodes
 * it allows. */
void		cagra_engine_allowed_nodes(const CagraIndexCopy &copy, const uint64_t *tids, uint32_t count,
									   std::vector<uint32_t> &nodes);

/* How another thread stops a build: the core polls `progress.cancel`, the
 * GPU library `gpu_cancel`; request() sets both. */
struct CagraBuildControl
{
	cagra::BuildProgress progress;
	volatile int gpu_cancel = 0;

	void request() { progress.cancel = true; gpu_cancel = 1; }
	bool requested() const { return progress.cancel.load(); }
};

/* Build a graph over n prepared float32 vectors of format.dim dimensions
 * (params as the access method assembled them; a CPU build uses every core
 * of the host), final as the backend writes it.  Calls no PostgreSQL function: it runs on the worker's build
 * thread.  A build stopped through `control` answers CAGRA_REPLY_ERROR. */
CagraReply	cagra_engine_build(const float *vectors, uint64_t n, const cagra::VectorFormat &format,
							   const cagra::BuildParams &params, CagraBuildControl *control,
							   std::vector<uint32_t> *rows, std::vector<uint32_t> *entries, int *device,
							   bool *long_edges, std::string *msg) noexcept;
