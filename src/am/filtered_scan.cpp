/*
 * filtered_scan.cpp — the filtered search as a custom scan:
 *
 *   SELECT ... FROM t WHERE <filter> ORDER BY v <-> q LIMIT k
 *
 * An index scan cannot see the query's WHERE clause (the index AM
 * interface passes only the ORDER BY), so it returns rows in distance order
 * and the executor drops those that fail the filter: with a selective
 * filter it walks thousands of nodes for k rows.  When the filter has an
 * index of its own, the planner hook here offers a custom scan,
 * "Cagra Filtered Scan", beside that index scan and the bitmap-scan-and-
 * sort plan, and the costs choose (cost.cpp, cagra_filtered_scan_cost):
 *
 *   1. the filter's bitmap index scan (the plan the planner made for a
 *      bitmap heap scan of the same conditions, run without its heap part)
 *      gives the TIDs of the rows that may pass: read one by one from its
 *      index when that is a single index that returns TIDs (a btree), else
 *      as the plan's bitmap;
 *   2. those rows go to a search stream (search_stream.h) as its allowed
 *      set: to the GPU worker, which maps them to its copy's nodes, or to
 *      the CPU; the search measures every allowed node when they are few,
 *      else traverses the graph returning only them
 *      (cagra::plan_filtered_search);
 *   3. the results, in distance order, are fetched from the heap under the
 *      statement's snapshot into the scan slot, a tuple of the table with
 *      its ctid and tableoid, and every condition of the WHERE clause
 *      (row-level security's too) is checked on them again (ExecScan), so
 *      a lossy bitmap or a condition no index answers never lets a row
 *      through that fails it;
 *   4. when the executor wants more rows than a round gave, the next round
 *      asks for twice as many, skipping rows already returned (past what
 *      the worker answers in one search, on the CPU), up to what one
 *      traversal keeps (cagra::kMaxItopk) or cagra.max_scan_tuples rows;
 *   5. when the rounds stop and the executor still wants rows, every
 *      allowed node not yet returned follows in distance order (the
 *      exhaustive pass, exhaustive.h), so the scan does not end while
 *      allowed rows are left.
 *
 * Indexes that round vectors to float16 (whose order is a lower bound the
 * executor rechecks, xs_recheckorderby) are left to the index scan: this
 * scan returns rows in the index's order as exact.
 */
#include "am/search_stream.h"

#include <algorithm>

#include "type/vector.h"

extern "C" {
#include "access/relation.h"
#include "access/tableam.h"
#include "commands/explain.h"
#include "executor/executor.h"
#include "executor/instrument.h"
#include "executor/nodeCustom.h"
#include "executor/nodeIndexscan.h"
#include "miscadmin.h"
#include "nodes/extensible.h"
#include "nodes/makefuncs.h"
#include "nodes/nodeFuncs.h"
#include "nodes/tidbitmap.h"
#include "optimizer/cost.h"
#include "optimizer/pathnode.h"
#include "optimizer/paths.h"
#include "optimizer/restrictinfo.h"
#include "storage/predicate.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/ruleutils.h"
}

static set_rel_pathlist_hook_type prev_set_rel_pathlist_hook = NULL;

/* custom_private of the plan: Consts, in this order */
enum
{
	CAGRA_FS_INDEX,				/* oid of the cagra index */
	CAGRA_FS_LIMIT,				/* rows the query's LIMIT wants, 0 unknown (int4) */
	CAGRA_FS_ALLOWED,			/* estimated allowed rows (float8) */
	CAGRA_FS_EXACT,				/* whether the planned search measures them all (bool) */
	CAGRA_FS_NPRIVATE
};

/* ---- planning ---- */

static Plan *cagra_fs_plan(PlannerInfo *root, RelOptInfo *rel, CustomPath *best_path, List *tlist,
						   List *clauses, List *custom_plans);

static const CustomPathMethods cagra_fs_path_methods = {
	.CustomName = "Cagra Filtered Scan",
	.PlanCustomPath = cagra_fs_plan,
};

static Node *cagra_fs_create_state(CustomScan *cscan);

static const CustomScanMethods cagra_fs_scan_methods = {
	.CustomName = "Cagra Filtered Scan",
	.CreateCustomScanState = cagra_fs_create_state,
};

