/*
 * distance.cpp — squared L2, inner product and L1 kernels with run-time dispatch
 * (AVX-512, AVX2+FMA, portable), for float32 stored vectors and float16 ones,
 * the metric wrapper, vector preparation and the scalar references the tests
 * compare against.
 *
 * The library is compiled for a baseline x86-64 CPU; the wide kernels carry
 * their own target attribute and are picked once by __builtin_cpu_supports,
 * so one binary runs everywhere and uses what the CPU has.
 */
#include "distance.h"
#include "half.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define CAGRA_X86_DISPATCH 1
#include <immintrin.h>
#endif

namespace cagra {
namespace {

/* Portable kernels: eight independent partial sums so the compiler can keep
 * them in vector registers (a single running sum would serialise on it). */
float l2_portable(const float *a, const float *b, uint32_t dim)
{
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    uint32_t i = 0;
    for (; i + 8 <= dim; i += 8)
        for (int j = 0; j < 8; j++) {
            float d = a[i + j] - b[i + j];
            acc[j] += d * d;
        }
    float sum = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    for (; i < dim; i++) {
        float d = a[i] - b[i];
        sum += d * d;
    }
    return sum;
}

float ip_portable(const float *a, const float *b, uint32_t dim)
{
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    uint32_t i = 0;
    for (; i + 8 <= dim; i += 8)
        for (int j = 0; j < 8; j++)
            acc[j] += a[i + j] * b[i + j];
    float sum = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    for (; i < dim; i++)
        sum += a[i] * b[i];
    return sum;
}

float l1_portable(const float *a, const float *b, uint32_t dim)
{
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    uint32_t i = 0;
    for (; i + 8 <= dim; i += 8)
        for (int j = 0; j < 8; j++)
            acc[j] += std::fabs(a[i + j] - b[i + j]);
    float sum = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    for (; i < dim; i++)
        sum += std::fabs(a[i] - b[i]);
    return sum;
}

float l1_half_portable(const float *a, const uint16_t *b, uint32_t dim)
{
    float sum = 0.0f;
    for (uint32_t i = 0; i < dim; i++)
        sum += std::fabs(a[i] - half_to_float(b[i]));
    return sum;
}

/* Float32 query against a float16 stored vector: the same sums, each
 * stored element widened first. */
float l2_half_portable(const float *a, const uint16_t *b, uint32_t dim)
{
    float sum = 0.0f;
    for (uint32_t i = 0; i < dim; i++) {
        float d = a[i] - half_to_float(b[i]);
        sum += d * d;
    }
    return sum;
}

void to_halves_portable(const float *in, uint16_t *out, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        out[i] = float_to_half(in[i]);
}

void from_halves_portable(const uint16_t *in, float *out, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        out[i] = half_to_float(in[i]);
}

float ip_half_portable(const float *a, const uint16_t *b, uint32_t dim)
{
    float sum = 0.0f;
    for (uint32_t i = 0; i < dim; i++)
        sum += a[i] * half_to_float(b[i]);
    return sum;
}

/* Dot products of na rows of a with nb rows of b (row-major, dim wide)
 * into out (na x nb, row-major); `bt` is scratch of dim x kDotGroup floats
 * for the wide kernels, which take b kDotGroup rows at a time, transposed
 * there, so that one broadcast element of a and one load of bt feed a
 * vector of products (a blocked matrix product: each b row is read from
 * cache by every row of a). */
constexpr uint32_t kDotGroup = 32;
using DotBlock = void (*)(const float *a, uint32_t na, const float *b, uint32_t nb, uint32_t dim, float *out,
                          float *bt);

void dots_portable(const float *a, uint32_t na, const float *b, uint32_t nb, uint32_t dim, float *out, float *)
{
    for (uint32_t r = 0; r < na; r++)
        for (uint32_t c = 0; c < nb; c++)
            out[(uint64_t)r * nb + c] = ip_portable(a + (uint64_t)r * dim, b + (uint64_t)c * dim, dim);
}

using NotAbove = uint32_t (*)(const float *d, uint32_t len, const float *bounds, bool per_column, uint32_t *out);

uint32_t not_above_portable(const float *d, uint32_t len, const float *bounds, bool per_column, uint32_t *out)
{
    uint32_t count = 0;
    for (uint32_t j = 0; j < len; j++)
        if (!(d[j] > bounds[per_column ? j : 0]))
            out[count++] = j;
    return count;
}

/* b rows c0 .. c0 + w - 1 into bt (dim x kDotGroup), zero past w. */
void transpose_group(const float *b, uint32_t c0, uint32_t w, uint32_t dim, float *bt)
{
    for (uint32_t c = 0; c < kDotGroup; c++) {
        if (c >= w) {
            for (uint32_t d = 0; d < dim; d++)
                bt[(uint64_t)d * kDotGroup + c] = 0.0f;
            continue;
        }
        const float *row = b + (uint64_t)(c0 + c) * dim;
        for (uint32_t d = 0; d < dim; d++)
            bt[(uint64_t)d * kDotGroup + c] = row[d];
    }
}

#ifdef CAGRA_X86_DISPATCH

__attribute__((target("avx2,fma"))) inline float hsum256(__m256 v)
{
    __m128 lo = _mm256_castps256_ps128(v);
    __m128 hi = _mm256_extractf128_ps(v, 1);
    lo = _mm_add_ps(lo, hi);
    lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
    lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
    return _mm_cvtss_f32(lo);
}

__attribute__((target("avx2,fma"))) float l2_avx2(const float *a, const float *b, uint32_t dim)
{
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
    __m256 s2 = _mm256_setzero_ps(), s3 = _mm256_setzero_ps();
    uint32_t i = 0;
    for (; i + 32 <= dim; i += 32) {
        __m256 d0 = _mm256_sub_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i));
        __m256 d1 = _mm256_sub_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8));
        __m256 d2 = _mm256_sub_ps(_mm256_loadu_ps(a + i + 16), _mm256_loadu_ps(b + i + 16));
        __m256 d3 = _mm256_sub_ps(_mm256_loadu_ps(a + i + 24), _mm256_loadu_ps(b + i + 24));
        s0 = _mm256_fmadd_ps(d0, d0, s0);
        s1 = _mm256_fmadd_ps(d1, d1, s1);
        s2 = _mm256_fmadd_ps(d2, d2, s2);
        s3 = _mm256_fmadd_ps(d3, d3, s3);
    }
    for (; i + 8 <= dim; i += 8) {
        __m256 d = _mm256_sub_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i));
        s0 = _mm256_fmadd_ps(d, d, s0);
    }
    float sum = hsum256(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
    for (; i < dim; i++) {
        float d = a[i] - b[i];
        sum += d * d;
    }
    return sum;
}

