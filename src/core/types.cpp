/*
 * types.cpp — the few out-of-line pieces of the shared vocabulary.
 */
#include "types.h"

namespace cagra {

const char *metric_name(Metric m)
{
    switch (m) {
    case Metric::L2:
        return "l2";
    case Metric::InnerProduct:
        return "inner_product";
    case Metric::Cosine:
        return "cosine";
    case Metric::L1:
        return "l1";
    }
    return "unknown";
}

} // namespace cagra
