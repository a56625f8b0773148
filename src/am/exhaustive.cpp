/*
 * exhaustive.cpp — the nodes a stopped graph search did not return, in
 * distance order, and the rows a scan returned (exhaustive.h).
 */
#include "am/exhaustive.h"

#include <algorithm>

extern "C" {
#include "miscadmin.h"
#include "storage/bufmgr.h"
#include "utils/memutils.h"
}

/* ---- the rows a scan returned ---- */

void
cagra_returned_init(CagraReturnedRows *r, MemoryContext cxt)
{
	r->cxt = cxt;
	r->tids = NULL;
	r->count = 0;
	r->farthest = 0;
}

bool
cagra_returned_contains(const CagraReturnedRows *r, ItemPointer tid)
{
	bool		found;

	if (r->count == 0)
		return false;
	hash_search(r->tids, tid, HASH_FIND, &found);
	return found;
}

bool
cagra_returned_admits(const CagraReturnedRows *r, ItemPointer tid, float distance)
{
	if (r->count == 0)
		return true;
	return !cagra_before_returned(distance, r->farthest) && !cagra_returned_contains(r, tid);
}

void
cagra_returned_add(CagraReturnedRows *r, ItemPointer tid, float distance)
{
	bool		found;

	if (!r->tids)
	{
		HASHCTL		ctl;

		ctl.keysize = sizeof(ItemPointerData);
		ctl.entrysize = sizeof(ItemPointerData);
		ctl.hcxt = r->cxt;
		r->tids = hash_create("cagra returned rows", 256, &ctl, HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
	}
	hash_search(r->tids, tid, HASH_ENTER, &found);
	if (found)
		return;
	r->farthest = r->count == 0 ? distance : Max(r->farthest, distance);
	r->count++;
}

/* ---- the exhaustive pass ---- */

typedef struct CagraMeasured
{
	float		distance;
	uint32		id;
} CagraMeasured;

struct CagraExhaustivePass
{
	Relation	index;
	CagraMetaData meta;
	CagraMeasured *nodes;
	uint32		size;			/* room in nodes */
	uint32		count;
	uint32		sorted;			/* nodes[0, sorted) are in order ... */
	uint32		pos;			/* ... and those before pos handed out */
	uint32		passed_over;	/* live, not returned, nearer than the farthest returned */
};

/* The first batch sorted: a LIMIT's rows and then some. */
#define CAGRA_EXHAUSTIVE_FIRST_BATCH 64

CagraExhaustivePass *
cagra_exhaustive_begin(Relation index, const CagraMetaData *meta, const float *query, const CagraAllowed *allowed)
{
	CagraExhaustivePass *p = (CagraExhaustivePass *) palloc0(sizeof(CagraExhaustivePass));
	cagra::VectorFormat format = cagra_format_of(meta);
	uint32		vbytes = format.vector_bytes();
	uint32		voff = cagra_vector_offset(meta->graph_degree);
	uint32		per_group = meta->nodes_per_group;
	uint64		groups = ((uint64) meta->n + per_group - 1) / per_group;
	char	   *group = (char *) palloc((Size) cagra_group_bytes(meta));
	char	   *vecs = (char *) palloc((Size) per_group * vbytes);
	uint32	   *ids = (uint32 *) palloc(sizeof(uint32) * per_group);
	BufferAccessStrategy strategy = GetAccessStrategy(BAS_BULKREAD);
	CagraStatus st;

	p->index = index;
	p->meta = *meta;
	/* an allowed row has one live node at most: the room grows if not */
	p->size = Max(allowed ? Min(meta->n, allowed->rows.count) : meta->n, 1);
	p->nodes = (CagraMeasured *) palloc_extended(sizeof(CagraMeasured) * (Size) p->size, MCXT_ALLOC_HUGE);
	for (uint64 g = 0; g < groups; g++)
	{
		uint32		first = (uint32) (g * per_group);
		uint32		in_group = Min(per_group, meta->n - first);
		uint32		nmeasure = 0;

		cagra_read_node_group(index, meta, g, group, strategy);
		for (uint32 j = 0; j < in_group; j++)
		{
			CagraNodeHeader hdr;

			cagra_group_copy_out(meta, group, j, 0, sizeof(hdr), &hdr);
			if (!cagra_node_is_live(hdr.flags) ||
				(allowed && !cagra_allowed_tid(&allowed->rows, cagra_pack_tid(&hdr.heap_tid))))
				continue;
			cagra_group_copy_out(meta, group, j, voff, vbytes, vecs + (Size) nmeasure * vbytes);
			ids[nmeasure++] = first + j;
		}
		if (p->count + nmeasure > p->size)
		{
			p->size = meta->n;
			p->nodes = (CagraMeasured *) repalloc_huge(p->nodes, sizeof(CagraMeasured) * (Size) p->size);
		}
		if (!cagra_guard(&st, [&] {
				for (uint32 i = 0; i < nmeasure; i++)
					p->nodes[p->count + i] = {format.distance(query, vecs + (Size) i * vbytes), ids[i]};
			}))
			cagra_report_status(&st);
		p->count += nmeasure;
		CHECK_FOR_INTERRUPTS();
	}
	FreeAccessStrategy(strategy);
	pfree(group);
	pfree(vecs);
	pfree(ids);
	return p;
}

/* The nearest batch of the nodes not sorted yet, sorted after the others. */
static void
cagra_exhaustive_sort_next(CagraExhaustivePass *p)
{
	uint32		batch = Min(Max(p->sorted, (uint32) CAGRA_EXHAUSTIVE_FIRST_BATCH), p->count - p->sorted);
	CagraMeasured *from = p->nodes + p->sorted;
	CagraMeasured *to = from + batch;
	CagraMeasured *end = p->nodes + p->count;
	auto		nearer = [](const CagraMeasured &a, const CagraMeasured &b) {
		return a.distance < b.distance || (a.distance == b.distance && a.id < b.id);
	};

	std::nth_element(from, to - 1, end, nearer);
	std::sort(from, to, nearer);
	p->sorted += batch;
}

bool
cagra_exhaustive_next(CagraExhaustivePass *p, const CagraReturnedRows *returned, ItemPointer tid, float *distance)
{
	for (;;)
	{
		if (p->pos == p->sorted)
		{
			if (p->sorted == p->count)
			{
				/* the one way a row is never returned: say so for diagnosis */
				if (p->passed_over > 0)
					elog(DEBUG1, "cagra scan of index \"%s\": %u rows the graph search passed over lie nearer than a row it returned and were not returned",
						 RelationGetRelationName(p->index), p->passed_over);
				p->passed_over = 0;
				return false;
			}
			cagra_exhaustive_sort_next(p);
		}

		const CagraMeasured *m = &p->nodes[p->pos++];
		CagraNodeHeader hdr;

		cagra_read_record_bytes(p->index, &p->meta, m->id, 0, sizeof(hdr), &hdr);
		if (!cagra_node_is_live(hdr.flags) || cagra_returned_contains(returned, &hdr.heap_tid))
			continue;
		if (returned->count > 0 && cagra_before_returned(m->distance, returned->farthest))
		{
			p->passed_over++;
			continue;
		}
		*tid = hdr.heap_tid;
		*distance = m->distance;
		return true;
	}
}

void
cagra_exhaustive_end(CagraExhaustivePass *p)
{
	if (!p)
		return;
	pfree(p->nodes);
	pfree(p);
}
