/*
 * test_distance.cpp — the dispatched kernels against the scalar references
 * at many dimensions, cosine preparation and the zero vector.
 */
#include <gtest/gtest.h>

#include <cmath>

#include <limits>
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
        expect_close(distance(Metric::L1, pa, pb, d), reference::l1_distance(pa, pb, d), scale, d);
        expect_close(metric_kernel(Metric::L1)(pa, pb, d), reference::l1_distance(pa, pb, d), scale, d);
        MetricKernel mk = metric_kernel(Metric::InnerProduct);
        expect_close(mk(pa, pb, d), -ipr, scale, d);

        std::vector<float> na(d), nb(d);
        prepare_vector(Metric::Cosine, pa, na.data(), d);
        prepare_vector(Metric::Cosine, pb, nb.data(), d);
        EXPECT_NEAR(distance(Metric::Cosine, na.data(), nb.data(), d), reference::cosine_distance(pa, pb, d), 1e-4f)
            << "dim " << d;
    }
}

TEST(Distance, BlockMatchesPairByPair)
{
    /* Shapes that leave partial row blocks (of 4) and column groups (of 32),
     * and dimensions with tails. */
    std::mt19937 rng(11);
    for (uint32_t d : {1u, 7u, 16u, 33u, 100u, 256u, 769u})
        for (auto [na, nb] : {std::pair<uint32_t, uint32_t>{1, 1}, {3, 5}, {5, 37}, {8, 32}, {70, 65}}) {
            std::vector<float> a, b;
            for (uint32_t i = 0; i < na; i++) {
                auto v = random_vec(d, rng);
                a.insert(a.end(), v.begin(), v.end());
            }
            for (uint32_t i = 0; i < nb; i++) {
                auto v = random_vec(d, rng);
                b.insert(b.end(), v.begin(), v.end());
            }
            for (Metric m : {Metric::L2, Metric::InnerProduct, Metric::L1, Metric::Cosine}) {
                std::vector<float> pa = a, pb = b;
                if (m == Metric::Cosine) {
                    for (uint32_t i = 0; i < na; i++)
                        prepare_vector(m, &pa[(size_t)i * d], &pa[(size_t)i * d], d);
                    for (uint32_t i = 0; i < nb; i++)
                        prepare_vector(m, &pb[(size_t)i * d], &pb[(size_t)i * d], d);
                }
                std::vector<float> out((size_t)na * nb, -1.0f);
                distance_block(m, pa.data(), na, pb.data(), nb, d, out.data());
                for (uint32_t i = 0; i < na; i++)
                    for (uint32_t j = 0; j < nb; j++) {
                        const float want = distance(m, &pa[(size_t)i * d], &pb[(size_t)j * d], d);
                        /* L2 from norms and a dot product: rounding of the
                         * squared norms (each up to 4 d) */
                        EXPECT_NEAR(out[(size_t)i * nb + j], want, 2e-6f * 8.0f * d + 1e-5f)
                            << "metric " << (int)m << " dim " << d << " at " << i << ", " << j;
                    }
            }
        }
}

