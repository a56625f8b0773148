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
 * that share of the index pages, or, when the GPU worker serves searches,
 * a round trip to it instead of the pages.  The pages are counted as
 * sequential (hot graph pages) and never as more than the table's own
 * pages, as pgvector counts its graph's: the sequential scan's cost leaves
 * out the detoasting of out-of-line vectors, which the index's reads stand
 * for.  Rows beyond the first batch continue the search: about
 * graph_degree distances each.
 *
 * Filters the scan does not answer (the table's conditions less those its
 * predicate implies) are checked on the rows it returns, so a LIMIT k needs
 * k / selectivity of them; the planner's LIMIT fraction scales the run cost
 * by that, and rows past what the worker's rounds give cost a node read
 * each.  A scan's graph search stops after cagra.max_scan_tuples rows, and
 * the scan then measures every node it has not returned (exhaustive.h):
 * when the rows that pass the filter among those are fewer than the LIMIT
 * asks for, the path would end in that pass over the whole index, and is
 * costed as disabled so that a plan that reads only the rows that pass (a
 * bitmap or sequential scan and a sort) wins.
 */
#include "am/cagra_am.h"

#include <cmath>

#include "client/client.h"
#include "core/search.h"

extern "C" {
#include "access/genam.h"
#include "optimizer/cost.h"
#include "optimizer/optimizer.h"
#include "utils/float.h"
#include "utils/spccache.h"
}

/* The fixed cost of a filtered scan's search round, in random page reads
 * (see cagra_filtered_scan_cost). */
#define CAGRA_SEARCH_ROUND_PAGES 100

/*
 * The fixed cost of one search through the worker, in operator costs: the
 * request's hand-off and wake-ups both ways, tens of microseconds, where an
 * operator cost stands for about ten nanoseconds (docs/index.md derives
 * both).  The search's distances are counted apart.
 */
#define CAGRA_WORKER_ROUND_TRIP_OPERATORS 3000

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
	double		visited = Min(tuples, (double) cagra_search_params(NULL).itopk_size * degree);
	double		ratio = visited / tuples;
	double		pages = Min(ceil(ratio * info->pages), (double) Max(info->rel->pages, 1));
	double		spc_random_page_cost,
				spc_seq_page_cost;

	get_tablespace_page_costs(info->reltablespace, &spc_random_page_cost, &spc_seq_page_cost);

	/* With the worker serving searches the backend reads no index page:
	 * the worker searches its own copy, and the backend waits for the
	 * round trip. */
	Cost		search = visited * (cpu_operator_cost + cpu_index_tuple_cost) +
		(cagra_client_worker_serves_searches() ? CAGRA_WORKER_ROUND_TRIP_OPERATORS * cpu_operator_cost
		 : pages * spc_seq_page_cost);
	Selectivity filtered = clauselist_selectivity(root, info->indrestrictinfo, info->rel->relid, JOIN_INNER,
												  NULL);
	double		passing = Min(tuples, (double) cagra_max_scan_tuples) * filtered;

	/*
	 * Rows past the first search: the worker's rounds give up to
	 * CAGRA_WORKER_MAX_K of them at little more than a distance each; past
	 * those the backend's search continues, each row an expansion of a node
	 * read at random (cagra_gettuple).  With a filter, LIMIT k walks about
	 * k / selectivity rows; the planner scales the run cost by the LIMIT's
	 * fraction of the rows that pass, so the run cost per row is the mean
	 * over the rows that LIMIT walks.
	 */
	double		near_row = cpu_index_tuple_cost + degree * cpu_operator_cost;
	double		far_row = degree * (cpu_index_tuple_cost + cpu_operator_cost) + spc_random_page_cost;
	double		wanted = root->limit_tuples > 0 ? root->limit_tuples : (double) cagra_search_params(NULL).itopk_size;
	double		walked = Min(tuples, wanted / Max(filtered, 1.0 / tuples));
	double		near = Min(walked, (double) CAGRA_WORKER_MAX_K);
	double		per_row = (near * near_row + (walked - near) * far_row) / Max(walked, 1.0);

	*indexStartupCost = search;
	*indexTotalCost = search + tuples * per_row;
	if (root->limit_tuples > 0 && passing < root->limit_tuples && filtered < 1.0)
	{
		*indexStartupCost += disable_cost;
		*indexTotalCost += disable_cost;
	}
	*indexPages = pages;
}

