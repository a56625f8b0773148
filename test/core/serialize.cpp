/*
 * serialize.cpp — writing and checking the flat index image of serialize.h.
 * deserialize() trusts nothing: sizes, ranges and the checksum are checked
 * before any array is read, and every failure is Error(Corrupt).
 */
#include "serialize.h"

#include <cmath>
#include <cstring>

namespace cagra {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the image format is little-endian");

namespace {

[[noreturn]] void corrupt(const std::string &what)
{
    throw Error(ErrorCode::Corrupt, "corrupt index image: " + what, "Rebuild the index.");
}

void check_image(const IndexImage &im, bool from_bytes)
{
    auto fail = [&](const std::string &what) {
        if (from_bytes)
            corrupt(what);
        throw Error(ErrorCode::InvalidParameter, "inconsistent index image: " + what);
    };
    const Graph &g = im.built.graph;
    if (!metric_is_valid((uint32_t)im.metric))
        fail("unknown metric");
    if (im.dim == 0 || im.dim > kMaxDim)
        fail("dimension " + std::to_string(im.dim) + " out of range");
    if (g.degree == 0 || g.edges.size() % g.degree != 0)
        fail("graph degree does not divide the edge array");
    const uint64_t n = g.size();
    if (im.vectors.size() != n * im.dim)
        fail("vector array does not match the graph size");
    if (!im.ids.empty() && im.ids.size() != n)
        fail("id array does not match the graph size");
    for (uint64_t i = 0; i < n; i++)
        for (uint32_t j = 0; j < g.degree; j++) {
            uint32_t e = g.row(i)[j];
            if (e != kInvalidNode && (e >= n || e == i))
                fail("edge " + std::to_string(i) + " -> " + std::to_string(e) + " out of range");
        }
    for (uint32_t e : im.built.entry_nodes)
        if (e >= n)
            fail("entry node " + std::to_string(e) + " out of range");
    for (float v : im.vectors)
        if (!std::isfinite(v))
            fail("vector component is not finite");
}

template <class T>
void put(std::vector<uint8_t> &out, size_t &pos, const T *src, size_t count)
{
    std::memcpy(out.data() + pos, src, count * sizeof(T));
    pos += count * sizeof(T);
}

template <class T>
void get(const uint8_t *bytes, size_t &pos, std::vector<T> &dst, size_t count)
{
    dst.resize(count);
    std::memcpy(dst.data(), bytes + pos, count * sizeof(T));
    pos += count * sizeof(T);
}

} // namespace

uint64_t image_checksum(const uint8_t *bytes, size_t size)
{
    uint64_t h = 0x6a09e667f3bcc909ull ^ size;
    size_t i = 0;
    for (; i + 8 <= size; i += 8) {
        uint64_t w;
        std::memcpy(&w, bytes + i, 8);
        h = (h ^ w) * 0x9e3779b97f4a7c15ull;
        h ^= h >> 29;
    }
    for (; i < size; i++)
        h = (h ^ bytes[i]) * 0x100000001b3ull;
    h ^= h >> 32;
    return h * 0xd6e8feb86659fd93ull;
}

std::vector<uint8_t> serialize(const IndexImage &im)
{
    check_image(im, false);
    const Graph &g = im.built.graph;
    const uint64_t n = g.size();
    SerializedHeader h{};
    h.magic = kSerializedMagic;
    h.version = kSerializedVersion;
    h.metric = (uint32_t)im.metric;
    h.dim = im.dim;
    h.n = n;
    h.degree = g.degree;
    h.entry_count = (uint32_t)im.built.entry_nodes.size();
    h.graph_degree = im.params.graph_degree;
    h.intermediate_degree = im.params.intermediate_degree;
    h.nn_descent_max_iterations = im.params.nn_descent_max_iterations;
    h.nn_descent_termination = im.params.nn_descent_termination;
    h.threads = im.params.threads;
    h.has_ids = im.ids.empty() ? 0 : 1;
    h.seed = im.params.seed;

    size_t size =
        sizeof(h) + g.edges.size() * 4 + im.built.entry_nodes.size() * 4 + im.vectors.size() * 4 + im.ids.size() * 8;
    std::vector<uint8_t> out(size);
    size_t pos = sizeof(h);
    put(out, pos, g.edges.data(), g.edges.size());
    put(out, pos, im.built.entry_nodes.data(), im.built.entry_nodes.size());
    put(out, pos, im.vectors.data(), im.vectors.size());
    put(out, pos, im.ids.data(), im.ids.size());
    h.checksum = image_checksum(out.data() + sizeof(h), size - sizeof(h));
    std::memcpy(out.data(), &h, sizeof(h));
    return out;
}

IndexImage deserialize(const uint8_t *bytes, size_t size)
{
    SerializedHeader h;
    if (!bytes || size < sizeof(h))
        corrupt("shorter than its header");
    std::memcpy(&h, bytes, sizeof(h));
    if (h.magic != kSerializedMagic)
        corrupt("bad magic number");
    if (h.version != kSerializedVersion)
        corrupt("format version " + std::to_string(h.version) + ", expected " + std::to_string(kSerializedVersion));
    if (!metric_is_valid(h.metric) || h.dim == 0 || h.dim > kMaxDim || h.degree == 0 || h.degree > 4096 ||
        h.has_ids > 1 || h.n >= kInvalidNode || h.entry_count > h.n)
        corrupt("header field out of range");
    /* Sizes in 128-bit arithmetic would be overkill: each factor is bounded
     * above, so these products fit in 64 bits. */
    const uint64_t expect =
        sizeof(h) + h.n * h.degree * 4 + (uint64_t)h.entry_count * 4 + h.n * h.dim * 4 + (h.has_ids ? h.n * 8 : 0);
    if (expect != size)
        corrupt("size " + std::to_string(size) + " bytes, header says " + std::to_string(expect));
    if (image_checksum(bytes + sizeof(h), size - sizeof(h)) != h.checksum)
        corrupt("checksum mismatch");

    IndexImage im;
    im.metric = (Metric)h.metric;
    im.dim = h.dim;
    im.params.graph_degree = h.graph_degree;
    im.params.intermediate_degree = h.intermediate_degree;
    im.params.nn_descent_max_iterations = h.nn_descent_max_iterations;
    im.params.nn_descent_termination = h.nn_descent_termination;
    im.params.threads = h.threads;
    im.params.seed = h.seed;
    im.built.graph.degree = h.degree;
    size_t pos = sizeof(h);
    get(bytes, pos, im.built.graph.edges, h.n * h.degree);
    get(bytes, pos, im.built.entry_nodes, h.entry_count);
    get(bytes, pos, im.vectors, h.n * h.dim);
    if (h.has_ids)
        get(bytes, pos, im.ids, h.n);
    check_image(im, true);
    return im;
}

} // namespace cagra