__attribute__((target("avx2,fma"))) float ip_avx2(const float *a, const float *b, uint32_t dim)
{
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
    __m256 s2 = _mm256_setzero_ps(), s3 = _mm256_setzero_ps();
    uint32_t i = 0;
    for (; i + 32 <= dim; i += 32) {
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
        s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
        s2 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 16), _mm256_loadu_ps(b + i + 16), s2);
        s3 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 24), _mm256_loadu_ps(b + i + 24), s3);
    }
    for (; i + 8 <= dim; i += 8)
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
    float sum = hsum256(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
    for (; i < dim; i++)
        sum += a[i] * b[i];
    return sum;
}

/* GCC 12's AVX-512 headers trip -Wuninitialized on their own "undefined"
 * pass-through operands when used under a target attribute; harmless. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
__attribute__((target("avx512f"))) inline float hsum512(__m512 v)
{
    return _mm512_reduce_add_ps(v);
}
#pragma GCC diagnostic pop

/* AVX-512: the tail is one masked load, so there is no scalar loop. */
__attribute__((target("avx512f"))) float l2_avx512(const float *a, const float *b, uint32_t dim)
{
    __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
    __m512 s2 = _mm512_setzero_ps(), s3 = _mm512_setzero_ps();
    uint32_t i = 0;
    for (; i + 64 <= dim; i += 64) {
        __m512 d0 = _mm512_sub_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i));
        __m512 d1 = _mm512_sub_ps(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(b + i + 16));
        __m512 d2 = _mm512_sub_ps(_mm512_loadu_ps(a + i + 32), _mm512_loadu_ps(b + i + 32));
        __m512 d3 = _mm512_sub_ps(_mm512_loadu_ps(a + i + 48), _mm512_loadu_ps(b + i + 48));
        s0 = _mm512_fmadd_ps(d0, d0, s0);
        s1 = _mm512_fmadd_ps(d1, d1, s1);
        s2 = _mm512_fmadd_ps(d2, d2, s2);
        s3 = _mm512_fmadd_ps(d3, d3, s3);
    }
    for (; i + 16 <= dim; i += 16) {
        __m512 d = _mm512_sub_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i));
        s0 = _mm512_fmadd_ps(d, d, s0);
    }
    if (i < dim) {
        __mmask16 m = (__mmask16)((1u << (dim - i)) - 1);
        __m512 d = _mm512_sub_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i));
        s1 = _mm512_fmadd_ps(d, d, s1);
    }
    return hsum512(_mm512_add_ps(_mm512_add_ps(s0, s1), _mm512_add_ps(s2, s3)));
}

