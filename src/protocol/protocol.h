/*
 * protocol.h — what backends and the GPU worker process agree on: the
 * worker's shared-memory state (request slots, counters, published cache
 * list), the request kinds and the layouts of their payloads in dynamic
 * shared memory, and the settings both sides read.  It knows node ids,
 * vectors (by their VectorFormat), graph rows and heap TIDs, nothing of
 * index pages: src/client (backend side) and src/worker (the worker
 * process) include it, and neither includes the other.
 *
 * Backends fill a request slot, put the bulk data in a DSM segment of at
 * most CAGRA_CHUNK_BYTES, and wait on their latch; the worker takes queued
 * slots, answers in the same segment and sets the backend's latch.
 * docs/worker.md describes the protocol.
 */
#pragma once

extern "C" {
#include "postgres.h"

#include "datatype/timestamp.h"
#include "storage/dsm.h"
#include "storage/latch.h"
#include "storage/lwlock.h"
#include "storage/itemptr.h"
#include "storage/spin.h"
}

#include "core/build.h"
#include "core/format.h"
#include "core/search_plan.h"

/* Largest DSM segment one request uses: bulk transfers go in chunks. */
#define CAGRA_CHUNK_BYTES ((Size) 64 * 1024 * 1024)

/* Each backend keeps one segment for its requests (a query, a batch of
 * cagra_search, build chunks of small tables): this size at first, doubled
 * as larger requests come, up to the maximum (larger ones get a segment of
 * their own).  The worker keeps it mapped, so a search costs no segment
 * creation or mapping on either side. */
#define CAGRA_MAILBOX_BYTES ((Size) 1024 * 1024)
#define CAGRA_MAILBOX_MAX_BYTES ((Size) 16 * 1024 * 1024)

#define CAGRA_MAX_DEVICES 16
/* Entry nodes a request carries (as many as an index keeps). */
#define CAGRA_MAX_ENTRY_NODES cagra::kMaxStoredEntries
/* Largest k and itopk_size a worker search takes (the GPU kernel's limit,
 * checked against gpu/cagra_gpu.h where the worker includes both). */
#define CAGRA_WORKER_MAX_K 512
#define CAGRA_MAX_PUBLISHED_CACHE 64

/* Worker states (shown by cagra_worker_status). */
typedef enum CagraWorkerState
{
	CAGRA_WS_NOT_STARTED = 0,	/* registered, not running yet */
	CAGRA_WS_STARTING,
	CAGRA_WS_RUNNING,
	CAGRA_WS_NO_DEVICE,			/* exited 0: no usable device */
	CAGRA_WS_NO_LIBRARY,		/* exited 0: libcagra_gpu.so missing or unusable */
	CAGRA_WS_EXITED				/* stopped (terminated or crashed); may restart */
} CagraWorkerState;

/* Execution backends of the worker (GUC cagra.worker_backend). */
#define CAGRA_BACKEND_GPU 0
#define CAGRA_BACKEND_CPU 1

/* cagra.device */
#define CAGRA_SEARCH_AUTO 0
#define CAGRA_SEARCH_GPU 1
#define CAGRA_SEARCH_CPU 2

typedef enum CagraRequestKind
{
	CAGRA_REQ_SEARCH = 1,		/* queries against a cached index copy */
	CAGRA_REQ_UPLOAD,			/* one chunk of an index copy */
	CAGRA_REQ_UPDATE,			/* the nodes inserts added to a cached copy */
	CAGRA_REQ_BUILD_DATA,		/* one chunk of the vectors of a build */
	CAGRA_REQ_BUILD_RUN,		/* build the graph of the staged vectors */
	CAGRA_REQ_BUILD_FETCH		/* one chunk of the built graph's rows */
} CagraRequestKind;

/*
 * A slot's state moves by compare-and-swap, without the lock, so that
 * queueing and answering never wait for each other (and the worker's
 * search threads, which cannot take LWLocks, answer their own batches):
 *
 *   FREE -> CLAIMED -> QUEUED            the backend fills the slot, then queues it
 *   QUEUED -> RUNNING -> DONE -> FREE    the worker takes, answers; the backend reads
 *   QUEUED -> FREE                       the backend gives up before the worker took it
 *   RUNNING -> ABANDONED -> FREE         it gives up while the worker runs it
 *
 * Whoever moved a slot into CLAIMED, RUNNING or DONE owns its other fields
 * until the next move.
 */
