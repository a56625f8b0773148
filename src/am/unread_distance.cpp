/*
 * unread_distance.cpp — the planner hook that leaves an unread ORDER BY
 * distance uncomputed:
 *
 *   SELECT id FROM items ORDER BY embedding <-> $1 LIMIT 10
 *
 * The planner puts the ORDER BY expression into the scan's target list as a
 * junk column, so the executor computes `embedding <-> $1` for every row
 * the scan returns, although the index has ordered them and nothing above
 * the scan reads the value: a Limit passes it through, the junk filter
 * drops it.  For a vector that lives out of line (a 1,024-dimension vector
 * is 4 kB, stored `external` by the type), computing it means reading the
 * vector back from the TOAST table, half of a backend's CPU per query on
 * such sets (docs/worker.md).
 *
 * After the standard planner, a SELECT whose plan is a cagra index scan or
 * filtered scan with only Limit and LockRows nodes above it has each junk
 * column that is the scan's ORDER BY expression replaced by a NULL of its
 * type.  Any other node above the scan (Sort, Incremental Sort, Merge
 * Append, Gather Merge, Unique, an aggregate, a subquery scan, a Limit WITH
 * TIES, which compares the ORDER BY values) may read the value, and the
 * plan is left as it is; so is a visible column (SELECT embedding <-> $1
 * AS d), which the user sees and gets exactly as the operator computes it.
 * cagra.skip_unread_distances turns the hook off.
 */
#include "am/cagra_am.h"

extern "C" {
#include "access/genam.h"
#include "nodes/makefuncs.h"
#include "nodes/nodeFuncs.h"
#include "nodes/plannodes.h"
#include "optimizer/planner.h"
#include "utils/rel.h"
}

static planner_hook_type prev_planner_hook = NULL;

static bool
cagra_is_cagra_index_oid(Oid indexid)
{
	Relation	index = index_open(indexid, NoLock);	/* the planner holds its lock */
	bool		is_cagra = index->rd_indam->amcostestimate == cagra_costestimate;

	index_close(index, NoLock);
	return is_cagra;
}

/* The ORDER BY expression of a cagra scan node, or NULL for any other node. */
static Expr *
cagra_scan_order_by(Plan *plan)
{
	if (IsA(plan, IndexScan))
	{
		IndexScan  *scan = (IndexScan *) plan;

		if (list_length(scan->indexorderbyorig) == 1 && cagra_is_cagra_index_oid(scan->indexid))
			return (Expr *) linitial(scan->indexorderbyorig);
		return NULL;
	}
	if (IsA(plan, CustomScan))
		return cagra_filtered_scan_order_by((CustomScan *) plan);
	return NULL;
}

/* Whether `plan`'s target list passes its child's columns through as they
 * are, in order (what setrefs makes of a Limit's or a LockRows' list). */
static bool
cagra_passes_columns_through(Plan *plan)
{
	ListCell   *lc;

	foreach(lc, plan->targetlist)
	{
		TargetEntry *tle = (TargetEntry *) lfirst(lc);
		Var		   *var = (Var *) tle->expr;

		if (!IsA(var, Var) || var->varno != OUTER_VAR || var->varattno != tle->resno)
			return false;
	}
	return true;
}

static void
cagra_skip_unread_order_by(PlannedStmt *stmt)
{
	Plan	   *top = stmt->planTree;
	Plan	   *plan = top;

	while (plan && (IsA(plan, Limit) || IsA(plan, LockRows)))
	{
		if (IsA(plan, Limit) && ((Limit *) plan)->limitOption == LIMIT_OPTION_WITH_TIES)
			return;
		if (!cagra_passes_columns_through(plan))
			return;
		plan = outerPlan(plan);
	}
	if (!plan)
		return;

	Expr	   *order_by = cagra_scan_order_by(plan);

	if (!order_by || list_length(plan->targetlist) != list_length(top->targetlist))
		return;

	ListCell   *scan_lc;
	ListCell   *top_lc;

	forboth(scan_lc, plan->targetlist, top_lc, top->targetlist)
	{
		TargetEntry *tle = (TargetEntry *) lfirst(scan_lc);

		if (((TargetEntry *) lfirst(top_lc))->resjunk && equal(tle->expr, order_by))
			tle->expr = (Expr *) makeNullConst(exprType((Node *) order_by), exprTypmod((Node *) order_by),
											   exprCollation((Node *) order_by));
	}
}

static PlannedStmt *
cagra_planner(Query *parse, const char *query_string, int cursor_options, ParamListInfo bound_params)
{
	PlannedStmt *stmt = prev_planner_hook
		? prev_planner_hook(parse, query_string, cursor_options, bound_params)
		: standard_planner(parse, query_string, cursor_options, bound_params);

	if (cagra_skip_unread_distances && stmt->commandType == CMD_SELECT)
		cagra_skip_unread_order_by(stmt);
	return stmt;
}

void
cagra_init_unread_distance(void)
{
	prev_planner_hook = planner_hook;
	planner_hook = cagra_planner;
}
