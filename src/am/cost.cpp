/*
 * cost.cpp — amcostestimate for cagra.
 *
 * The index only answers ORDER BY <distance operator>: a path without an
 * ordering operator (a plain or index-only scan of a partial index, which
 * the planner considers for a query like count(*) ... WHERE <predicate>)
 * gets an infinite cost, as in pgvector's hnswcostestimate, so that it never
 * wins, not even against paths that enable_seqscan = off disables (those
 * cost disable_cost, which a disabled cost here would tie with).
 * With one, the work is the graph search, done before the first row:
 * about itopk_size node expansions of graph_degree distances each, reading
 * that share of the index pages (hot graph pages, counted as sequential and
 * never more than the table's own pages: the table's vectors are often in
 * TOAST, which the sequential scan's cost leaves out).  Rows beyond the
 * first batch continue the search: about graph_degree distances each.
 *
 * Filters the scan does not answer (the table's conditions less those its
 * predicate implies) are checked on the rows it returns, so a LIMIT k needs
 * k / selectivity of them; the planner's LIMIT fraction scales the run cost
 * by that.  A scan stops after cagra.max_scan_tuples rows: when the rows
 * that pass the filter among those are fewer than the LIMIT asks for, the
 * path would return too few rows, and is costed as disabled so that a plan
 * that finds them all (a bitmap or sequential scan and a sort) wins.
 */
#include "am/cagra_am.h"

#include <cmath>

extern "C" {
#include "access/genam.h"
#include "optimizer/cost.h"
#include "optimizer/optimizer.h"
#include "utils/float.h"
#include "utils/spccache.h"
}

void
cagra_costestimate(PlannerInfo *root, IndexPath *path, double loop_count,
				   Cost *indexStartupCost, Cost *indexTotalCost,
				   Selectivity *indexSelectivity, double *indexCorrelation,
				   double *indexPages)
{
	IndexOptInfo *info = path->indexinfo;

	*indexSelectivity = 1.0;
	*indexCorrelation = 0.0;
	if (path->indexorderbys == NIL)
	{
		*indexStartupCost = get_float8_infinity();
		*indexTotalCost = get_float8_infinity();
		*indexPages = info->pages;
		return;
	}

	Relation	index = index_open(info->indexoid, NoLock);
	double		degree = cagra_option_graph_degree(index);

	index_close(index, NoLock);

	double		tuples = Max(info->tuples, 1.0);
	double		visited = Min(tuples, (double) cagra_itopk_size * degree);
	double		ratio = visited / tuples;
	double		pages = Min(ceil(ratio * info->pages), (double) Max(info->rel->pages, 1));
	double		spc_random_page_cost,
				spc_seq_page_cost;

	get_tablespace_page_costs(info->reltablespace, &spc_random_page_cost, &spc_seq_page_cost);

	Cost		search = visited * (cpu_operator_cost + cpu_index_tuple_cost) + pages * spc_seq_page_cost;
	Selectivity filtered = clauselist_selectivity(root, info->indrestrictinfo, info->rel->relid, JOIN_INNER,
												  NULL);
	double		passing = Min(tuples, (double) cagra_max_scan_tuples) * filtered;

	*indexStartupCost = search;
	*indexTotalCost = search + tuples * (cpu_index_tuple_cost + degree * cpu_operator_cost);
	if (root->limit_tuples > 0 && passing < root->limit_tuples && filtered < 1.0)
	{
		*indexStartupCost += disable_cost;
		*indexTotalCost += disable_cost;
	}
	*indexPages = pages;
}