typedef enum CagraSlotState
{
	CAGRA_SLOT_FREE = 0,
	CAGRA_SLOT_CLAIMED,
	CAGRA_SLOT_QUEUED,
	CAGRA_SLOT_RUNNING,
	CAGRA_SLOT_DONE,
	CAGRA_SLOT_ABANDONED		/* the backend left while the worker ran it */
} CagraSlotState;

/* What the worker answers. */
typedef enum CagraReply
{
	CAGRA_REPLY_OK = 0,
	CAGRA_REPLY_NEED_INDEX,		/* no usable copy: this backend should upload one */
	CAGRA_REPLY_LOADING,		/* another backend is uploading the copy */
	CAGRA_REPLY_TOO_LARGE,		/* the copy does not fit cagra.gpu_memory_limit */
	CAGRA_REPLY_OUT_OF_MEMORY,	/* device (or host) memory exhausted */
	CAGRA_REPLY_ERROR			/* anything else; message says what */
} CagraReply;

/* Identifies one version of one index's contents. */
typedef struct CagraIndexKey
{
	Oid			db;
	Oid			index;
	Oid			relfilenode;	/* changes on REINDEX, TRUNCATE */
	Oid			tablespace;		/* with db, relfilenode and backend: its file */
	int32		backend;		/* a temporary index's backend, else -1 */
	uint64		generation;		/* meta page generation */
	uint32		n;				/* nodes at that generation */
	uint64		reused;			/* inserts into vacuumed slots by then (CagraMetaData) */
	uint32		linked;			/* nodes before it are linked (cagra_first_unlinked);
								 * not part of the copy's identity */
} CagraIndexKey;

/* The meta page logs the slots of the last this many inserts into slots
 * vacuum freed (CagraMetaData.reuse_log): a copy older by at most that many
 * such inserts (and a few appended nodes) still serves, the backend
 * searching those slots itself. */
#define CAGRA_REUSE_LOG 256

/* Nodes past a copy's first unlinked one that it may hold linked: runs are
 * linked side by side (linker.cpp), so later ones are often linked while an
 * earlier one is not yet. */
#define CAGRA_LINKED_WINDOW 1024

/* What a copy searched holds: nodes 0 .. n-1 as they were after `reused`
 * inserts into vacuumed slots, of which those before `linked` were linked,
 * and those after it that linked_after marks (bit i: node linked + i).
 * Nodes it holds unlinked (no edge of the copy may lead to them), appended
 * since, and slots reused since, are the backend's to search
 * (cagra_merge_tail). */
typedef struct CagraCopyExtent
{
	uint32		n;
	uint64		reused;
	uint32		linked;
	bool		takes_updates;	/* it would take the nodes inserted since (UPDATE) */
	uint64		linked_after[CAGRA_LINKED_WINDOW / 64];
} CagraCopyExtent;

/* Whether the copy of `copy` holds node `id` linked. */
static inline bool
cagra_copy_holds_linked(const CagraCopyExtent *copy, uint32 id)
{
	uint32		after = id - copy->linked;

	if (id >= copy->n)
		return false;
	return id < copy->linked ||
		(after < CAGRA_LINKED_WINDOW && (copy->linked_after[after / 64] >> (after % 64)) & 1);
}

/* Mark node `id` held linked in linked_after (a node of the window). */
static inline void
cagra_copy_mark_linked(CagraCopyExtent *copy, uint32 id)
{
	uint32		after = id - copy->linked;

	if (id >= copy->linked && after < CAGRA_LINKED_WINDOW)
		copy->linked_after[after / 64] |= UINT64CONST(1) << (after % 64);
}

