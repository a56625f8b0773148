/*
 * test_serialize.cpp — the flat index image: round trip, and every kind of
 * damage rejected with Error(Corrupt).
 */
#include <gtest/gtest.h>

#include <cstring>

#include "search.h"
#include "serialize.h"
#include "test_util.h"

using namespace cagra;

namespace {

IndexImage make_image(bool with_ids)
{
    const uint32_t dim = 12;
    IndexImage im;
    im.metric = Metric::Cosine;
    im.dim = dim;
    auto raw = cagra_test::clustered(800, dim, 31);
    im.vectors.resize(raw.size());
    for (size_t i = 0; i < raw.size(); i += dim)
        prepare_vector(Metric::Cosine, &raw[i], &im.vectors[i], dim);
    im.params.graph_degree = 16;
    im.params.intermediate_degree = 24;
    im.params.seed = 77;
    im.built = build_graph(DatasetView{im.vectors.data(), 800, dim}, im.metric, im.params);
    if (with_ids)
        for (uint64_t i = 0; i < 800; i++)
            im.ids.push_back(i * 1000 + 7);
    return im;
}

void expect_corrupt(std::vector<uint8_t> bytes, const std::string &message)
{
    try {
        deserialize(bytes.data(), bytes.size());
        ADD_FAILURE() << "accepted; expected: " << message;
    } catch (const Error &e) {
        EXPECT_EQ(e.code(), ErrorCode::Corrupt);
        EXPECT_EQ(std::string(e.what()), message);
        EXPECT_EQ(e.hint(), "Rebuild the index.");
    }
}

/* Rewrite a header field (the checksum covers only what follows the header). */
template <class T>
std::vector<uint8_t> with_field(std::vector<uint8_t> bytes, size_t offset, T value)
{
    std::memcpy(bytes.data() + offset, &value, sizeof(T));
    return bytes;
}

} // namespace

TEST(Serialize, RoundTrip)
{
    for (bool ids : {false, true}) {
        IndexImage im = make_image(ids);
        std::vector<uint8_t> bytes = serialize(im);
        EXPECT_EQ(bytes.size(), sizeof(SerializedHeader) + 800 * 16 * 4 + im.built.entry_nodes.size() * 4 +
                                    800 * 12 * 4 + (ids ? 800 * 8 : 0));
        IndexImage back = deserialize(bytes.data(), bytes.size());
        EXPECT_EQ(back.metric, im.metric);
        EXPECT_EQ(back.dim, im.dim);
        EXPECT_EQ(back.params.graph_degree, 16u);
        EXPECT_EQ(back.params.intermediate_degree, 24u);
        EXPECT_EQ(back.params.seed, 77u);
        EXPECT_EQ(back.built.graph.degree, im.built.graph.degree);
        EXPECT_EQ(back.built.graph.edges, im.built.graph.edges);
        EXPECT_EQ(back.built.entry_nodes, im.built.entry_nodes);
        EXPECT_EQ(back.vectors, im.vectors);
        EXPECT_EQ(back.ids, im.ids);
        /* The image searches like the original. */
        InMemoryGraph g(back.built.graph, DatasetView{back.vectors.data(), 800, 12}, back.metric);
        auto res = search(g, &back.vectors[5 * 12], 1, SearchParams{}, back.built.entry_nodes);
        ASSERT_EQ(res.size(), 1u);
        EXPECT_EQ(res[0].id, 5u);
    }
}

TEST(Serialize, SmallGraphWithPadding)
{
    IndexImage im;
    im.dim = 3;
    im.vectors = {0, 0, 0, 1, 1, 1, 2, 2, 2};
    im.params.graph_degree = 4;
    im.params.intermediate_degree = 4;
    im.built = build_graph(DatasetView{im.vectors.data(), 3, 3}, im.metric, im.params);
    std::vector<uint8_t> bytes = serialize(im);
    IndexImage back = deserialize(bytes.data(), bytes.size());
    EXPECT_EQ(back.built.graph.edges, im.built.graph.edges);
    EXPECT_EQ(back.built.graph.row(0)[3], kInvalidNode);
}

TEST(Serialize, CorruptInputRejected)
{
    std::vector<uint8_t> good = serialize(make_image(true));
    expect_corrupt({}, "corrupt index image: shorter than its header");
    expect_corrupt(std::vector<uint8_t>(good.begin(), good.begin() + 40),
                   "corrupt index image: shorter than its header");
    expect_corrupt(with_field<uint32_t>(good, 0, 0x12345678), "corrupt index image: bad magic number");
    expect_corrupt(with_field<uint32_t>(good, 4, 2), "corrupt index image: format version 2, expected 1");
    expect_corrupt(with_field<uint32_t>(good, 8, 9), "corrupt index image: header field out of range");
    expect_corrupt(with_field<uint32_t>(good, 12, 0), "corrupt index image: header field out of range");
    expect_corrupt(with_field<uint32_t>(good, 12, 16001), "corrupt index image: header field out of range");
    std::vector<uint8_t> truncated(good.begin(), good.end() - 1);
    expect_corrupt(truncated, "corrupt index image: size " + std::to_string(truncated.size()) + " bytes, header says " +
                                  std::to_string(good.size()));
    std::vector<uint8_t> flipped = good;
    flipped[sizeof(SerializedHeader) + 1000] ^= 0x10;
    expect_corrupt(flipped, "corrupt index image: checksum mismatch");

    /* Damage with a valid checksum is still caught by the range checks. */
    std::vector<uint8_t> bad_edge = good;
    uint32_t huge = 5000;
    std::memcpy(bad_edge.data() + sizeof(SerializedHeader), &huge, 4);
    uint64_t sum =
        image_checksum(bad_edge.data() + sizeof(SerializedHeader), bad_edge.size() - sizeof(SerializedHeader));
    std::memcpy(bad_edge.data() + offsetof(SerializedHeader, checksum), &sum, 8);
    expect_corrupt(bad_edge, "corrupt index image: edge 0 -> 5000 out of range");
}

TEST(Serialize, InconsistentImageRefused)
{
    IndexImage im = make_image(false);
    im.vectors.pop_back();
    try {
        serialize(im);
        FAIL() << "accepted";
    } catch (const Error &e) {
        EXPECT_EQ(e.code(), ErrorCode::InvalidParameter);
        EXPECT_STREQ(e.what(), "inconsistent index image: vector array does not match the graph size");
    }
}

TEST(Serialize, HeaderLayoutIsFixed)
{
    EXPECT_EQ(sizeof(SerializedHeader), 72u);
    EXPECT_EQ(offsetof(SerializedHeader, n), 16u);
    EXPECT_EQ(offsetof(SerializedHeader, graph_degree), 32u);
    EXPECT_EQ(offsetof(SerializedHeader, seed), 56u);
    EXPECT_EQ(offsetof(SerializedHeader, checksum), 64u);
}