/* Whether the index is a cagra index (its access method's cost function). */
static bool
cagra_is_cagra_index(const IndexOptInfo *info)
{
	return reinterpret_cast<void *>(info->amcostestimate) == reinterpret_cast<void *>(cagra_costestimate);
}

/* A cagra index path that answers the query's ORDER BY. */
static bool
cagra_is_ordered_path(Path *p)
{
	if (!IsA(p, IndexPath) || p->param_info != NULL || p->pathkeys == NIL)
		return false;

	IndexPath  *ip = (IndexPath *) p;

	return cagra_is_cagra_index(ip->indexinfo) && ip->indexorderbys != NIL &&
		list_length(ip->indexorderbys) == 1;
}

/* A path that can be the filter's bitmap: a bitmap heap scan's bitmap, or
 * an index scan of an index that can give one (the bitmap heap path may
 * have lost to a sequential scan). */
static Path *
cagra_filter_bitmap_of(Path *p)
{
	if (p->param_info != NULL)
		return NULL;
	if (IsA(p, BitmapHeapPath))
		return ((BitmapHeapPath *) p)->bitmapqual;
	if (IsA(p, IndexPath))
	{
		IndexPath  *ip = (IndexPath *) p;

		if (ip->indexinfo->amhasgetbitmap && ip->indexclauses != NIL && ip->indexorderbys == NIL &&
			!cagra_is_cagra_index(ip->indexinfo))
			return p;
	}
	return NULL;
}

/* The filter bitmaps among `paths`. */
static List *
cagra_filter_bitmaps(List *paths)
{
	List	   *bitmaps = NIL;
	ListCell   *lc;

	foreach(lc, paths)
	{
		Path	   *b = cagra_filter_bitmap_of((Path *) lfirst(lc));

		if (b)
			bitmaps = lappend(bitmaps, b);
	}
	return bitmaps;
}

/*
 * The filter's index paths lost to a sequential scan, or to the ordered
 * path when enable_indexscan and enable_bitmapscan are off (their disable
 * costs make all paths tie): make them again, apart from the rel's own
 * paths and as if enabled (the filtered scan has its own setting), and take
 * the bitmaps from those.
 */
static List *
cagra_remade_filter_bitmaps(PlannerInfo *root, RelOptInfo *rel)
{
	List	   *pathlist = rel->pathlist;
	List	   *partial = rel->partial_pathlist;
	bool		indexscan = enable_indexscan;
	bool		bitmapscan = enable_bitmapscan;
	List	   *bitmaps = NIL;

	rel->pathlist = NIL;
	rel->partial_pathlist = NIL;
	enable_indexscan = enable_bitmapscan = true;
	PG_TRY();
	{
		create_index_paths(root, rel);
		bitmaps = cagra_filter_bitmaps(rel->pathlist);
	}
	PG_FINALLY();
	{
		enable_indexscan = indexscan;
		enable_bitmapscan = bitmapscan;
		rel->pathlist = pathlist;
		rel->partial_pathlist = partial;
	}
	PG_END_TRY();
	return bitmaps;
}

static Const *
cagra_fs_const_oid(Oid value)
{
	return makeConst(OIDOID, -1, InvalidOid, sizeof(Oid), ObjectIdGetDatum(value), false, true);
}

/*
 * set_rel_pathlist_hook: a filtered scan for a base table with a WHERE
 * clause, a cagra index that orders it by the query's ORDER BY, and a
 * bitmap for the filter.
 */
