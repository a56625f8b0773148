/*
 * huge_pages.h — storage for large arrays read at random (the vectors a
 * search measures) on transparent huge pages.
 *
 * A search reads rows at random over arrays of hundreds of MB; with 4 KiB
 * pages nearly every row read also misses the TLB (a 200 MB array spans
 * 51,200 pages, far more than the TLB holds; in 2 MiB pages: 100), which
 * huge pages avoid (docs/benchmarks.md, "Constants").
 */
#pragma once

#include <cstddef>
#include <new>
#include <vector>

namespace cagra {

namespace detail {
/* At least `bytes`: 2 MiB-aligned and advised for huge pages (madvise
 * MADV_HUGEPAGE, before anything touches it, so it is faulted in as huge
 * pages) when 2 MiB or more, else aligned to a cache line.  nullptr when
 * out of memory; free with free_for_random_reads. */
void *allocate_for_random_reads(size_t bytes);
void free_for_random_reads(void *p);
} // namespace detail

/* Allocator of such storage, for a std::vector (HugePageVector).  Rows also
 * start on cache lines: a std::vector's own large allocations start 16
 * bytes past a page, so a 1 KiB row spans 17 cache lines.  Huge pages are
 * a hint: where the system has them off ("never"), or off Linux, the
 * memory is plain pages. */
template <class T>
struct HugePageAllocator {
    using value_type = T;
    HugePageAllocator() = default;
    template <class U>
    HugePageAllocator(const HugePageAllocator<U> &)
    {}
    T *allocate(size_t n)
    {
        void *p = detail::allocate_for_random_reads(n * sizeof(T));
        if (!p)
            throw std::bad_alloc();
        return static_cast<T *>(p);
    }
    void deallocate(T *p, size_t) { detail::free_for_random_reads(p); }
};
template <class T, class U>
bool operator==(const HugePageAllocator<T> &, const HugePageAllocator<U> &)
{
    return true;
}
template <class T, class U>
bool operator!=(const HugePageAllocator<T> &, const HugePageAllocator<U> &)
{
    return false;
}

template <class T>
using HugePageVector = std::vector<T, HugePageAllocator<T>>;

} // namespace cagra