__attribute__((target("avx512f"))) float ip_avx512(const float *a, const float *b, uint32_t dim)
{
    __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
    __m512 s2 = _mm512_setzero_ps(), s3 = _mm512_setzero_ps();
    uint32_t i = 0;
    for (; i + 64 <= dim; i += 64) {
        s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), s0);
        s1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(b + i + 16), s1);
        s2 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 32), _mm512_loadu_ps(b + i + 32), s2);
        s3 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 48), _mm512_loadu_ps(b + i + 48), s3);
    }
    for (; i + 16 <= dim; i += 16)
        s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), s0);
    if (i < dim) {
        __mmask16 m = (__mmask16)((1u << (dim - i)) - 1);
        s1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i), s1);
    }
    return hsum512(_mm512_add_ps(_mm512_add_ps(s0, s1), _mm512_add_ps(s2, s3)));
}

/* L1: the absolute value by clearing the sign bit. */
__attribute__((target("avx2,fma"))) float l1_avx2(const float *a, const float *b, uint32_t dim)
{
    const __m256 mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
    uint32_t i = 0;
    for (; i + 16 <= dim; i += 16) {
        s0 = _mm256_add_ps(s0, _mm256_and_ps(mask, _mm256_sub_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i))));
        s1 = _mm256_add_ps(s1, _mm256_and_ps(mask, _mm256_sub_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8))));
    }
    for (; i + 8 <= dim; i += 8)
        s0 = _mm256_add_ps(s0, _mm256_and_ps(mask, _mm256_sub_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i))));
    float sum = hsum256(_mm256_add_ps(s0, s1));
    for (; i < dim; i++)
        sum += std::fabs(a[i] - b[i]);
    return sum;
}

__attribute__((target("avx2,fma,f16c"))) float l1_half_avx2(const float *a, const uint16_t *b, uint32_t dim)
{
    const __m256 mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
    __m256 s0 = _mm256_setzero_ps();
    uint32_t i = 0;
    for (; i + 8 <= dim; i += 8)
        s0 = _mm256_add_ps(s0, _mm256_and_ps(mask, _mm256_sub_ps(_mm256_loadu_ps(a + i),
                                                                 _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(b + i))))));
    float sum = hsum256(s0);
    for (; i < dim; i++)
        sum += std::fabs(a[i] - half_to_float(b[i]));
    return sum;
}

/* Whole vectors to and from float16, eight elements per instruction
 * (vcvtps2ph rounds to nearest even, as float_to_half does). */
__attribute__((target("avx2,f16c"))) void to_halves_f16c(const float *in, uint16_t *out, uint32_t n)
{
    uint32_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(out + i), _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++)
        out[i] = float_to_half(in[i]);
}