/* What both `a` and `b` hold (each search chunk may meet another copy). */
static inline CagraCopyExtent
cagra_copy_extent_meet(const CagraCopyExtent *a, const CagraCopyExtent *b)
{
	CagraCopyExtent m;

	memset(&m, 0, sizeof(m));
	m.n = Min(a->n, b->n);
	m.reused = Min(a->reused, b->reused);
	m.linked = Min(a->linked, b->linked);
	m.takes_updates = a->takes_updates && b->takes_updates;
	if (a->linked == b->linked)
	{
		/* (bits past n say nothing: cagra_copy_holds_linked looks at n first) */
		for (int w = 0; w < CAGRA_LINKED_WINDOW / 64; w++)
			m.linked_after[w] = a->linked_after[w] & b->linked_after[w];
		return m;
	}
	for (uint32 id = m.linked; id < m.n && id - m.linked < CAGRA_LINKED_WINDOW; id++)
		if (cagra_copy_holds_linked(a, id) && cagra_copy_holds_linked(b, id))
			cagra_copy_mark_linked(&m, id);
	return m;
}

/* Most nodes inserted after a copy of n nodes was made that a search of it
 * leaves to the backend (cagra_merge_tail: each query measures them, read
 * from the pages) before the copy must be replaced. */
static inline uint32
cagra_copy_tail_limit(uint32 n)
{
	return Min((uint32) 1024, Max((uint32) 64, n / 64));
}

/* A backend whose search left it at least this many inserted nodes sends
 * them to the copy (CAGRA_REQ_UPDATE), well before the tail limit. */
static inline uint32
cagra_copy_update_at(uint32 n)
{
	return Max((uint32) 16, cagra_copy_tail_limit(n) / 4);
}

/* What a search asks for: its plan, whole (core/search_plan.h; filtered
 * is set by cagra_client_search from the allowed rows it sends).  Searches
 * of one index with equal plans are batched into one launch, unless
 * filtered (worker/batch.cpp). */
typedef cagra::SearchPlan CagraSearchRequest;

static inline bool
cagra_same_search_request(const CagraSearchRequest *a, const CagraSearchRequest *b)
{
	return *a == *b;
}

typedef struct CagraRequestSlot
{
	pg_atomic_uint32 state;		/* CagraSlotState */
	CagraRequestKind kind;
	CagraReply	reply;
	pid_t		backend_pid;
	Latch	   *backend_latch;
	uint64		worker_generation;	/* the worker it was queued for */
	uint64		seq;			/* queue order */
	TimestampTz queued_at;
	TimestampTz answered_at;	/* when the worker marked it done */
	dsm_handle	handle;
	bool		mailbox;		/* handle is the backend's reusable segment */
	CagraIndexKey key;			/* SEARCH, UPLOAD */
	CagraSearchRequest search;	/* SEARCH */
	uint32		nq;				/* SEARCH: queries in the payload */
	CagraCopyExtent copy;		/* SEARCH reply: what the copy searched holds */
	uint64		build_id;		/* BUILD_*: the backend's build */
	char		message[256];
} CagraRequestSlot;

typedef struct CagraPublishedCopy
{
	Oid			db;
	Oid			index;
	uint64		generation;
	uint32		n;
	int			device;
	uint64		bytes;
	uint64		searches;
	TimestampTz loaded_at;
} CagraPublishedCopy;

/* The steps of a search's round trip that the worker and the backends time
 * (cagra_worker_timings(), docs/worker.md): microseconds summed over
 * events, and the number of events, each step counted per the unit named. */
typedef enum CagraTimingStep
{
	CAGRA_TIMING_PICKUP,		/* per batch: its oldest search queued until the loop took it up */
	CAGRA_TIMING_QUEUE,			/* per search request: queued until its batch started */
	CAGRA_TIMING_JOB,			/* per batch: the search thread's whole job */
	CAGRA_TIMING_ENGINE,		/* per batch: the engine's search call within it */
	CAGRA_TIMING_DEVICE,		/* per batch: the GPU's own time (copies and kernel) */
	CAGRA_TIMING_HANDBACK,		/* per batch: job done until the loop answered it */
	CAGRA_TIMING_WAKE,			/* per search request: answered until the backend saw it */
	CAGRA_TIMING_ROUND_TRIP,	/* per search request: queued until the backend saw the answer */
	CAGRA_TIMING_LOOP_BUSY,		/* per loop turn: the main loop's time outside its wait */
	CAGRA_TIMING_RESIDENT,		/* per batch the resident kernel answered: its engine call */
	CAGRA_TIMING_PLAN,			/* per batch of inserts: the engine's plans of them, after its search */
	CAGRA_TIMING_DRAIN,			/* per drain: the loop waiting for running batches (before a request
								 * that is not a search) */
	CAGRA_TIMING_UPDATE,		/* per copy update: the worker applying it */
	CAGRA_TIMING_STEPS
} CagraTimingStep;

