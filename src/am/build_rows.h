/*
 * build_rows.h — the state every file of CREATE INDEX shares and the rows it
 * keeps within maintenance_work_mem, in memory, then in temporary files
 * (build_rows.cpp).  build.cpp runs the build (ambuild, the graph on the
 * worker or the core, progress); build_scan.h scans the heap;
 * build_write.h writes the pages.
 */
#pragma once

#include "am/cagra_am.h"
#include "client/client.h"

extern "C" {
#include "storage/fd.h"
}

/* The build's state: plain C data in the build memory context. */
typedef struct CagraBuildState
{
	Relation	index;
	cagra::Metric metric;
	uint32		dims;			/* 0 until the first vector when the column has no typmod */
	bool		halfvec;		/* the column is pgvector's halfvec */
	cagra::ElementType element; /* the storage reloption's element type */
	double		max_norm;		/* of the stored vectors, where the format keeps it
								 * (CagraMetaData) */
	cagra::BuildParams params;	/* assembled once: cagra_build_params */
	float	   *vectors;		/* n x dims, prepared: in memory, in the rows
								 * segment or in a spill file's mapping */
	ItemPointerData *tids;
	uint64		n;
	uint64		capacity;
	uint64		skipped_zero;	/* zero or non-finite-norm vectors under cosine, not indexed */
	struct CagraSpill *spill;	/* the rows once they outgrew maintenance_work_mem, else NULL */
	uint64		expected;		/* the planner's estimate of the table's rows: the first
								 * allocation, so the arrays are rarely copied to grow */
	double		mem_limit;		/* bytes */
	Size		peak_bytes;		/* the most the scan held in memory and the rows segment */
	MemoryContext cxt;
	MemoryContext tuple_cxt;
	dsm_segment *rows_seg;		/* holds vectors and tids after a parallel scan, else NULL */

	/* the vectors on their way to the worker, while the heap scan runs */
	bool		stream_wanted;	/* the worker may build the graph */
	bool		streaming;		/* `stream` is open */
	CagraBuildStream stream;
	uint64		streamed;		/* rows sent (a serial scan) */
	char		stream_failure[256];	/* why the stream broke; empty while it works */
} CagraBuildState;

/* ---- build_rows.cpp ---- */

/* A chunk of rows on their way to the files or the worker. */
typedef struct CagraRowBuffer
{
	uint32		rows;			/* it holds at most */
	uint32		buffered;
	float	   *vectors;
	ItemPointerData *tids;
} CagraRowBuffer;

/* Rows beyond maintenance_work_mem: two temporary files, at row offsets. */
typedef struct CagraSpill
{
	File		vectors;
	File		tids;
	Size		vector_bytes;
	bool		shared;			/* files of a parallel scan's file set */
	uint64		written_bytes;	/* by this process, to those */
	CagraRowBuffer buffer;		/* a serial scan's rows until they are written */
} CagraSpill;

double		cagra_build_bytes_per_node(const CagraBuildState *bs);
bool		cagra_build_fits(const CagraBuildState *bs, uint64 n);
void		cagra_build_note_memory(CagraBuildState *bs, Size beside);
void		cagra_row_buffer_init(CagraRowBuffer *b, MemoryContext cxt, uint32 dims);
CagraSpill *cagra_spill_new(MemoryContext cxt, File vectors, File tids, uint32 dims);
void		cagra_spill_write(CagraSpill *sp, const float *vectors, const ItemPointerData *tids, uint64 first,
							  uint64 count);
void		cagra_spill_start(CagraBuildState *bs);
void		cagra_spill_map(CagraBuildState *bs, CagraSpill *sp);
bool		cagra_dsm_has_room(Size bytes);