__attribute__((target("avx2,f16c"))) void from_halves_f16c(const uint16_t *in, float *out, uint32_t n)
{
    uint32_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(in + i))));
    for (; i < n; i++)
        out[i] = half_to_float(in[i]);
}

/* Float16 stored vectors: eight (sixteen) halves widened per step by
 * F16C's vcvtph2ps (AVX-512F has its own form), the rest masked or scalar. */
__attribute__((target("avx2,fma,f16c"))) float l2_half_avx2(const float *a, const uint16_t *b, uint32_t dim)
{
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
    uint32_t i = 0;
    for (; i + 16 <= dim; i += 16) {
        __m256 d0 = _mm256_sub_ps(_mm256_loadu_ps(a + i),
                                  _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(b + i))));
        __m256 d1 = _mm256_sub_ps(_mm256_loadu_ps(a + i + 8),
                                  _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(b + i + 8))));
        s0 = _mm256_fmadd_ps(d0, d0, s0);
        s1 = _mm256_fmadd_ps(d1, d1, s1);
    }
    for (; i + 8 <= dim; i += 8) {
        __m256 d = _mm256_sub_ps(_mm256_loadu_ps(a + i), _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(b + i))));
        s0 = _mm256_fmadd_ps(d, d, s0);
    }
    float sum = hsum256(_mm256_add_ps(s0, s1));
    for (; i < dim; i++) {
        float d = a[i] - half_to_float(b[i]);
        sum += d * d;
    }
    return sum;
}

__attribute__((target("avx2,fma,f16c"))) float ip_half_avx2(const float *a, const uint16_t *b, uint32_t dim)
{
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
    uint32_t i = 0;
    for (; i + 16 <= dim; i += 16) {
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(b + i))), s0);
        s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8),
                             _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(b + i + 8))), s1);
    }
    for (; i + 8 <= dim; i += 8)
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(b + i))), s0);
    float sum = hsum256(_mm256_add_ps(s0, s1));
    for (; i < dim; i++)
        sum += a[i] * half_to_float(b[i]);
    return sum;
}

/* GCC 12's _mm512_cvtph_ps passes _mm512_undefined_ps() as its pass-through
 * operand, which -Wmaybe-uninitialized reports; the mask takes every lane. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
__attribute__((target("avx512f"))) float l2_half_avx512(const float *a, const uint16_t *b, uint32_t dim)
{
    __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
    uint32_t i = 0;
    for (; i + 32 <= dim; i += 32) {
        __m512 d0 = _mm512_sub_ps(_mm512_loadu_ps(a + i),
                                  _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(b + i))));
        __m512 d1 = _mm512_sub_ps(_mm512_loadu_ps(a + i + 16),
                                  _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(b + i + 16))));
        s0 = _mm512_fmadd_ps(d0, d0, s0);
        s1 = _mm512_fmadd_ps(d1, d1, s1);
    }
    for (; i + 16 <= dim; i += 16) {
        __m512 d = _mm512_sub_ps(_mm512_loadu_ps(a + i),
                                 _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(b + i))));
        s0 = _mm512_fmadd_ps(d, d, s0);
    }
    if (i < dim) {
        /* the tail through a zeroed copy: masked 16-bit loads need AVX-512BW */
        __mmask16 m = (__mmask16)((1u << (dim - i)) - 1);
        alignas(32) uint16_t tail[16] = {0};
        for (uint32_t j = 0; i + j < dim; j++)
            tail[j] = b[i + j];
        __m512 d = _mm512_sub_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)tail)));
        s1 = _mm512_fmadd_ps(d, d, s1);
    }
    return hsum512(_mm512_add_ps(s0, s1));
}