static void
cagra_fs_add_paths(PlannerInfo *root, RelOptInfo *rel, Index rti, RangeTblEntry *rte)
{
	if (prev_set_rel_pathlist_hook)
		prev_set_rel_pathlist_hook(root, rel, rti, rte);
	if (!cagra_enable_filtered_scan || rel->baserestrictinfo == NIL || rte->rtekind != RTE_RELATION ||
		rte->tablesample != NULL ||
		(rel->reloptkind != RELOPT_BASEREL && rel->reloptkind != RELOPT_OTHER_MEMBER_REL))
		return;

	IndexPath  *ordered = NULL;
	ListCell   *lc;

	foreach(lc, rel->pathlist)
	{
		Path	   *p = (Path *) lfirst(lc);

		if (cagra_is_ordered_path(p) && (!ordered || p->total_cost < ordered->path.total_cost))
			ordered = (IndexPath *) p;
	}
	if (!ordered)
		return;

	List	   *bitmaps = cagra_filter_bitmaps(rel->pathlist);

	if (bitmaps == NIL)
		bitmaps = cagra_remade_filter_bitmaps(root, rel);

	/* the bitmap whose scan costs least: a cheap bitmap may allow many rows */
	Relation	index = index_open(ordered->indexinfo->indexoid, NoLock);
	Path	   *bitmap = NULL;
	CagraFilteredScanCost cost;
	CagraMetaData meta;

	cagra_read_meta(index, &meta);
	foreach(lc, bitmaps)
	{
		CagraFilteredScanCost c;

		if (cagra_filtered_scan_cost(root, ordered->indexinfo, index, meta, (Path *) lfirst(lc), rel->rows, &c) &&
			(!bitmap || c.total < cost.total))
		{
			bitmap = (Path *) lfirst(lc);
			cost = c;
		}
	}
	index_close(index, NoLock);
	if (!bitmap)
		return;

	CustomPath *cp = makeNode(CustomPath);

	cp->path.pathtype = T_CustomScan;
	cp->path.parent = rel;
	cp->path.pathtarget = rel->reltarget;
	cp->path.param_info = NULL;
	cp->path.parallel_aware = false;
	cp->path.parallel_safe = false;	/* a backend's own worker requests */
	cp->path.parallel_workers = 0;
	cp->path.rows = rel->rows;
	cp->path.startup_cost = cost.startup;
	cp->path.total_cost = cost.total;
	cp->path.pathkeys = ordered->path.pathkeys;
	cp->flags = CUSTOMPATH_SUPPORT_PROJECTION;
	/* a new bitmap heap path: add_path may free the one in the list */
	cp->custom_paths = list_make1(create_bitmap_heap_path(root, rel, bitmap, NULL, 1.0, 0));
	cp->custom_private = list_make5(linitial(ordered->indexorderbys),
									cagra_fs_const_oid(ordered->indexinfo->indexoid),
									makeConst(INT4OID, -1, InvalidOid, sizeof(int32),
											  Int32GetDatum(root->limit_tuples > 0 &&
															root->limit_tuples < PG_INT32_MAX
															? (int32) root->limit_tuples : 0),
											  false, true),
									makeConst(FLOAT8OID, -1, InvalidOid, sizeof(float8),
											  Float8GetDatum(cost.allowed), false, FLOAT8PASSBYVAL),
									makeBoolConst(cost.exact, false));
	cp->methods = &cagra_fs_path_methods;
	add_path(rel, &cp->path);
}

/*
 * The plan: the bitmap heap scan's plan gives the bitmap index scans of
 * the filter (its heap part is not run); the WHERE clause is the scan's
 * qual, checked on every row returned; custom_exprs holds the ORDER BY
 * expression (its right side is the query vector, evaluated per rescan).
 */
static Plan *
cagra_fs_plan(PlannerInfo *root, RelOptInfo *rel, CustomPath *best_path, List *tlist, List *clauses,
			  List *custom_plans)
{
	CustomScan *cs = makeNode(CustomScan);
	Plan	   *heap_plan = (Plan *) linitial(custom_plans);

	Assert(IsA(heap_plan, BitmapHeapScan));
	cs->scan.plan.targetlist = tlist;
	cs->scan.plan.qual = extract_actual_clauses(clauses, false);
	cs->scan.scanrelid = rel->relid;
	cs->flags = best_path->flags;
	cs->custom_plans = list_make1(outerPlan(heap_plan));
	cs->custom_exprs = list_make1(copyObjectImpl(linitial(best_path->custom_private)));
	cs->custom_private = list_copy_tail(best_path->custom_private, 1);
	cs->methods = &cagra_fs_scan_methods;
	return &cs->scan.plan;
}

/* ---- execution ---- */

