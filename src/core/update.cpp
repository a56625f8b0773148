/*
 * update.cpp — applying insert and repair plans to an in-memory graph.
 */
#include "update.h"

namespace cagra {

void apply_insert(Graph &g, const InsertPlan &plan)
{
    if (plan.row.size() != g.degree)
        throw Error(ErrorCode::InvalidParameter, "insert plan row has " + std::to_string(plan.row.size()) +
                                                     " entries, the graph degree is " + std::to_string(g.degree));
    const uint64_t n = g.size();
    for (const EdgeUpdate &u : plan.updates)
        if (u.node >= n || u.slot >= g.degree)
            throw Error(ErrorCode::InvalidParameter, "insert plan updates a row or slot outside the graph");
    g.edges.insert(g.edges.end(), plan.row.begin(), plan.row.end());
    for (const EdgeUpdate &u : plan.updates)
        g.row(u.node)[u.slot] = u.target;
}

void apply_repair(Graph &g, const std::vector<RowRewrite> &rewrites)
{
    for (const RowRewrite &rw : rewrites)
        if (rw.node >= g.size() || rw.row.size() != g.degree)
            throw Error(ErrorCode::InvalidParameter, "repair plan does not fit the graph");
    for (const RowRewrite &rw : rewrites)
        std::copy(rw.row.begin(), rw.row.end(), g.row(rw.node));
}

} // namespace cagra
