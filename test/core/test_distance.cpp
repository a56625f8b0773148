/*
 * test_distance.cpp — the dispatched kernels against the scalar references
 * at many dimensions, cosine preparation and the zero vector.
 */
#include <gtest/gtest.h>

#include <cmath>

#include <random>

#include "distance.h"
#include "format.h"

using namespace cagra;

namespace {

std::vector<float> random_vec(uint32_t dim, std::mt19937 &rng)
{
    std::uniform_real_distribution<float> u(-2.0f, 2.0f);
    std::vector<float> v(dim);
    for (auto &x : v)
        x = u(rng);
    return v;
}

/* Float sums of `dim` terms of size up to ~4 drift from the double
 * reference by roughly sqrt(dim) ulps of the magnitude. */
void expect_close(float got, float want, float scale, uint32_t dim)
{
    EXPECT_NEAR(got, want, 1e-5f * scale + 1e-6f * std::sqrt((float)dim) * scale) << "dim " << dim;
}

} // namespace

TEST(Distance, KernelsMatchReferenceAtManyDimensions)
{
    std::mt19937 rng(7);
    std::vector<uint32_t> dims;
    for (uint32_t d = 1; d <= 70; d++)
        dims.push_back(d);
    for (uint32_t d : {95u, 127u, 128u, 129u, 255u, 256u, 257u, 383u, 768u, 1001u, 1536u, 2000u, 2001u, 4095u, 4096u,
                       9999u, 15999u, 16000u})
        dims.push_back(d);
    for (uint32_t d : dims) {
        /* Offset the arrays so unaligned loads are exercised too. */
        std::vector<float> a = random_vec(d + 1, rng), b = random_vec(d + 3, rng);
        const float *pa = a.data() + 1, *pb = b.data() + 3 - 2;
        float l2r = reference::l2_squared(pa, pb, d);
        float ipr = reference::inner_product(pa, pb, d);
        float scale = (float)d * 4.0f;
        expect_close(l2_squared(pa, pb, d), l2r, scale, d);
        expect_close(inner_product(pa, pb, d), ipr, scale, d);
        expect_close(distance(Metric::L2, pa, pb, d), l2r, scale, d);
        expect_close(distance(Metric::InnerProduct, pa, pb, d), -ipr, scale, d);
        MetricKernel mk = metric_kernel(Metric::InnerProduct);
        expect_close(mk(pa, pb, d), -ipr, scale, d);

        std::vector<float> na(d), nb(d);
        prepare_vector(Metric::Cosine, pa, na.data(), d);
        prepare_vector(Metric::Cosine, pb, nb.data(), d);
        EXPECT_NEAR(distance(Metric::Cosine, na.data(), nb.data(), d), reference::cosine_distance(pa, pb, d), 1e-4f)
            << "dim " << d;
    }
}

TEST(Distance, ExactOnSmallIntegers)
{
    float a[5] = {1, 2, 3, 4, 5}, b[5] = {5, 4, 3, 2, 1};
    EXPECT_EQ(l2_squared(a, b, 5), 16 + 4 + 0 + 4 + 16);
    EXPECT_EQ(inner_product(a, b, 5), 5 + 8 + 9 + 8 + 5);
    EXPECT_EQ(distance(Metric::InnerProduct, a, b, 5), -35.0f);
    EXPECT_EQ(l2_squared(a, a, 5), 0.0f);
}

TEST(Distance, CosineZeroVectorIsDistanceOne)
{
    std::vector<float> zero(33, 0.0f), v(33, 1.5f), pz(33), pv(33);
    prepare_vector(Metric::Cosine, zero.data(), pz.data(), 33);
    prepare_vector(Metric::Cosine, v.data(), pv.data(), 33);
    for (float x : pz)
        EXPECT_EQ(x, 0.0f);
    EXPECT_FLOAT_EQ(distance(Metric::Cosine, pz.data(), pv.data(), 33), 1.0f);
    EXPECT_FLOAT_EQ(distance(Metric::Cosine, pz.data(), pz.data(), 33), 1.0f);
    EXPECT_FLOAT_EQ(reference::cosine_distance(zero.data(), v.data(), 33), 1.0f);
    EXPECT_NEAR(distance(Metric::Cosine, pv.data(), pv.data(), 33), 0.0f, 1e-6f);
}

TEST(Distance, CosineNormalisationInPlaceAndOfHugeValues)
{
    std::vector<float> v = {3e30f, 4e30f};
    prepare_vector(Metric::Cosine, v.data(), v.data(), 2);
    EXPECT_NEAR(v[0], 0.6f, 1e-6f);
    EXPECT_NEAR(v[1], 0.8f, 1e-6f);
    std::vector<float> w = {1, 2, 3}, out(3);
    prepare_vector(Metric::L2, w.data(), out.data(), 3);
    EXPECT_EQ(out, w);
}

TEST(Distance, KernelNameIsKnown)
{
    std::string name = distance_kernel_name();
    EXPECT_TRUE(name == "avx512" || name == "avx2" || name == "portable") << name;
}

/* pgvector's halfvec elements as floats (format.h): every finite half
 * round-trips through float, and the special values keep their meaning. */
TEST(Format, HalfToFloat)
{
    EXPECT_EQ(cagra::half_to_float(0x3C00), 1.0f);
    EXPECT_EQ(cagra::half_to_float(0xC000), -2.0f);
    EXPECT_EQ(cagra::half_to_float(0x7BFF), 65504.0f);
    EXPECT_EQ(cagra::half_to_float(0x0001), std::ldexp(1.0f, -24)); /* smallest subnormal */
    EXPECT_EQ(cagra::half_to_float(0x03FF), std::ldexp(1023.0f, -24));
    EXPECT_EQ(cagra::half_to_float(0x0400), std::ldexp(1.0f, -14)); /* smallest normal */
    EXPECT_EQ(cagra::half_to_float(0x0000), 0.0f);
    EXPECT_TRUE(std::signbit(cagra::half_to_float(0x8000)));
    EXPECT_TRUE(std::isinf(cagra::half_to_float(0x7C00)));
    EXPECT_TRUE(std::isnan(cagra::half_to_float(0x7E00)));
    EXPECT_EQ(cagra::half_to_float(0x3555), 0.333251953125f);
}