typedef struct CagraFilteredScanState
{
	CustomScanState css;
	Relation	index;
	ExprState  *query_expr;		/* the ORDER BY's right side */
	IndexFetchTableData *fetch;
	MemoryContext search_cxt;	/* one search: reset by every rescan */
	int32		limit;			/* the planner's LIMIT, 0 unknown */

	/* the search of the current rescan */
	bool		started;
	CagraSearchStream *stream;	/* NULL: no row */

	/* for EXPLAIN ANALYZE, over all rescans */
	uint64		searches;
	uint64		allowed_rows;
	CagraStreamCounts counts;	/* of the rescans before the current one */
} CagraFilteredScanState;

static void cagra_fs_begin(CustomScanState *node, EState *estate, int eflags);
static TupleTableSlot *cagra_fs_exec(CustomScanState *node);
static void cagra_fs_end(CustomScanState *node);
static void cagra_fs_rescan(CustomScanState *node);
static void cagra_fs_explain(CustomScanState *node, List *ancestors, ExplainState *es);

static const CustomExecMethods cagra_fs_exec_methods = {
	.CustomName = "Cagra Filtered Scan",
	.BeginCustomScan = cagra_fs_begin,
	.ExecCustomScan = cagra_fs_exec,
	.EndCustomScan = cagra_fs_end,
	.ReScanCustomScan = cagra_fs_rescan,
	.ExplainCustomScan = cagra_fs_explain,
};

static Node *
cagra_fs_create_state(CustomScan *cscan)
{
	CagraFilteredScanState *s = (CagraFilteredScanState *) newNode(sizeof(CagraFilteredScanState),
																  T_CustomScanState);

	s->css.methods = &cagra_fs_exec_methods;
	return (Node *) s;
}

static Const *
cagra_fs_private(const CustomScan *cs, int which)
{
	return (Const *) list_nth(cs->custom_private, which);
}

/*
 * The scan slot made a tuple of the table's own kind, filled by its access
 * method's fetch, so a row keeps its identity (ctid, tableoid, xmin): row
 * locks (LockRows locks the ctid the plan returns), WHERE CURRENT OF (which
 * reads the cursor's scan slot) and ctid joins need it.  ExecInitCustomScan
 * made a virtual slot (PostgreSQL 15 lets a custom scan ask for no other)
 * and compiled the qual and the projection for it, which read a virtual
 * slot's values without deforming: they are compiled again for this one.
 */
static void
cagra_fs_init_table_slot(CustomScanState *node, EState *estate)
{
	Relation	heap = node->ss.ss_currentRelation;
	Scan	   *scan = (Scan *) node->ss.ps.plan;

	ExecInitScanTupleSlot(estate, &node->ss, RelationGetDescr(heap), table_slot_callbacks(heap));
	node->ss.ps.qual = ExecInitQual(scan->plan.qual, &node->ss.ps);
	ExecAssignScanProjectionInfoWithVarno(&node->ss, scan->scanrelid);
}

static void
cagra_fs_begin(CustomScanState *node, EState *estate, int eflags)
{
	CagraFilteredScanState *s = (CagraFilteredScanState *) node;
	CustomScan *cs = (CustomScan *) node->ss.ps.plan;
	OpExpr	   *orderby = (OpExpr *) linitial(cs->custom_exprs);
	Relation	heap = node->ss.ss_currentRelation;

	cagra_fs_init_table_slot(node, estate);
	s->index = index_open(DatumGetObjectId(cagra_fs_private(cs, CAGRA_FS_INDEX)->constvalue), AccessShareLock);
	s->limit = DatumGetInt32(cagra_fs_private(cs, CAGRA_FS_LIMIT)->constvalue);
	s->query_expr = ExecInitExpr((Expr *) lsecond(orderby->args), &node->ss.ps);
	node->custom_ps = list_make1(ExecInitNode((Plan *) linitial(cs->custom_plans), estate, eflags));
	if (eflags & EXEC_FLAG_EXPLAIN_ONLY)
		return;
	s->fetch = table_index_fetch_begin(heap);
	s->search_cxt = AllocSetContextCreate(estate->es_query_cxt, "cagra filtered scan", ALLOCSET_DEFAULT_SIZES);
	/* as index_beginscan does for an access method without predicate locks */
	PredicateLockRelation(s->index, estate->es_snapshot);
}