__attribute__((target("avx512f"))) float ip_half_avx512(const float *a, const uint16_t *b, uint32_t dim)
{
    __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
    uint32_t i = 0;
    for (; i + 32 <= dim; i += 32) {
        s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(b + i))), s0);
        s1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16),
                             _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(b + i + 16))), s1);
    }
    for (; i + 16 <= dim; i += 16)
        s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(b + i))), s0);
    if (i < dim) {
        __mmask16 m = (__mmask16)((1u << (dim - i)) - 1);
        alignas(32) uint16_t tail[16] = {0};
        for (uint32_t j = 0; i + j < dim; j++)
            tail[j] = b[i + j];
        s1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)tail)),
                             s1);
    }
    return hsum512(_mm512_add_ps(s0, s1));
}
#pragma GCC diagnostic pop

/* Most rows of a kNN tile have no candidate: a mask per vector, and the
 * positions only where it is not empty. */
__attribute__((target("avx512f"))) uint32_t not_above_avx512(const float *d, uint32_t len, const float *bounds,
                                                             bool per_column, uint32_t *out)
{
    if (len == 0)
        return 0;
    uint32_t count = 0;
    const __m512 one_bound = _mm512_set1_ps(per_column ? 0.0f : bounds[0]);
    const __m512i step = _mm512_set1_epi32(16);
    __m512i idx = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    for (uint32_t j = 0; j < len; j += 16, idx = _mm512_add_epi32(idx, step)) {
        const __mmask16 live = (__mmask16)(len - j >= 16 ? 0xFFFFu : (1u << (len - j)) - 1);
        const __m512 v = _mm512_maskz_loadu_ps(live, d + j);
        const __m512 b = per_column ? _mm512_maskz_loadu_ps(live, bounds + j) : one_bound;
        const __mmask16 m = _mm512_mask_cmp_ps_mask(live, v, b, _CMP_NGT_UQ);
        if (m) {
            /* compress in a register: the memory form is slow on some CPUs */
            _mm512_storeu_si512(out + count, _mm512_maskz_compress_epi32(m, idx));
            count += (uint32_t)__builtin_popcount(m);
        }
    }
    return count;
}

__attribute__((target("avx2"))) uint32_t not_above_avx2(const float *d, uint32_t len, const float *bounds,
                                                        bool per_column, uint32_t *out)
{
    if (len == 0)
        return 0;
    uint32_t count = 0, j = 0;
    const __m256 one_bound = _mm256_set1_ps(per_column ? 0.0f : bounds[0]);
    for (; j + 8 <= len; j += 8) {
        const __m256 b = per_column ? _mm256_loadu_ps(bounds + j) : one_bound;
        uint32_t m = (uint32_t)_mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(d + j), b, _CMP_NGT_UQ));
        for (; m; m &= m - 1)
            out[count++] = j + (uint32_t)__builtin_ctz(m);
    }
    for (; j < len; j++)
        if (!(d[j] > bounds[per_column ? j : 0]))
            out[count++] = j;
    return count;
}

#endif /* CAGRA_X86_DISPATCH */

using ToHalves = void (*)(const float *, uint16_t *, uint32_t);
using FromHalves = void (*)(const uint16_t *, float *, uint32_t);

/* The wide dot blocks: four rows of a against a group of 32 b rows, eight
 * accumulators (two of 16 lanes, or four of 8, per row) so the fused
 * multiply-adds of one step do not wait for each other. */
