/*
 * insert_write.h — the page writes of an insert (insert_write.cpp), for
 * aminsert and the linking of nodes inserted unlinked (insert.cpp).
 */
#pragma once

#include "am/cagra_am.h"
#include "core/update.h"

#include <vector>

/* The record of a new node with its vector stored, made before the slot
 * lock; its header and row are set when it is written (palloc'd). */
char	   *cagra_new_record(const CagraMetaData *meta, const float *vec);

/* Step 1: the new node's record `rec` written into slot `new_id`, its
 * header, row and vector, in one WAL record; `flags`: its header's when
 * appended. */
void		cagra_write_record(Relation index, const CagraMetaData *meta, uint32 new_id, char *rec,
							   ItemPointer heap_tid, const uint32 *row, uint16 flags);

/* Node `new_id` (written, appended) counted unlinked: n + 1 in the unlinked
 * span, with no way in, in one WAL record; releases the slot lock
 * (`metabuf`, `meta` what it holds). */
void		cagra_count_unlinked_node(Relation index, Buffer metabuf, const CagraMetaData *meta, uint32 new_id);

/*
 * Step 2 until it succeeds: node `new_id` counted with the closest
 * neighbour's reverse edge (the plan's first), each node that edge could
 * not go in place of handed to the new row.  Releases the slot lock
 * (`metabuf`; InvalidBuffer: the node is counted, unlinked, and is linked
 * here), and leaves in the plan the reverse edges step 3 links.
 */
void		cagra_publish_with_way_in(Relation index, Buffer metabuf, const CagraMetaData *meta, uint32 new_id,
									  cagra::InsertPlan *plan);

/* Step 3: the other reverse edges, each decided again on its row as it is
 * now, rows in node order, up to MAX_GENERIC_XLOG_PAGES pages a record. */
void		cagra_link_reverse_edges(Relation index, const CagraMetaData *meta, const cagra::EdgeUpdate *updates,
									 size_t nupdates);

/*
 * The unlinked span of the meta page shortened past its nodes linked (or
 * deleted) since, so searches stop taking them as entries and copies for
 * the worker take them as linked; the linked ones taken as entries as an
 * insert's would be.  Under the slot lock, reading headers.
 */
void		cagra_shorten_unlinked(Relation index);