/* Line pointers on heap page `blkno` (a lossy bitmap page allows them all). */
static int
cagra_heap_page_items(Relation heap, BlockNumber blkno)
{
	Buffer		buf = ReadBuffer(heap, blkno);
	int			n;

	LockBuffer(buf, BUFFER_LOCK_SHARE);
	n = PageGetMaxOffsetNumber(BufferGetPage(buf));
	UnlockReleaseBuffer(buf);
	return n;
}

/* Room for n + more packed TIDs in *packed (of *size). */
static void
cagra_fs_reserve(uint64 **packed, Size *size, Size n, Size more)
{
	if (n + more <= *size)
		return;
	*size = Max(2 * *size, n + more);
	if (*size > PG_UINT32_MAX)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("a cagra filtered scan allows at most %u rows", PG_UINT32_MAX)));
	*packed = (uint64 *) repalloc_huge(*packed, sizeof(uint64) * *size);
}

/* The allowed rows: the filter's bitmap as packed TIDs, ascending (bitmap
 * index entries point at HOT chains' roots, as the index's nodes do).  A
 * lossy page allows each of its line pointers, so the rows never outnumber
 * the table's line pointers. */
static CagraAllowed *
cagra_fs_allowed_from_bitmap(PlanState *child, Relation heap)
{
	TIDBitmap  *tbm = (TIDBitmap *) MultiExecProcNode(child);

	if (!tbm || !IsA(tbm, TIDBitmap))
		elog(ERROR, "cagra filtered scan: the filter's plan gave no bitmap");

	TBMIterator *it = tbm_begin_iterate(tbm);
	TBMIterateResult *r;
	Size		size = 1024;
	Size		n = 0;
	uint64	   *packed = (uint64 *) palloc(sizeof(uint64) * size);

	while ((r = tbm_iterate(it)) != NULL)
	{
		int			count = r->ntuples >= 0 ? r->ntuples : cagra_heap_page_items(heap, r->blockno);

		cagra_fs_reserve(&packed, &size, n, count);
		for (int i = 0; i < count; i++)
		{
			ItemPointerData tid;

			ItemPointerSet(&tid, r->blockno, r->ntuples >= 0 ? r->offsets[i] : (OffsetNumber) (i + 1));
			packed[n++] = cagra_pack_tid(&tid);
		}
		CHECK_FOR_INTERRUPTS();
	}
	tbm_end_iterate(it);
	tbm_free(tbm);
	return cagra_allowed_packed(packed, (uint32) n);
}

/* Whether the filter's plan is one index scan whose index returns TIDs one
 * by one (amgettuple: btree, hash, GiST, SP-GiST; not GIN or BRIN). */
static bool
cagra_fs_index_gives_tids(PlanState *child)
{
	if (!IsA(child, BitmapIndexScanState))
		return false;

	IndexScanDesc scan = ((BitmapIndexScanState *) child)->biss_ScanDesc;

	return scan && scan->indexRelation->rd_indam->amgettuple != NULL;
}

/*
 * The allowed rows read one by one from the filter's index scan, which is
 * what its bitmap index scan would have put in the bitmap (the same scan
 * keys, runtime keys and arrays, MultiExecBitmapIndexScan's steps) without
 * the bitmap: building, hashing and sorting a bitmap of 10,000 rows was 85%
 * of the query's time (perf, 1,000,000 rows, a 1% filter).  Index entries
 * point at HOT chains' roots, as the bitmap's do.  A btree returns an
 * equality's TIDs ascending; other orders are sorted here.
 */
