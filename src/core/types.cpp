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
    }
    return "unknown";
}

} // namespace cagra
