/*
 * accessor.h — the core's graph Accessor (core/search.h) over index pages:
 * rows and vectors are read through shared buffers, one share-locked page
 * at a time.  Used by scans, inserts (plan_insert) and vacuum (plan_repair).
 *
 * Methods throw CagraPgError when PostgreSQL reports an error while reading
 * a page, so the caller's boundary can unwind C++ frames and re-throw it.
 */
#pragma once

#include <unordered_map>
#include <vector>

#include "am/cagra_am.h"
#include "core/distance.h"

class CagraPageAccessor
{
public:
	/* Sees nodes 0..meta.n-1; edges to later nodes (appended after the
	 * meta page was read) read as padding.  With record_nodes, the heap TID
	 * and flags of every node whose distance was computed are kept. */
	CagraPageAccessor(Relation index, const CagraMetaData &meta, bool record_nodes);

	uint32_t size() const { return meta_.n; }
	uint32_t degree() const { return meta_.graph_degree; }
	uint32_t dim() const { return meta_.dims; }
	cagra::Metric metric() const { return (cagra::Metric) meta_.metric; }

	const uint32_t *neighbors(uint32_t id, uint32_t *scratch) const;
	void distances(const float *query, const uint32_t *ids, uint32_t count, float *out) const;
	const float *vector(uint32_t id, float *scratch) const;

	struct NodeInfo
	{
		ItemPointerData heap_tid;
		uint16		flags;
	};

	/* Recorded TID and flags of `id` (record_nodes only); false if unseen. */
	bool node_info(uint32_t id, NodeInfo *out) const;
	void forget_nodes() { seen_.clear(); }

	/* Copy a node's vector (any layout) into `out` (dim() floats). */
	void read_vector(uint32_t id, float *out, NodeInfo *info) const;

private:
	float distance_to(const float *query, uint32_t id, NodeInfo *info) const;

	Relation	index_;
	CagraMetaData meta_;
	bool		record_;
	mutable std::vector<float> vecbuf_;
	mutable std::unordered_map<uint32_t, NodeInfo> seen_;
};