static CagraAllowed *
cagra_fs_allowed_from_index(BitmapIndexScanState *node)
{
	PlanState  *ps = &node->ss.ps;
	bool		doscan = true;
	bool		ascending = true;
	Size		size = 1024;
	Size		n = 0;
	uint64	   *packed = (uint64 *) palloc(sizeof(uint64) * size);

	if (ps->chgParam != NULL)
		ExecReScan(ps);
	if (ps->instrument)
		InstrStartNode(ps->instrument);
	if (!node->biss_RuntimeKeysReady && (node->biss_NumRuntimeKeys != 0 || node->biss_NumArrayKeys != 0))
	{
		ExecReScan(ps);
		doscan = node->biss_RuntimeKeysReady;
	}
	while (doscan)
	{
		ItemPointer tid;

		while ((tid = index_getnext_tid(node->biss_ScanDesc, ForwardScanDirection)) != NULL)
		{
			uint64		p = cagra_pack_tid(tid);

			cagra_fs_reserve(&packed, &size, n, 1);
			ascending = ascending && (n == 0 || packed[n - 1] < p);
			packed[n++] = p;
			if ((n & 1023) == 0)
				CHECK_FOR_INTERRUPTS();
		}
		doscan = ExecIndexAdvanceArrayKeys(node->biss_ArrayKeys, node->biss_NumArrayKeys);
		if (doscan)
			index_rescan(node->biss_ScanDesc, node->biss_ScanKeys, node->biss_NumScanKeys, NULL, 0);
	}
	if (ps->instrument)
		InstrStopNode(ps->instrument, (double) n);
	if (!ascending)
	{
		std::sort(packed, packed + n);
		n = std::unique(packed, packed + n) - packed;
	}
	return cagra_allowed_packed(packed, (uint32) n);
}

/* Set up the search of this rescan; false when it returns nothing. */
static bool
cagra_fs_start(CagraFilteredScanState *s)
{
	ExprContext *econtext = s->css.ss.ps.ps_ExprContext;
	bool		isnull;
	Datum		q = ExecEvalExprSwitchContext(s->query_expr, econtext, &isnull);
	PlanState  *child = (PlanState *) linitial(s->css.custom_ps);
	CagraMetaData meta;

	cagra_read_meta(s->index, &meta);
	if (cagra_index_rounds_vectors(s->index, &meta))
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("cagra filtered scan of index \"%s\": its vectors are rounded to float16 since the plan was made",
						RelationGetRelationName(s->index)),
				 errhint("Run the query again: it is planned anew.")));
	if (meta.n == 0 || meta.live == 0)
		return false;

	const float *raw;

	if (isnull)
		raw = (const float *) palloc0(sizeof(float) * meta.dims);	/* any order will do */
	else
	{
		int			dim;

		raw = vector_datum_floats(q, cagra_index_is_halfvec(s->index), &dim);
		cagra_check_dims(s->index, meta.dims, dim);
	}

	float	   *query = (float *) palloc(sizeof(float) * meta.dims);
	CagraAllowed *allowed;
	CagraSearchSession session;

	cagra_prepare((cagra::Metric) meta.metric, raw, query, meta.dims);
	allowed = cagra_fs_index_gives_tids(child)
		? cagra_fs_allowed_from_index((BitmapIndexScanState *) child)
		: cagra_fs_allowed_from_bitmap(child, s->css.ss.ss_currentRelation);
	s->searches++;
	s->allowed_rows += allowed->rows.count;
	if (allowed->rows.count == 0)
		return false;
	cagra_session_init(&session, s->index, &meta, allowed, s->css.ss.ps.state->es_snapshot);
	s->stream = cagra_stream_begin(&session, query, true, (uint32) s->limit);
	return true;
}

/* The scan's next row into its scan slot, a tuple of the table (see
 * cagra_fs_init_table_slot): the stream's next row that the snapshot sees
 * a version of. */
static TupleTableSlot *
cagra_fs_next(ScanState *ss)
{
	CagraFilteredScanState *s = (CagraFilteredScanState *) ss;
	TupleTableSlot *slot = ss->ss_ScanTupleSlot;
	ItemPointerData root;
	float		distance;

	if (!s->started)
	{
		MemoryContext old = MemoryContextSwitchTo(s->search_cxt);

		s->started = true;
		if (!cagra_fs_start(s))
			s->stream = NULL;
		MemoryContextSwitchTo(old);
	}
	while (s->stream && cagra_stream_next(s->stream, &root, &distance))
	{
		bool		call_again = false;
		bool		all_dead = false;
		ItemPointerData tid = root;

		if (table_index_fetch_tuple(s->fetch, &tid, s->css.ss.ps.state->es_snapshot, slot, &call_again,
									&all_dead))
			return slot;
		CHECK_FOR_INTERRUPTS();
	}
	return ExecClearTuple(slot);
}

/*
 * EvalPlanQual's recheck of a newer version of a row the scan returned
 * (FOR UPDATE, UPDATE or DELETE after a concurrent update): the scan has no
 * condition of its own to check, as an index scan has its index quals;
 * every condition of the WHERE clause is in the scan's qual, which ExecScan
 * checks on the version after this returns.
 */