/*
 * The linkers (am/linker.cpp): background workers of a database that link
 * the runs of nodes inserts appended unlinked.  An insert that ends a run
 * queues its index with a linker of its database instead of linking it.
 */
#define CAGRA_MAX_LINKERS 8
#define CAGRA_LINKER_QUEUE 16

typedef struct CagraLinkWork
{
	Oid			index;
	int			device;			/* the inserting session's cagra.device */
} CagraLinkWork;

typedef struct CagraLinkerSlot
{
	Oid			database;		/* InvalidOid: free */
	uint32		generation;		/* bumped each time the slot is taken */
	pid_t		pid;			/* 0 while starting */
	TimestampTz asked_at;		/* when its start was asked for */
	Latch	   *latch;			/* NULL while starting */
	bool		busy;			/* linking work it took from its queue */
	int			npending;
	CagraLinkWork pending[CAGRA_LINKER_QUEUE];
} CagraLinkerSlot;

typedef struct CagraWorkerShared
{
	LWLock	   *lock;			/* guards everything below except the atomics and slots */
	CagraWorkerState state;
	int			backend;		/* CAGRA_BACKEND_* the worker runs */
	pid_t		pid;			/* 0 when not running */
	Latch	   *latch;			/* the worker's latch while running */
	uint64		generation;		/* bumped at every worker start */
	TimestampTz started_at;
	pg_atomic_uint64 next_seq;	/* queue order of the slots (backends queue under a shared lock) */
	/* the backend reading an update of a copy (CAGRA_REQ_UPDATE) and since
	 * when: one at a time, as concurrent ones would read the same nodes */
	pg_atomic_uint32 update_claim;	/* its pid; 0: none */
	pg_atomic_uint64 update_claimed_at; /* TimestampTz */
	char		message[256];	/* why the worker is not running, or library version */

	int			device_count;
	char		device_names[CAGRA_MAX_DEVICES][128];
	uint64		device_total[CAGRA_MAX_DEVICES];	/* bytes */
	uint64		memory_used;	/* bytes held by cached copies */
	uint64		memory_limit;	/* bytes */

	int			ncopies;
	CagraPublishedCopy copies[CAGRA_MAX_PUBLISHED_CACHE];

	pg_atomic_uint64 requests;	/* requests served */
	pg_atomic_uint64 queries;	/* search queries served */
	pg_atomic_uint64 batches;	/* search launches */
	pg_atomic_uint64 uploads;	/* index copies loaded */
	pg_atomic_uint64 builds;	/* graphs built */
	pg_atomic_uint64 fallbacks; /* backend requests that went to the CPU instead */
	pg_atomic_uint64 errors;	/* requests answered with an error */
	pg_atomic_uint64 timing_us[CAGRA_TIMING_STEPS];	/* overlapping batches add up */
	pg_atomic_uint64 timing_events[CAGRA_TIMING_STEPS];

	LWLock	   *linker_lock;	/* guards linkers */
	CagraLinkerSlot linkers[CAGRA_MAX_LINKERS];

	int			nslots;
	CagraRequestSlot slots[FLEXIBLE_ARRAY_MEMBER];
} CagraWorkerShared;

/* NULL unless cagra is in shared_preload_libraries. */
extern CagraWorkerShared *cagra_worker_shared;

static inline CagraSlotState
cagra_slot_state(CagraRequestSlot *s)
{
	CagraSlotState st = (CagraSlotState) pg_atomic_read_u32(&s->state);

	pg_read_barrier();			/* the fields after the state that published them */
	return st;
}