__attribute__((target("avx512f"))) void dots_avx512(const float *a, uint32_t na, const float *b, uint32_t nb,
                                                    uint32_t dim, float *out, float *bt)
{
    for (uint32_t c0 = 0; c0 < nb; c0 += kDotGroup) {
        const uint32_t w = std::min(kDotGroup, nb - c0);
        transpose_group(b, c0, w, dim, bt);
        const __mmask16 m0 = (__mmask16)(w >= 16 ? 0xFFFFu : (1u << w) - 1);
        const __mmask16 m1 = (__mmask16)(w >= 32 ? 0xFFFFu : w > 16 ? (1u << (w - 16)) - 1 : 0u);
        uint32_t r = 0;
        for (; r + 4 <= na; r += 4) {
            const float *a0 = a + (uint64_t)r * dim;
            __m512 s[8];
            for (auto &x : s)
                x = _mm512_setzero_ps();
            for (uint32_t d = 0; d < dim; d++) {
                const __m512 v0 = _mm512_loadu_ps(bt + (uint64_t)d * kDotGroup);
                const __m512 v1 = _mm512_loadu_ps(bt + (uint64_t)d * kDotGroup + 16);
                for (uint32_t i = 0; i < 4; i++) {
                    const __m512 x = _mm512_set1_ps(a0[(uint64_t)i * dim + d]);
                    s[2 * i] = _mm512_fmadd_ps(x, v0, s[2 * i]);
                    s[2 * i + 1] = _mm512_fmadd_ps(x, v1, s[2 * i + 1]);
                }
            }
            for (uint32_t i = 0; i < 4; i++) {
                float *o = out + (uint64_t)(r + i) * nb + c0;
                _mm512_mask_storeu_ps(o, m0, s[2 * i]);
                _mm512_mask_storeu_ps(o + 16, m1, s[2 * i + 1]);
            }
        }
        for (; r < na; r++) {
            const float *a0 = a + (uint64_t)r * dim;
            __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
            for (uint32_t d = 0; d < dim; d++) {
                const __m512 x = _mm512_set1_ps(a0[d]);
                s0 = _mm512_fmadd_ps(x, _mm512_loadu_ps(bt + (uint64_t)d * kDotGroup), s0);
                s1 = _mm512_fmadd_ps(x, _mm512_loadu_ps(bt + (uint64_t)d * kDotGroup + 16), s1);
            }
            float *o = out + (uint64_t)r * nb + c0;
            _mm512_mask_storeu_ps(o, m0, s0);
            _mm512_mask_storeu_ps(o + 16, m1, s1);
        }
    }
}

__attribute__((target("avx2,fma"))) void dots_avx2(const float *a, uint32_t na, const float *b, uint32_t nb,
                                                   uint32_t dim, float *out, float *bt)
{
    float tile[4 * 16];
    for (uint32_t c0 = 0; c0 < nb; c0 += kDotGroup) {
        const uint32_t w = std::min(kDotGroup, nb - c0);
        transpose_group(b, c0, w, dim, bt);
        /* sixteen ymm registers: four rows against half the group at a time */
        for (uint32_t h = 0; h < w; h += 16) {
            const uint32_t cols = std::min(16u, w - h);
            for (uint32_t r = 0; r < na; r += 4) {
                const uint32_t rows = std::min(4u, na - r);
                const float *ar[4];
                for (uint32_t i = 0; i < 4; i++)
                    ar[i] = a + (uint64_t)(r + std::min(i, rows - 1)) * dim; /* a short block repeats its last row */
                __m256 s[8];
                for (auto &x : s)
                    x = _mm256_setzero_ps();
                for (uint32_t d = 0; d < dim; d++) {
                    const float *v = bt + (uint64_t)d * kDotGroup + h;
                    const __m256 v0 = _mm256_loadu_ps(v), v1 = _mm256_loadu_ps(v + 8);
                    for (uint32_t i = 0; i < 4; i++) {
                        const __m256 x = _mm256_set1_ps(ar[i][d]);
                        s[2 * i] = _mm256_fmadd_ps(x, v0, s[2 * i]);
                        s[2 * i + 1] = _mm256_fmadd_ps(x, v1, s[2 * i + 1]);
                    }
                }
                for (uint32_t i = 0; i < rows; i++) {
                    _mm256_storeu_ps(tile + 16 * i, s[2 * i]);
                    _mm256_storeu_ps(tile + 16 * i + 8, s[2 * i + 1]);
                    std::copy(tile + 16 * i, tile + 16 * i + cols, out + (uint64_t)(r + i) * nb + c0 + h);
                }
            }
        }
    }
}

struct Kernels {
    PairKernel l2;
    PairKernel ip;
    PairKernel l1;
    HalfPairKernel l2_half;
    HalfPairKernel ip_half;
    HalfPairKernel l1_half;
    ToHalves to_halves;
    FromHalves from_halves;
    DotBlock dots;
    NotAbove not_above;
    const char *name;
};

