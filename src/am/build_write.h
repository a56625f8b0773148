/*
 * build_write.h — the pages of a build (build_write.cpp): the meta page's
 * fields, the node pages written and WAL-logged by the leader and parallel
 * workers, the meta page last.
 */
#pragma once

#include "am/build_rows.h"

void		cagra_fill_meta(CagraMetaData *meta, Relation index, uint32 dims);
void		cagra_write_node_pages(Relation index, IndexInfo *indexInfo, const CagraMetaData *meta,
								   const CagraBuildState *bs, const cagra::Graph *graph);
void		cagra_write_meta_page(Relation index, const CagraMetaData *meta, bool has_nodes);