TEST(Distance, PositionsNotAboveMatchScalarFilter)
{
    /* lengths with vector tails, one bound and one a column, NaN (never
     * above), infinities and ties with the bound */
    std::mt19937 rng(5);
    std::uniform_real_distribution<float> u(0.0f, 1.0f);
    const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
    for (uint32_t len : {0u, 1u, 7u, 8u, 15u, 16u, 17u, 63u, 256u}) {
        std::vector<float> d(len), bounds(len);
        for (uint32_t j = 0; j < len; j++) {
            d[j] = j % 11 == 3 ? nan : j % 13 == 5 ? inf : u(rng);
            bounds[j] = j % 7 == 2 ? d[j] : j % 17 == 9 ? inf : u(rng);
        }
        for (bool per_column : {false, true}) {
            if (!per_column && len > 0)
                bounds[0] = 0.5f;
            std::vector<uint32_t> got(len + 16), want;
            for (uint32_t j = 0; j < len; j++)
                if (!(d[j] > bounds[per_column ? j : 0]))
                    want.push_back(j);
            const uint32_t n = positions_not_above(d.data(), len, bounds.data(), per_column, got.data());
            got.resize(n);
            EXPECT_EQ(got, want) << "len " << len << " per_column " << per_column;
        }
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

/* float_to_half rounds to nearest, ties to even, over every half: each
 * half's own value comes back unchanged, the midpoints between neighbours
 * go to the even one, and overflow starts exactly at 65,520. */
TEST(Format, FloatToHalfRoundsToNearestEven)
{
    for (uint32_t h = 0; h < 0x7C00; h++) {
        float f = half_to_float((uint16_t)h);
        ASSERT_EQ(float_to_half(f), h) << h;
        ASSERT_EQ(float_to_half(-f), h | 0x8000u) << h;
        if (h + 1 < 0x7C00) {
            float next = half_to_float((uint16_t)(h + 1));
            float mid = (float)(((double)f + (double)next) / 2);
            ASSERT_EQ(float_to_half(mid), (h & 1) ? h + 1 : h) << h;
            ASSERT_EQ(float_to_half(std::nextafter(mid, 0.0f)), h) << h;
            ASSERT_EQ(float_to_half(std::nextafter(mid, 1e9f)), h + 1) << h;
        }
    }
    EXPECT_EQ(float_to_half(65519.99f), 0x7BFF);
    EXPECT_EQ(float_to_half(65520.0f), 0x7C00);
    EXPECT_EQ(float_to_half(-1e30f), 0xFC00);
    EXPECT_EQ(float_to_half(std::ldexp(1.0f, -25)), 0x0000); /* a tie: to even zero */
    EXPECT_EQ(float_to_half(std::ldexp(1.5f, -25)), 0x0001);
    EXPECT_TRUE(std::isnan(half_to_float(float_to_half(NAN))));
}

/* The float16 kernels against the float32 ones on the widened vectors, at
 * the dimensions (tails) the float32 test covers. */
TEST(Distance, HalfKernelsMatchWidenedFloat)
{
    std::mt19937 rng(11);
    for (uint32_t d : {1u, 2u, 7u, 8u, 9u, 15u, 16u, 17u, 31u, 32u, 33u, 47u, 64u, 100u, 768u, 1023u, 16000u}) {
        std::vector<float> a = random_vec(d, rng), b = random_vec(d, rng), wide(d);
        std::vector<uint16_t> h(d + 1);
        for (uint32_t i = 0; i < d; i++) {
            h[i + 1] = float_to_half(b[i]);
            wide[i] = half_to_float(h[i + 1]);
        }
        const uint16_t *ph = h.data() + 1; /* unaligned */
        float scale = (float)d * 4.0f;
        for (Metric m : {Metric::L2, Metric::InnerProduct, Metric::L1})
            expect_close(distance_half(m, a.data(), ph, d), distance(m, a.data(), wide.data(), d), scale, d);
    }
}

/* The switch-free half kernel of each metric is distance_half's value. */
TEST(Distance, HalfMetricKernelMatchesDistanceHalf)
{
    std::mt19937 rng(12);
    for (uint32_t d : {7u, 64u, 100u}) {
        std::vector<float> a = random_vec(d, rng), b = random_vec(d, rng);
        std::vector<uint16_t> h(d);
        floats_to_halves(b.data(), h.data(), d);
        for (Metric m : {Metric::L2, Metric::InnerProduct, Metric::Cosine, Metric::L1})
            EXPECT_EQ(half_metric_kernel(m)(a.data(), h.data(), d), distance_half(m, a.data(), h.data(), d))
                << metric_name(m) << " dim " << d;
    }
}

/* VectorFormat in float16: half the bytes, store rounds, load widens,
 * distance is that of the widened vector, first_unstorable finds overflow. */
TEST(Format, Float16Format)
{
    VectorFormat f;
    f.element = ElementType::Float16;
    f.dim = 5;
    f.metric = Metric::L2;
    EXPECT_EQ(f.vector_bytes(), 10u);
    float x[5] = {1.0f, 0.1f, -3.25f, 65504.0f, 1e-9f}, back[5];
    uint16_t stored[5];
    EXPECT_EQ(f.first_unstorable(x), 5u);
    f.store(x, stored);
    f.load(stored, back);
    EXPECT_EQ(back[0], 1.0f);
    EXPECT_NEAR(back[1], 0.1f, 0.1f * kHalfUnitRoundoff);
    EXPECT_EQ(back[2], -3.25f);
    EXPECT_EQ(back[3], 65504.0f);
    EXPECT_EQ(back[4], 0.0f);
    float q[5] = {0, 0, 0, 0, 0};
    EXPECT_FLOAT_EQ(f.distance(q, stored), l2_squared(q, back, 5));
    float big[5] = {0, 0, 70000.0f, 0, 0};
    EXPECT_EQ(f.first_unstorable(big), 2u);
    f.element = ElementType::Float32;
    EXPECT_EQ(f.first_unstorable(big), 5u);
    EXPECT_EQ(f.vector_bytes(), 20u);
}

/* The float16 lower bound is below the operator's value on the original
 * vectors (computed in double and with the float32 kernels), for all three
 * metrics, vectors of very different norms and every tail length; and it
 * stays close (within 1% of the scale). */
TEST(Format, Float16LowerBoundHolds)
{
    std::mt19937 rng(5);
    std::uniform_real_distribution<float> scale_of(-6.0f, 4.0f);
    for (uint32_t d : {1u, 3u, 16u, 33u, 128u, 768u, 1536u}) {
        for (Metric m : {Metric::L2, Metric::InnerProduct, Metric::Cosine, Metric::L1}) {
            VectorFormat f;
            f.element = ElementType::Float16;
            f.dim = d;
            f.metric = m;
            std::vector<std::vector<float>> xs;
            double max_norm = 0;
            for (int i = 0; i < 50; i++) {
                std::vector<float> x = random_vec(d, rng);
                float s = std::pow(10.0f, scale_of(rng));
                for (float &v : x)
                    v *= s;
                prepare_vector(m, x.data(), x.data(), d);
                max_norm = std::max(max_norm, vector_norm(x.data(), d));
                xs.push_back(x);
            }
            for (int t = 0; t < 20; t++) {
                std::vector<float> q = random_vec(d, rng);
                prepare_vector(m, q.data(), q.data(), d);
                double qn = f.bound_norm(q.data());
                for (const auto &x : xs) {
                    std::vector<uint16_t> h(d);
                    f.store(x.data(), h.data());
                    double lower = f.operator_lower_bound(f.distance(q.data(), h.data()), qn, max_norm);
                    double exact = m == Metric::L2 ? std::sqrt((double)reference::l2_squared(q.data(), x.data(), d))
                                   : m == Metric::InnerProduct ? -(double)reference::inner_product(q.data(), x.data(), d)
                                   : m == Metric::L1           ? (double)reference::l1_distance(q.data(), x.data(), d)
                                                               : 1.0 - reference::inner_product(q.data(), x.data(), d);
                    double fast = operator_value(m, distance(m, q.data(), x.data(), d));
                    ASSERT_LE(lower, exact) << "dim " << d << " metric " << (int)m;
                    ASSERT_LE(lower, fast) << "dim " << d << " metric " << (int)m;
                    double scale = m == Metric::InnerProduct ? vector_norm(q.data(), d) * max_norm
                                                             : std::max(1.0, exact);
                    ASSERT_GE(lower, exact - 0.01 * scale) << "dim " << d << " metric " << (int)m;
                }
            }
        }
    }
}

/* Elements float16 stores as subnormals (below 2^-14) or as zero carry an
 * absolute rounding error, up to 2^-25, whatever the query: the bound holds
 * for queries of zero, tiny and ordinary norm, on data of every scale down
 * to 1e-9, for the four metrics. */
TEST(Format, Float16LowerBoundHoldsOnSubnormals)
{
    std::mt19937 rng(11);
    std::uniform_real_distribution<float> unit(0.0f, 1.0f);
    std::uniform_real_distribution<float> exponent(-9.0f, 0.0f);
    for (uint32_t d : {1u, 4u, 16u, 128u}) {
        for (Metric m : {Metric::L2, Metric::InnerProduct, Metric::Cosine, Metric::L1}) {
            VectorFormat f;
            f.element = ElementType::Float16;
            f.dim = d;
            f.metric = m;
            std::vector<std::vector<float>> xs;
            double max_norm = 0;
            for (int i = 0; i < 60; i++) {
                std::vector<float> x(d);
                /* a third in [0, 1e-6]^d, the rest each element of its own scale */
                for (float &v : x)
                    v = unit(rng) * (i % 3 == 0 ? 1e-6f : std::pow(10.0f, exponent(rng)));
                prepare_vector(m, x.data(), x.data(), d);
                max_norm = std::max(max_norm, vector_norm(x.data(), d));
                xs.push_back(x);
            }
            for (int t = 0; t < 9; t++) {
                std::vector<float> q(d, 0.0f);
                if (t % 3 == 0 && m == Metric::Cosine)
                    q[0] = 1.0f; /* the cosine of a zero query is undefined */
                for (float &v : q)
                    v += t % 3 == 0 ? 0.0f : unit(rng) * (t % 3 == 1 ? 1e-6f : 1.0f);
                prepare_vector(m, q.data(), q.data(), d);
                double qn = f.bound_norm(q.data());
                for (const auto &x : xs) {
                    std::vector<uint16_t> h(d);
                    f.store(x.data(), h.data());
                    double lower = f.operator_lower_bound(f.distance(q.data(), h.data()), qn, max_norm);
                    double exact = 0;
                    for (uint32_t i = 0; i < d; i++) {
                        double qi = q[i], xi = x[i];
                        exact += m == Metric::L2   ? (qi - xi) * (qi - xi)
                                 : m == Metric::L1 ? std::fabs(qi - xi)
                                                   : -qi * xi;
                    }
                    exact = m == Metric::L2 ? std::sqrt(exact) : m == Metric::Cosine ? 1.0 + exact : exact;
                    double fast = operator_value(m, distance(m, q.data(), x.data(), d));
                    ASSERT_LE(lower, exact) << "dim " << d << " metric " << (int)m << " query " << t;
                    ASSERT_LE(lower, fast) << "dim " << d << " metric " << (int)m << " query " << t;
                }
            }
        }
    }
}

/* The dispatched array conversions agree with float_to_half and
 * half_to_float element by element, tails and overflow included. */
TEST(Format, ArrayConversionsMatchScalar)
{
    std::mt19937 rng(9);
    std::uniform_real_distribution<float> e(-30.0f, 17.0f);
    for (uint32_t n : {1u, 7u, 8u, 9u, 100u, 1023u}) {
        std::vector<float> x(n), back(n);
        for (auto &v : x)
            v = (rng() & 1 ? 1.0f : -1.0f) * std::exp2(e(rng));
        x[0] = 65520.0f; /* rounds to infinity */
        std::vector<uint16_t> h(n);
        floats_to_halves(x.data(), h.data(), n);
        halves_to_floats(h.data(), back.data(), n);
        for (uint32_t i = 0; i < n; i++) {
            ASSERT_EQ(h[i], float_to_half(x[i])) << x[i];
            float want = half_to_float(h[i]);
            ASSERT_TRUE(back[i] == want || (std::isnan(back[i]) && std::isnan(want))) << h[i];
        }
    }
}