Kernels choose_kernels()
{
#ifdef CAGRA_X86_DISPATCH
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f"))
        return {l2_avx512,      ip_avx512,      l1_avx2,        l2_half_avx512,   ip_half_avx512,
                l1_half_avx2,   to_halves_f16c, from_halves_f16c, dots_avx512,    not_above_avx512, "avx512"};
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
        if (__builtin_cpu_supports("f16c"))
            return {l2_avx2,      ip_avx2,        l1_avx2,          l2_half_avx2, ip_half_avx2,
                    l1_half_avx2, to_halves_f16c, from_halves_f16c, dots_avx2,    not_above_avx2, "avx2"};
        return {l2_avx2,          ip_avx2,            l1_avx2,              l2_half_portable, ip_half_portable,
                l1_half_portable, to_halves_portable, from_halves_portable, dots_avx2,        not_above_avx2, "avx2"};
    }
#endif
    return {l2_portable,      ip_portable,        l1_portable,          l2_half_portable, ip_half_portable,
            l1_half_portable, to_halves_portable, from_halves_portable, dots_portable,    not_above_portable, "portable"};
}

const Kernels &kernels()
{
    static const Kernels k = choose_kernels();
    return k;
}

} // namespace

float l2_squared(const float *a, const float *b, uint32_t dim)
{
    return kernels().l2(a, b, dim);
}

float inner_product(const float *a, const float *b, uint32_t dim)
{
    return kernels().ip(a, b, dim);
}

float distance(Metric metric, const float *a, const float *b, uint32_t dim)
{
    switch (metric) {
    case Metric::L2:
        return kernels().l2(a, b, dim);
    case Metric::InnerProduct:
        return -kernels().ip(a, b, dim);
    case Metric::Cosine:
        return 1.0f - kernels().ip(a, b, dim);
    case Metric::L1:
        return kernels().l1(a, b, dim);
    }
    return 0.0f;
}

uint32_t positions_not_above(const float *d, uint32_t len, const float *bounds, bool per_column, uint32_t *out)
{
    return kernels().not_above(d, len, bounds, per_column, out);
}

void distance_block(Metric metric, const float *a, uint32_t na, const float *b, uint32_t nb, uint32_t dim,
                    float *out)
{
    if (metric == Metric::L1) {
        for (uint32_t r = 0; r < na; r++)
            for (uint32_t c = 0; c < nb; c++)
                out[(uint64_t)r * nb + c] = kernels().l1(a + (uint64_t)r * dim, b + (uint64_t)c * dim, dim);
        return;
    }
    thread_local std::vector<float> bt, norms;
    bt.resize((uint64_t)dim * kDotGroup);
    kernels().dots(a, na, b, nb, dim, out, bt.data());
    const uint64_t cells = (uint64_t)na * nb;
    if (metric == Metric::InnerProduct) {
        for (uint64_t i = 0; i < cells; i++)
            out[i] = -out[i];
        return;
    }
    if (metric == Metric::Cosine) {
        for (uint64_t i = 0; i < cells; i++)
            out[i] = 1.0f - out[i];
        return;
    }
    /* |a|^2 + |b|^2 - 2 a.b, never below zero (rounding) */
    norms.resize((uint64_t)na + nb);
    for (uint32_t r = 0; r < na; r++)
        norms[r] = kernels().ip(a + (uint64_t)r * dim, a + (uint64_t)r * dim, dim);
    for (uint32_t c = 0; c < nb; c++)
        norms[na + c] = kernels().ip(b + (uint64_t)c * dim, b + (uint64_t)c * dim, dim);
    for (uint32_t r = 0; r < na; r++)
        for (uint32_t c = 0; c < nb; c++) {
            float &o = out[(uint64_t)r * nb + c];
            o = std::max(0.0f, norms[r] + norms[na + c] - 2.0f * o);
        }
}