/*
 * A filtered scan (filtered_scan.cpp): the filter's bitmap index scans, then
 * one search over the rows they allow, before the first row; each row
 * returned is a heap fetch.  The allowed rows are sent to the search (one
 * operator cost each: packing, copying, mapping to nodes), which measures
 * every one of them or traverses as cagra::plan_filtered_search says (one
 * operator and one index tuple cost per distance, as the index scan's
 * search above), plus the fixed cost of a search round: a round trip to
 * the worker or the set-up of a search in the backend, about what a bitmap
 * heap scan of some 200 rows and its sort take, which the planner prices
 * near 100 random page reads (docs/benchmarks.md, "Constants").  So a filter that passes
 * fewer rows than that is left to the bitmap heap scan and a sort.  Of the
 * allowed rows, the WHERE clause's other conditions keep rows / allowed,
 * so each row returned costs allowed / rows fetches.  Without the worker,
 * the backend finds the allowed rows' nodes by reading every node header
 * (one sequential page read per page of them, an operator cost per node),
 * which leaves the filtered scan to the plans that read the heap.
 */
bool
cagra_filtered_scan_cost(PlannerInfo *root, IndexOptInfo *info, Relation index, const CagraMetaData &meta,
						 Path *bitmap, double rows, CagraFilteredScanCost *cost)
{
	if (meta.n == 0 || cagra_index_rounds_vectors(index, &meta))
		return false;

	Cost		bitmap_cost;
	Selectivity bitmap_sel;

	cost_bitmap_tree_node(bitmap, &bitmap_cost, &bitmap_sel);

	double		tuples = Max(info->rel->tuples, 1.0);
	double		allowed = Max(1.0, Min(tuples, ceil(bitmap_sel * tuples)));
	cagra::SearchParams params = cagra_search_params(&meta);

	if (root->limit_tuples > params.itopk_size)
		params.itopk_size = (uint32) Min(root->limit_tuples, (double) CAGRA_WORKER_MAX_K);

	/* At the CPU's automatic width (2 from an entry index); the GPU's 1
	 * measures about as much, 2 * itopk_size + 32 iterations of one parent
	 * against itopk_size + 32 of two. */
	cagra::FilteredSearchPlan plan = cagra::plan_filtered_search(cagra::cpu_search_params(params,
																						  meta.entry_count > 0),
																 meta.graph_degree, (uint64) allowed,
																 meta.n, CAGRA_WORKER_MAX_K);
	double		distances = plan.exact ? allowed
		: Min((double) meta.n, (double) plan.params.max_iterations * plan.params.search_width * meta.graph_degree);
	double		spc_random_page_cost,
				spc_seq_page_cost;

	get_tablespace_page_costs(info->rel->reltablespace, &spc_random_page_cost, &spc_seq_page_cost);
	cost->allowed = allowed;
	cost->exact = plan.exact;
	cost->startup = bitmap_cost + CAGRA_SEARCH_ROUND_PAGES * spc_random_page_cost + allowed * cpu_operator_cost +
		distances * (cpu_operator_cost + cpu_index_tuple_cost);
	if (!cagra_client_worker_serves_searches())
		cost->startup += ceil((double) meta.n / Max(meta.rows_per_page, 1)) * spc_seq_page_cost +
			(double) meta.n * cpu_operator_cost;
	cost->total = cost->startup + Max(allowed, rows) * (spc_random_page_cost + cpu_tuple_cost);
	return true;
}