/* from -> to; false when the slot was not in `from` (a full barrier). */
static inline bool
cagra_slot_move(CagraRequestSlot *s, CagraSlotState from, CagraSlotState to)
{
	uint32		expected = (uint32) from;

	return pg_atomic_compare_exchange_u32(&s->state, &expected, (uint32) to);
}

static inline void
cagra_add_timing(CagraWorkerShared *sh, CagraTimingStep step, uint64 us, uint64 events)
{
	pg_atomic_fetch_add_u64(&sh->timing_us[step], us);
	pg_atomic_fetch_add_u64(&sh->timing_events[step], events);
}

/* cagra.vacuum_stop_before: where a VACUUM of a cagra index raises an
 * error, for tests of what an interrupted one leaves */
typedef enum CagraVacuumStop
{
	CAGRA_VACUUM_STOP_NOWHERE,
	CAGRA_VACUUM_STOP_REPAIR,	/* after the deletion marks */
	CAGRA_VACUUM_STOP_RECONNECT,	/* after the repair, before the links */
} CagraVacuumStop;

/* Settings (guc.cpp, the one place each is defined). */
extern int	cagra_itopk_size;
extern int	cagra_max_scan_tuples;
extern bool cagra_enable_filtered_scan;
extern int	cagra_device;
extern int	cagra_search_width;
extern int	cagra_max_iterations;
extern int	cagra_entry_probes;
extern bool cagra_skip_unread_distances;
extern int	cagra_vacuum_stop_before;
extern int	cagra_worker_timeout_ms;
extern int	cagra_gpu_memory_limit_mb;
extern int	cagra_worker_backend;
extern char *cagra_gpu_library;

void		cagra_define_settings(void);

/* shmem.cpp */
void		cagra_worker_register(void);
const char *cagra_worker_state_name(CagraWorkerState state);

/* ---- payloads (DSM) ---- */

/* Words of a bitset of n nodes (bit i % 64 of word i / 64: node i). */
static inline Size
cagra_node_bitset_words(uint64 n)
{
	return (Size) ((n + 63) / 64);
}

static inline bool
cagra_node_bit(const uint64 *bits, uint32 id)
{
	return (bits[id >> 6] >> (id & 63)) & 1;
}

/* SEARCH: header; for a filtered search the allowed rows, their heap TIDs
 * as the index holds them (HOT chains' roots, cagra_pack_tid), ascending,
 * which the worker maps to its copy's nodes; nq x dim prepared queries;
 * then the answers: nq x k ids (cagra::kInvalidNode padding), nq x k
 * distances and nq x k heap TIDs of the ids as the copy has them
 * (cagra_pack_tid; 0 for padding). */
typedef struct CagraSearchPayload
{
	uint32		nq;
	uint32		dim;
	uint32		k;
	uint32		filter_tids;	/* 0 unless filtered */
	uint32		plan_degree;	/* 0, or the graph degree of the insert plans answered
								 * (CagraSearchRequest.plans_inserts) */
} CagraSearchPayload;

/*
 * An insert's plan as the worker answers it, in 32-bit words: the count u
 * of reverse edges, the new node's row (degree ids, padded with
 * kInvalidNode), then for each reverse edge the node whose row takes it,
 * its slot there and what the slot held (core EdgeUpdate.previous), in
 * three runs of degree words of which the first u count.  The reverse
 * edges point to the new node, which the backend numbers.
 */
static inline uint32
cagra_insert_plan_words(uint32 degree)
{
	return 1 + 4 * degree;
}

/* The parts of one plan's words (`words`: cagra_insert_plan_words). */
typedef struct CagraInsertPlanParts
{
	uint32	   *count;
	uint32	   *row;
	uint32	   *nodes;
	uint32	   *slots;
	uint32	   *previous;
} CagraInsertPlanParts;

static inline CagraInsertPlanParts
cagra_insert_plan_parts(const uint32 *words, uint32 degree)
{
	CagraInsertPlanParts p;

	p.count = (uint32 *) words;
	p.row = p.count + 1;
	p.nodes = p.row + degree;
	p.slots = p.nodes + degree;
	p.previous = p.slots + degree;
	return p;
}

