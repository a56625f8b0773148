/*
 * accessor.h — the core's graph Accessor (core/search.h) over index pages:
 * rows and vectors are read through shared buffers, one share-locked page
 * at a time.  Used by scans, cagra_search, inserts (plan_insert) and
 * vacuum (plan_repair, plan_reconnect), the last two through
 * cagra_with_graph_accessor.
 *
 * Methods throw CagraPgError when PostgreSQL reports an error while reading
 * a page, so the caller's boundary can unwind C++ frames and re-throw it.
 */
#pragma once

#include <memory>
#include <vector>

#include "am/cagra_am.h"
#include "core/distance.h"
#include "core/entry_index.h"
#include "core/inner_product_graph.h"
#include "core/search.h"

/* In NodeInfo only, never on disk: distance from the entry-vector cache,
 * the header (TID, flags) is read when node_info() is asked. */
#define CAGRA_NODE_UNCHECKED 0x8000

struct CagraEntryVectors;

class CagraPageAccessor
{
public:
	/* Sees nodes 0..meta.n-1; edges to later nodes (appended after the
	 * meta page was read) read as padding.  With record_nodes, the heap TID
	 * and flags of every node whose distance was computed are kept.  With
	 * keep_pins, pages stay pinned until release_pins() (a scan re-reads the
	 * same pages often: this saves the shared buffer lookups); the caller
	 * must call release_pins() on its normal path (on error the resource
	 * owner releases them). */
	CagraPageAccessor(Relation index, const CagraMetaData &meta, bool record_nodes, bool keep_pins = false);

	uint32_t size() const { return meta_.n; }
	uint32_t degree() const { return meta_.graph_degree; }
	uint32_t dim() const { return meta_.dims; }
	uint32_t first_unlinked() const { return cagra_first_unlinked(&meta_); }
	cagra::Metric metric() const { return format_.metric; }

	const uint32_t *neighbors(uint32_t id, uint32_t *scratch) const;
	void distances(const float *query, const uint32_t *ids, uint32_t count, float *out) const;
	const float *vector(uint32_t id, float *scratch) const;

	struct NodeInfo
	{
		ItemPointerData heap_tid;
		uint16		flags;
	};

	/* Recorded TID and flags of `id` (record_nodes only); false if unseen.
	 * May read the node's header page (nodes measured from cached vectors). */
	bool node_info(uint32_t id, NodeInfo *out) const;

	/* Distances to `query` are kept (record_nodes only): a later
	 * distances() with this same pointer takes them from there, as the
	 * same computation would give them again (an insert's reverse edges
	 * measure again many nodes its search measured).  The caller keeps
	 * `query` unchanged while the accessor lives. */
	void		remember_distances(const float *query) { remembered_ = query; }

	/* Unpin the pages kept by keep_pins. */
	void release_pins();

	/* Copy a node's vector (any layout) into `out` (dim() floats). */
	void read_vector(uint32_t id, float *out, NodeInfo *info) const;

	/* The entry index of the cached entry vectors (with keep_pins), or NULL. */
	const cagra::EntryIndex *entry_index() const;

private:
	float distance_to(const float *query, uint32_t id, NodeInfo *info) const;
	/* A share-locked buffer of `blkno` (pinned for the scan with keep_pins). */
	Buffer lock_page(BlockNumber blkno) const;
	void unlock_page(Buffer buf) const;
	/* A pinned, unlocked buffer of `blkno`; *transient: the caller releases it. */
	Buffer pin_page(BlockNumber blkno, bool *transient) const;
	void prefetched_distances(const float *query, const uint32_t *ids, uint32_t count, float *out) const;
	/* Distance from the entry-vector cache; false if `id` is not cached. */
	bool cached_distance(const float *query, uint32_t id, float *out) const;

	Relation	index_;
	CagraMetaData meta_;
	cagra::VectorFormat format_;
	uint32_t	voff_;				/* record offset of the vector */
	uint32_t	vbytes_;			/* bytes of a stored vector */
	bool		single_page_;		/* a group is one page: a node's header and vector share it */
	bool		record_;
	mutable std::vector<float> vecbuf_;
	mutable std::vector<char> storedbuf_;	/* a float16 vector as stored, spanning pages */

