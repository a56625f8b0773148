/*
 * params.cpp — validation of build parameters, data and search parameters.
 * Every message says what is wrong and the hint says what to do, so the
 * PostgreSQL side can pass them on unchanged (errmsg / errhint).
 */
#include <algorithm>
#include <cmath>
#include <string>

#include "params.h"
#include "search_plan.h"

namespace cagra {
namespace {

std::string num(uint64_t v)
{
    return std::to_string(v);
}

[[noreturn]] void bad_param(const std::string &msg, const std::string &hint)
{
    throw Error(ErrorCode::InvalidParameter, msg, hint);
}

} // namespace

void validate_build_params(const BuildParams &p)
{
    if (p.graph_degree < kMinDegree)
        bad_param("graph_degree must be at least " + num(kMinDegree) + ", got " + num(p.graph_degree),
                  "Use a graph_degree between " + num(kMinDegree) + " and " + num(kMaxDegree) +
                      "; 32 or 64 are typical.");
    if (p.graph_degree > kMaxDegree)
        bad_param("graph_degree must be at most " + num(kMaxDegree) + ", got " + num(p.graph_degree),
                  "Use a graph_degree between " + num(kMinDegree) + " and " + num(kMaxDegree) +
                      "; 32 or 64 are typical.");
    if (p.intermediate_degree > kMaxDegree)
        bad_param("intermediate_graph_degree must be at most " + num(kMaxDegree) + ", got " +
                      num(p.intermediate_degree),
                  "Use an intermediate_graph_degree of about twice graph_degree.");
    if (p.graph_degree > p.intermediate_degree)
        bad_param("graph_degree (" + num(p.graph_degree) + ") must not exceed intermediate_graph_degree (" +
                      num(p.intermediate_degree) + ")",
                  "Raise intermediate_graph_degree or lower graph_degree; about twice graph_degree is typical.");
    if (p.nn_descent_max_iterations < 1)
        bad_param("nn_descent_max_iterations must be at least 1", "About 20 iterations are enough for most data sets.");
    if (!std::isfinite(p.nn_descent_termination) || p.nn_descent_termination < 0.0f || p.nn_descent_termination >= 1.0f)
        bad_param("nn_descent_termination must be in [0, 1), got " + std::to_string(p.nn_descent_termination),
                  "0.15 (the default) stops NN-descent when fewer than 15% of the kNN entries changed in an iteration; "
                  "smaller values iterate longer.");
    if (p.threads < 1)
        bad_param("build threads must be at least 1", "");
}

void validate_dataset(const DatasetView &data, uint32_t max_dim)
{
    if (data.dim == 0)
        throw Error(ErrorCode::InvalidData, "vector dimension must be at least 1", "");
    if (data.dim > max_dim)
        throw Error(ErrorCode::InvalidData,
                    "vectors of " + num(data.dim) + " dimensions exceed the limit of " + num(max_dim),
                    "Reduce the dimension, for example by a projection, to at most " + num(max_dim) + ".");
    if (data.n == 0)
        throw Error(ErrorCode::InvalidData, "cannot build a graph over 0 vectors", "");
    if (data.n >= kInvalidNode)
        throw Error(ErrorCode::InvalidData,
                    "too many vectors for one graph: " + num(data.n) + " (at most " + num(kInvalidNode - 1) + ")", "");
    if (!data.data)
        throw Error(ErrorCode::InvalidData, "no vector data given", "");
    for (uint64_t i = 0; i < data.n; i++) {
        const float *row = data.row(i);
        for (uint32_t j = 0; j < data.dim; j++) {
            if (!std::isfinite(row[j]))
                throw Error(ErrorCode::InvalidData,
                            std::string("vector ") + num(i) + " holds " + (std::isnan(row[j]) ? "NaN" : "infinity") +
                                " at position " + num(j),
                            "Vectors with NaN or infinite components cannot be indexed.");
        }
    }
}

uint32_t auto_max_iterations(const SearchParams &params)
{
    /* an automatic width not yet resolved counts as 1 */
    return max_iterations_for(params.itopk_size, params.search_width, 0);
}

FilteredSearchPlan plan_filtered_search(const SearchParams &params, uint32_t degree, uint64_t passing, uint64_t n,
                                        uint32_t max_itopk)
{
    FilteredSearchPlan plan;
    plan.params = params;
    /* candidates a traversal would keep to meet itopk_size passing nodes;
     * beyond 2^30 the iteration count would not fit (n < 2^32 anyway) */
    const uint64_t wanted =
        passing ? std::min<uint64_t>({n, ((uint64_t)params.itopk_size * n + passing - 1) / passing, 1u << 30}) : 0;
    plan.params.itopk_size = (uint32_t)std::max<uint64_t>(params.itopk_size, std::min<uint64_t>(wanted, max_itopk));
    if (params.max_iterations == 0) {
        SearchParams widened = params;
        widened.itopk_size = (uint32_t)std::max<uint64_t>(params.itopk_size, wanted);
        plan.params.max_iterations = auto_max_iterations(widened);
    }
    const uint32_t width = plan.params.search_width ? plan.params.search_width : 1;
    plan.exact = passing <= (uint64_t)width * degree * plan.params.max_iterations;
    return plan;
}

void validate_search_params(const SearchParams &p, uint32_t k)
{
    if (p.itopk_size < 1)
        bad_param("itopk_size must be at least 1",
                  "itopk_size is the number of candidates a search keeps; 64 is a good start.");
    if (p.itopk_size > kMaxItopk)
        bad_param("itopk_size must be at most " + num(kMaxItopk) + ", got " + num(p.itopk_size),
                  "Larger itopk_size values raise recall and cost; recall rarely improves beyond 512.");
    /* search_width 0 is automatic (types.h): resolved by the search, never
     * above itopk_size. */
    if (p.search_width > kMaxSearchWidth)
        bad_param("search_width must be at most " + num(kMaxSearchWidth) + ", got " + num(p.search_width),
                  "1 to 8 parents per iteration are typical.");
    if (p.search_width != kAutoSearchWidth && p.search_width > p.itopk_size)
        bad_param("search_width (" + num(p.search_width) + ") must not exceed itopk_size (" + num(p.itopk_size) + ")",
                  "");
    if (p.random_entries > kMaxRandomEntries)
        bad_param("random_entries must be at most " + num(kMaxRandomEntries) + ", got " + num(p.random_entries), "");
    if (k > p.itopk_size)
        bad_param("k (" + num(k) + ") must not exceed itopk_size (" + num(p.itopk_size) + ")",
                  "Raise itopk_size to at least the number of results wanted.");
}

} // namespace cagra