static inline Size
cagra_search_payload_size(uint32 nq, uint32 dim, uint32 k, Size filter_tids, uint32 plan_degree)
{
	return MAXALIGN(sizeof(CagraSearchPayload)) + filter_tids * sizeof(uint64) +
		(Size) nq * dim * sizeof(float) + (Size) nq * k * (sizeof(uint32) + sizeof(float)) +
		sizeof(uint64) + (Size) nq * k * sizeof(uint64) +
		(plan_degree ? (Size) nq * cagra_insert_plan_words(plan_degree) * sizeof(uint32) : 0);
}

static inline uint64 *
cagra_search_filter(CagraSearchPayload *p)
{
	return (uint64 *) ((char *) p + MAXALIGN(sizeof(CagraSearchPayload)));
}

static inline float *
cagra_search_queries(CagraSearchPayload *p)
{
	return (float *) (cagra_search_filter(p) + p->filter_tids);
}

static inline uint32 *
cagra_search_ids(CagraSearchPayload *p)
{
	return (uint32 *) (cagra_search_queries(p) + (Size) p->nq * p->dim);
}

static inline float *
cagra_search_distances(CagraSearchPayload *p)
{
	return (float *) (cagra_search_ids(p) + (Size) p->nq * p->k);
}

static inline uint64 *
cagra_search_tids(CagraSearchPayload *p)
{
	return (uint64 *) TYPEALIGN(sizeof(uint64), cagra_search_distances(p) + (Size) p->nq * p->k);
}

/* nq insert plans of cagra_insert_plan_words(plan_degree) words */
static inline uint32 *
cagra_search_plans(CagraSearchPayload *p)
{
	return (uint32 *) (cagra_search_tids(p) + (Size) p->nq * p->k);
}

/* A heap TID as one integer (0: none; block 0 offset 0 is never a tuple). */
static inline uint64
cagra_pack_tid(const ItemPointerData *tid)
{
	return ((uint64) ItemPointerGetBlockNumberNoCheck(tid) << 16) | ItemPointerGetOffsetNumberNoCheck(tid);
}

static inline void
cagra_unpack_tid(uint64 packed, ItemPointerData *tid)
{
	ItemPointerSet(tid, (BlockNumber) (packed >> 16), (OffsetNumber) (packed & 0xFFFF));
}

/* UPLOAD: header, count vectors (format.vector_bytes() each), count x
 * degree rows, count live bytes, count heap TIDs (cagra_pack_tid). */
typedef struct CagraUploadPayload
{
	cagra::VectorFormat format;
	uint32		degree;
	uint32		entry_count;
	uint32		entries[CAGRA_MAX_ENTRY_NODES];
	uint32		first;			/* first node of this chunk */
	uint32		count;			/* nodes in this chunk */
} CagraUploadPayload;

static inline Size
cagra_upload_node_bytes(const cagra::VectorFormat &format, uint32 degree)
{
	return (Size) format.vector_bytes() + (Size) degree * sizeof(uint32) + 1 + sizeof(uint64);
}

/* Bytes of an UPLOAD payload of `count` nodes (alignment included). */
static inline Size
cagra_upload_payload_size(uint32 count, const cagra::VectorFormat &format, uint32 degree)
{
	return MAXALIGN(sizeof(CagraUploadPayload)) + (Size) count * cagra_upload_node_bytes(format, degree) +
		2 * sizeof(uint64);
}

static inline char *
cagra_upload_vectors(CagraUploadPayload *p)
{
	return (char *) p + MAXALIGN(sizeof(CagraUploadPayload));
}

static inline uint32 *
cagra_upload_rows(CagraUploadPayload *p)
{
	return (uint32 *) TYPEALIGN(sizeof(uint32), cagra_upload_vectors(p) + (Size) p->count * p->format.vector_bytes());
}

static inline uint8 *
cagra_upload_live(CagraUploadPayload *p)
{
	return (uint8 *) (cagra_upload_rows(p) + (Size) p->count * p->degree);
}

static inline uint64 *
cagra_upload_tids(CagraUploadPayload *p)
{
	return (uint64 *) TYPEALIGN(sizeof(uint64), cagra_upload_live(p) + p->count);
}