static bool
cagra_fs_recheck(ScanState *ss, TupleTableSlot *slot)
{
	return true;
}

static TupleTableSlot *
cagra_fs_exec(CustomScanState *node)
{
	return ExecScan(&node->ss, cagra_fs_next, cagra_fs_recheck);
}

/* What the searches of every rescan did, the current one's too. */
static CagraStreamCounts
cagra_fs_counts(const CagraFilteredScanState *s)
{
	CagraStreamCounts all = s->counts;

	if (s->stream)
	{
		const CagraStreamCounts *c = cagra_stream_counts(s->stream);

		all.rounds += c->rounds;
		all.worker_rounds += c->worker_rounds;
		all.exhaustive_passes += c->exhaustive_passes;
	}
	return all;
}

/* End the search of the last rescan, its counts kept for EXPLAIN. */
static void
cagra_fs_reset(CagraFilteredScanState *s)
{
	s->counts = cagra_fs_counts(s);
	cagra_stream_end(s->stream);
	s->stream = NULL;
	s->started = false;
	if (s->search_cxt)
		MemoryContextReset(s->search_cxt);
}

static void
cagra_fs_rescan(CustomScanState *node)
{
	CagraFilteredScanState *s = (CagraFilteredScanState *) node;
	PlanState  *child = (PlanState *) linitial(node->custom_ps);

	cagra_fs_reset(s);
	/* a changed parameter makes the child rescan when it is next run */
	if (child->chgParam == NULL)
		ExecReScan(child);
}

static void
cagra_fs_end(CustomScanState *node)
{
	CagraFilteredScanState *s = (CagraFilteredScanState *) node;

	cagra_stream_end(s->stream);
	ExecEndNode((PlanState *) linitial(node->custom_ps));
	if (s->fetch)
		table_index_fetch_end(s->fetch);
	index_close(s->index, AccessShareLock);
}

/* The index, the ORDER BY, the plan's choice and its estimate, and under
 * ANALYZE what the searches did. */
static void
cagra_fs_explain(CustomScanState *node, List *ancestors, ExplainState *es)
{
	CagraFilteredScanState *s = (CagraFilteredScanState *) node;
	CustomScan *cs = (CustomScan *) node->ss.ps.plan;
	List	   *context = set_deparse_context_plan(es->deparse_cxt, &cs->scan.plan, ancestors);
	double		allowed = DatumGetFloat8(cagra_fs_private(cs, CAGRA_FS_ALLOWED)->constvalue);
	bool		exact = DatumGetBool(cagra_fs_private(cs, CAGRA_FS_EXACT)->constvalue);

	ExplainPropertyText("Index", RelationGetRelationName(s->index), es);
	ExplainPropertyText("Order By", deparse_expression((Node *) linitial(cs->custom_exprs), context, false, false),
						es);
	ExplainPropertyText("Search", exact ? "exact over the allowed rows" : "traversal of the allowed rows", es);
	ExplainPropertyFloat("Allowed Rows", NULL, allowed, 0, es);
	if (es->analyze && s->searches > 0)
	{
		CagraStreamCounts counts = cagra_fs_counts(s);

		ExplainPropertyFloat("Actual Allowed Rows", NULL, (double) s->allowed_rows / s->searches, 0, es);
		ExplainPropertyInteger("Search Rounds", NULL, (int64) counts.rounds, es);
		if (counts.exhaustive_passes > 0)
			ExplainPropertyInteger("Exhaustive Passes", NULL, (int64) counts.exhaustive_passes, es);
		if (es->verbose)
			ExplainPropertyInteger("Worker Rounds", NULL, (int64) counts.worker_rounds, es);
	}
}

Expr *
cagra_filtered_scan_order_by(const CustomScan *cs)
{
	return cs->methods == &cagra_fs_scan_methods ? (Expr *) linitial(cs->custom_exprs) : NULL;
}

void
cagra_init_filtered_scan(void)
{
	RegisterCustomScanMethods(&cagra_fs_scan_methods);
	prev_set_rel_pathlist_hook = set_rel_pathlist_hook;
	set_rel_pathlist_hook = cagra_fs_add_paths;
}
