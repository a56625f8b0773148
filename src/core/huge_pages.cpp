/*
 * huge_pages.cpp — see huge_pages.h.
 */
#include "huge_pages.h"

#include <cstdint>
#include <cstdlib>

#ifdef __linux__
#include <sys/mman.h>
#endif

namespace cagra {
namespace detail {

namespace {
constexpr size_t kHugePageBytes = size_t(2) << 20;
constexpr size_t kCacheLineBytes = 64;
} // namespace

void *allocate_for_random_reads(size_t bytes)
{
    const size_t align = bytes >= kHugePageBytes ? kHugePageBytes : kCacheLineBytes;
    const size_t rounded = (bytes + align - 1) / align * align; /* aligned_alloc wants a multiple */
    void *p = std::aligned_alloc(align, rounded ? rounded : align);
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    if (p && align == kHugePageBytes)
        madvise(p, rounded, MADV_HUGEPAGE); /* a hint: plain pages if it fails */
#endif
    return p;
}

void free_for_random_reads(void *p)
{
    std::free(p);
}

} // namespace detail
} // namespace cagra