/*
 * UPDATE: what inserts changed in the copy of extent `base` (the slot's key
 * is the index as the backend read it, of the same epoch): `nodes` nodes
 * sent whole (appended ones and reused slots: ids, vectors, rows, live
 * bytes, heap TIDs), then `rows` nodes of which only the row is sent (ids,
 * rows: the nodes those rows point at, which took reverse edges to them),
 * and the entry nodes as the meta page has them.  Edges to nodes beyond
 * the key's n are kInvalidNode.
 */
typedef struct CagraUpdatePayload
{
	cagra::VectorFormat format;
	uint32		degree;
	CagraCopyExtent base;
	uint64		linked_after[CAGRA_LINKED_WINDOW / 64];	/* the copy's after it, from
															 * the key's linked */
	uint32		entry_count;
	uint32		entries[CAGRA_MAX_ENTRY_NODES];
	uint32		nodes;
	uint32		rows;
} CagraUpdatePayload;

static inline Size
cagra_update_payload_size(uint32 nodes, uint32 rows, const cagra::VectorFormat &format, uint32 degree)
{
	return MAXALIGN(sizeof(CagraUpdatePayload)) + (Size) nodes * cagra_upload_node_bytes(format, degree) +
		(Size) (nodes + rows) * sizeof(uint32) + (Size) rows * degree * sizeof(uint32) + 2 * sizeof(uint64);
}

static inline uint32 *
cagra_update_node_ids(CagraUpdatePayload *p)
{
	return (uint32 *) ((char *) p + MAXALIGN(sizeof(CagraUpdatePayload)));
}

static inline uint32 *
cagra_update_node_rows(CagraUpdatePayload *p)
{
	return cagra_update_node_ids(p) + p->nodes;
}

static inline uint32 *
cagra_update_row_ids(CagraUpdatePayload *p)
{
	return cagra_update_node_rows(p) + (Size) p->nodes * p->degree;
}

static inline uint32 *
cagra_update_rows(CagraUpdatePayload *p)
{
	return cagra_update_row_ids(p) + p->rows;
}

static inline uint64 *
cagra_update_node_tids(CagraUpdatePayload *p)
{
	return (uint64 *) TYPEALIGN(sizeof(uint64), cagra_update_rows(p) + (Size) p->rows * p->degree);
}

static inline char *
cagra_update_node_vectors(CagraUpdatePayload *p)
{
	return (char *) (cagra_update_node_tids(p) + p->nodes);
}

static inline uint8 *
cagra_update_node_live(CagraUpdatePayload *p)
{
	return (uint8 *) (cagra_update_node_vectors(p) + (Size) p->nodes * p->format.vector_bytes());
}

/* BUILD_DATA / BUILD_RUN / BUILD_FETCH share one header.  A build is known
 * by its owner (the backend that runs CREATE INDEX) and the slot's
 * build_id: the owner's parallel scan workers send DATA for it too.  DATA
 * carries count prepared float32 vectors of format.dim after it, nodes
 * first .. first + count - 1, in any order while the heap scan runs (the
 * worker keeps them in its own memory, within cagra.gpu_memory_limit); RUN
 * carries the number of nodes n, which the chunks must have filled, and
 * receives the entry nodes; FETCH receives count x params.graph_degree rows
 * after it.  `params` are the index's build parameters, assembled once by
 * the access method; the worker sets only the thread count of its own CPU
 * builds. */
typedef struct CagraBuildPayload
{
	int32		owner;			/* pid of the backend that leads the build */
	uint64		n;				/* RUN: vectors in the whole build */
	cagra::VectorFormat format;
	cagra::BuildParams params;
	uint32		first;
	uint32		count;
	uint32		entry_count;	/* RUN reply */
	uint32		entries[CAGRA_MAX_ENTRY_NODES];
	int32		device;			/* RUN reply: the device that built it */
	bool		long_edges;		/* RUN reply: the build added long edges */
} CagraBuildPayload;

static inline void *
cagra_build_body(CagraBuildPayload *p)
{
	return (char *) p + MAXALIGN(sizeof(CagraBuildPayload));
}