float distance_half(Metric metric, const float *a, const uint16_t *b, uint32_t dim)
{
    switch (metric) {
    case Metric::L2:
        return kernels().l2_half(a, b, dim);
    case Metric::InnerProduct:
        return -kernels().ip_half(a, b, dim);
    case Metric::Cosine:
        return 1.0f - kernels().ip_half(a, b, dim);
    case Metric::L1:
        return kernels().l1_half(a, b, dim);
    }
    return 0.0f;
}

void floats_to_halves(const float *in, uint16_t *out, uint32_t n)
{
    kernels().to_halves(in, out, n);
}

void halves_to_floats(const uint16_t *in, float *out, uint32_t n)
{
    kernels().from_halves(in, out, n);
}

/* A metric's sign and offset around its kernel, for either row type. */
template <class Row>
static MetricKernelFor<Row> kernel_of(Metric metric, RowKernel<Row> l2, RowKernel<Row> ip, RowKernel<Row> l1)
{
    switch (metric) {
    case Metric::L2:
        break;
    case Metric::InnerProduct:
        return {ip, -1.0f, 0.0f};
    case Metric::Cosine:
        return {ip, -1.0f, 1.0f};
    case Metric::L1:
        return {l1, 1.0f, 0.0f};
    }
    return {l2, 1.0f, 0.0f};
}

MetricKernel metric_kernel(Metric metric)
{
    const auto &k = kernels();
    return kernel_of<float>(metric, k.l2, k.ip, k.l1);
}

HalfMetricKernel half_metric_kernel(Metric metric)
{
    const auto &k = kernels();
    return kernel_of<uint16_t>(metric, k.l2_half, k.ip_half, k.l1_half);
}

void prepare_vector(Metric metric, const float *in, float *out, uint32_t dim)
{
    if (metric != Metric::Cosine) {
        if (out != in)
            std::memcpy(out, in, (size_t)dim * sizeof(float));
        return;
    }
    /* The norm in double: a float sum of squares can overflow for large
     * components that are themselves finite.  Eight partial sums, not one
     * chain of dependent additions (1,024 dimensions: 1.3 -> 0.9 us). */
    double part[8] = {0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0};
    uint32_t i = 0;
    for (; i + 8 <= dim; i += 8)
        for (uint32_t j = 0; j < 8; j++)
            part[j] += (double)in[i + j] * (double)in[i + j];
    for (; i < dim; i++)
        part[0] += (double)in[i] * (double)in[i];
    const double norm2 = ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
    double scale = norm2 > 0.0 ? 1.0 / std::sqrt(norm2) : 0.0;
    for (i = 0; i < dim; i++)
        out[i] = (float)(in[i] * scale);
}

const char *distance_kernel_name()
{
    return kernels().name;
}

namespace reference {

float l2_squared(const float *a, const float *b, uint32_t dim)
{
    double sum = 0.0;
    for (uint32_t i = 0; i < dim; i++) {
        double d = (double)a[i] - (double)b[i];
        sum += d * d;
    }
    return (float)sum;
}

float inner_product(const float *a, const float *b, uint32_t dim)
{
    double sum = 0.0;
    for (uint32_t i = 0; i < dim; i++)
        sum += (double)a[i] * (double)b[i];
    return (float)sum;
}

float l1_distance(const float *a, const float *b, uint32_t dim)
{
    double sum = 0.0;
    for (uint32_t i = 0; i < dim; i++)
        sum += std::fabs((double)a[i] - (double)b[i]);
    return (float)sum;
}

float cosine_distance(const float *a, const float *b, uint32_t dim)
{
    double ab = 0.0, aa = 0.0, bb = 0.0;
    for (uint32_t i = 0; i < dim; i++) {
        ab += (double)a[i] * (double)b[i];
        aa += (double)a[i] * (double)a[i];
        bb += (double)b[i] * (double)b[i];
    }
    if (aa == 0.0 || bb == 0.0)
        return 1.0f;
    return (float)(1.0 - ab / (std::sqrt(aa) * std::sqrt(bb)));
}

} // namespace reference
} // namespace cagra