	/* The nodes recorded (record_nodes), by id: open addressing in a table
	 * at most half full, looked up for every node measured (a search sees a
	 * few thousand). */
	struct Seen
	{
		uint32_t	id;				/* kInvalidNode: an empty slot */
		bool		measured;		/* distance is to remembered_ */
		float		distance;
		NodeInfo	info;
	};
	mutable std::vector<Seen> seen_;
	mutable uint32_t seen_count_ = 0;
	const float *remembered_ = nullptr;
	/* The entry of `id`, or the empty slot where it goes. */
	Seen	   *seen_slot(uint32_t id) const;
	/* `id` recorded with `info`, replacing what was recorded unless
	 * keep_recorded, and with distance `d` when measured from `query` (the
	 * remembered query's). */
	void		record_node(uint32_t id, const NodeInfo &info, bool keep_recorded, const float *query,
							float d) const;
	/* The distance from the remembered `query` recorded for `id`. */
	bool		remembered_distance(const float *query, uint32_t id, float *out) const;
	bool		keep_pins_;
	BlockNumber nblocks_;						/* blocks that hold nodes 0..n-1 */
	uint32_t	max_pins_;
	mutable std::vector<Buffer> pins_;			/* by block; InvalidBuffer: not pinned */
	mutable std::vector<BlockNumber> pinned_;	/* blocks with a pin, to release */
	struct Pending
	{
		Buffer		buf;			/* InvalidBuffer: known, or slow */
		BlockNumber blkno;			/* of the vector (its first page when slow) */
		uint32_t	offset;			/* of the vector in the page */
		uint32_t	header;			/* of the header in the page; 0: on another page */
		bool		transient;
		bool		slow;			/* the vector spans pages */
		bool		known;			/* the distance is remembered or cached */
	};
	mutable std::vector<Pending> pending_;		/* prefetched_distances' batch */
	/* Where one node of that batch lies; pin and prefetch it. */
	void locate_node(uint32_t id, Pending *p) const;
	void prefetch_node(uint32_t id, Pending *p) const;
	void prefetch_spanning(uint32_t id) const;
	void prefetch_buffer_header(BlockNumber blkno) const;
	std::shared_ptr<const CagraEntryVectors> entry_vectors_;	/* with keep_pins */
};

/* A Searcher over `acc`: from the entry index of its cached entry vectors
 * when it has one, else from every entry in `entries`, and from the nodes
 * that may not be linked yet (cagra_first_unlinked on). */
std::unique_ptr<cagra::Searcher<CagraPageAccessor>>
cagra_new_searcher(const CagraPageAccessor &acc, const float *query, const cagra::SearchParams &params,
				   const std::vector<uint32_t> &entries);

/*
 * fn(graph, query) with the accessor that an update of the graph (an
 * insert's plan, VACUUM's repair and reconnection) chooses edges in, and
 * `vec` (prepared, meta->dims floats; may be NULL) in that accessor's
 * space: `acc` and `vec` themselves, or for an inner-product index the
 * AugmentedAccessor over `acc` and `vec` augmented, since its graph is an
 * L2 graph over augmented vectors (core/inner_product_graph.h).  Returns
 * what fn returns.
 */
template <class Fn>
auto
cagra_with_graph_accessor(const CagraPageAccessor &acc, const CagraMetaData *meta, const float *vec, Fn &&fn)
{
	if (cagra::graph_is_augmented((cagra::Metric) meta->metric))
	{
		std::vector<float> query(vec ? meta->dims + 1 : 0);

		if (vec)
			cagra::augment_vector(vec, meta->dims, meta->max_norm, query.data());
		return fn(cagra::AugmentedAccessor<CagraPageAccessor>(acc, meta->max_norm),
				  (const float *) (vec ? query.data() : nullptr));
	}
	return fn(acc, vec);
}

/* fn(graph), the same without a vector. */
template <class Fn>
auto
cagra_with_graph_accessor(const CagraPageAccessor &acc, const CagraMetaData *meta, Fn &&fn)
{
	return cagra_with_graph_accessor(acc, meta, nullptr,
									 [&fn](const auto &graph, const float *) { return fn(graph); });
}
