/*
 * half.h — IEEE 754 half precision (binary16) in plain C++: what float16
 * index storage and pgvector's halfvec elements are.  The distance kernels
 * widen halves with F16C where the CPU has it; these are the portable
 * conversions (and the reference the tests check those against).
 */
#pragma once

#include <cstdint>
#include <cstring>

namespace cagra {

/* The largest finite half; floats of magnitude 65520 and beyond round to infinity. */
constexpr float kHalfMax = 65504.0f;
constexpr float kHalfOverflow = 65520.0f;

/* Relative rounding error of float_to_half on the normal range (unit
 * roundoff 2^-11); an element stored as a subnormal half (or as zero) is off
 * by at most half the subnormal spacing, 2^-25, absolute. */
constexpr double kHalfUnitRoundoff = 1.0 / 2048.0;
constexpr double kHalfSubnormalRoundoff = 1.0 / 33554432.0;

inline float half_to_float(uint16_t h)
{
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exponent = (h >> 10) & 0x1Fu;
    uint32_t mantissa = h & 0x3FFu;
    uint32_t bits;
    if (exponent == 0x1F) {
        bits = sign | 0x7F800000u | (mantissa << 13); /* infinity, NaN */
    } else if (exponent != 0) {
        bits = sign | ((exponent + 112) << 23) | (mantissa << 13);
    } else if (mantissa == 0) {
        bits = sign; /* zero */
    } else {
        /* subnormal: shift the mantissa up until it is normal */
        exponent = 113;
        while (!(mantissa & 0x400u)) {
            mantissa <<= 1;
            exponent--;
        }
        bits = sign | (exponent << 23) | ((mantissa & 0x3FFu) << 13);
    }
    float f;
    std::memcpy(&f, &bits, sizeof f);
    return f;
}

/* The nearest half (ties to even), as vcvtps2ph rounds by default;
 * magnitudes from kHalfOverflow on give infinity, NaN stays NaN. */
inline uint16_t float_to_half(float f)
{
    uint32_t bits;
    std::memcpy(&bits, &f, sizeof bits);
    const uint16_t sign = (uint16_t)((bits >> 16) & 0x8000u);
    const uint32_t abs = bits & 0x7FFFFFFFu;

    if (abs >= 0x7F800000u) /* infinity or NaN */
        return (uint16_t)(sign | 0x7C00u | (abs > 0x7F800000u ? 0x200u : 0u));
    if (abs >= 0x477FF000u) /* >= 65520: beyond the largest half once rounded */
        return (uint16_t)(sign | 0x7C00u);
    if (abs < 0x38800000u) {
        /* below the smallest normal half (2^-14): a subnormal or zero, in
         * units of 2^-24, rounded to nearest even */
        if (abs < 0x33000000u) /* below 2^-25: rounds to zero */
            return sign;
        const uint32_t exponent = abs >> 23;
        const uint32_t mantissa = (abs & 0x7FFFFFu) | 0x800000u;
        const uint32_t shift = 126 - exponent; /* 14 .. 24 */
        uint32_t half = mantissa >> shift;
        const uint32_t rest = mantissa & ((1u << shift) - 1);
        const uint32_t midpoint = 1u << (shift - 1);
        if (rest > midpoint || (rest == midpoint && (half & 1u)))
            half++;
        return (uint16_t)(sign | half);
    }
    /* normal: rebias the exponent, round the 13 dropped mantissa bits (a
     * carry into the exponent is the right result) */
    uint32_t half = ((abs - 0x38000000u) >> 13);
    const uint32_t rest = abs & 0x1FFFu;
    if (rest > 0x1000u || (rest == 0x1000u && (half & 1u)))
        half++;
    return (uint16_t)(sign | half);
}

} // namespace cagra
