#include "troupe/transport/frame.hpp"

#include <cstring>
#include <functional>
#include <span>

#include <gtest/gtest.h>

#include "troupe/transport/errc.hpp"
#include "troupe/transport/message.hpp"

namespace troupe {
namespace {

std::vector<std::byte> ping_frame(std::size_t payload, std::uint64_t seq = 1) {
  outbound o;
  auto p = o.body().initPing();
  p.setSeq(seq);
  auto d = p.initPayload(payload);
  for (std::size_t i = 0; i < payload; ++i) d[i] = static_cast<capnp::byte>(i * 7);
  o.envelope().setTo("echo");
  return o.to_bytes();
}

std::vector<std::byte> u32s(std::initializer_list<std::uint32_t> v) {
  std::vector<std::byte> out(v.size() * 4);
  std::memcpy(out.data(), std::data(v), out.size());
  return out;
}

// Ping frames of these payload sizes, back to back; seq = index.
std::vector<std::byte> ping_stream(const std::vector<std::size_t>& sizes) {
  std::vector<std::byte> stream;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    auto f = ping_frame(sizes[i], i);
    stream.insert(stream.end(), f.begin(), f.end());
  }
  return stream;
}

// The frames cut from ping_stream(sizes), in order and whole.
void expect_pings(std::vector<frame>& got, const std::vector<std::size_t>& sizes, std::size_t chunk) {
  ASSERT_EQ(got.size(), sizes.size()) << "chunk " << chunk;
  for (std::size_t i = 0; i < got.size(); ++i) {
    auto m = decode_frame(std::move(got[i]), frame_limits{}, node_id{"a", 0});
    ASSERT_TRUE(m) << m.err().to_string();
    EXPECT_EQ(m->body().getPing().getSeq(), i);
    EXPECT_EQ(m->body().getPing().getPayload().size(), sizes[i]);
    EXPECT_EQ(m->to(), "echo");
  }
}

TEST(frame_reader, splits_a_stream_into_frames_whatever_the_chunking) {
  const std::vector<std::size_t> sizes = {0, 10, 100000, 3, 70000};
  const auto stream = ping_stream(sizes);
  for (std::size_t chunk : {1ul, 7ul, 4096ul, 1ul << 20}) {
    frame_reader r(frame_limits{});
    std::vector<frame> got;
    for (std::size_t off = 0; off < stream.size(); off += chunk) {
      auto n = std::min(chunk, stream.size() - off);
      ASSERT_TRUE(r.feed({stream.data() + off, n}, [&](frame&& f) { got.push_back(std::move(f)); }));
    }
    expect_pings(got, sizes, chunk);
    EXPECT_EQ(r.buffered_bytes(), 0u);
  }
}

// The connection's way: bytes read into a buffer the reader does not own go through consume(),
// the missing bytes of a large frame are read straight into it (direct()).
void connection_feed(frame_reader& r, std::span<const std::byte> data, std::size_t chunk,
                     const std::function<void(frame&&)>& sink, std::size_t* direct_reads = nullptr) {
  std::size_t off = 0;
  while (off < data.size()) {
    if (auto d = r.direct(); !d.empty()) {
      auto dst = r.prepare();
      ASSERT_EQ(dst.data(), d.data());
      auto n = std::min({dst.size(), chunk, data.size() - off});
      std::memcpy(dst.data(), data.data() + off, n);
      off += n;
      ASSERT_TRUE(r.commit(n, sink));
      if (direct_reads) ++*direct_reads;
      continue;
    }
    auto n = std::min(chunk, data.size() - off);
    ASSERT_TRUE(r.consume(data.subspan(off, n), sink));
    off += n;
  }
}

TEST(frame_reader, consume_splits_a_stream_into_frames_and_keeps_no_buffer_between_them) {
  const std::vector<std::size_t> sizes = {0, 10, 100000, 3, 70000, 5};
  const auto stream = ping_stream(sizes);
  for (std::size_t chunk : {1ul, 5ul, 7ul, 4096ul, 65536ul, 1ul << 20}) {
    frame_reader r(frame_limits{});
    std::vector<frame> got;
    std::size_t direct = 0;
    connection_feed(
        r, stream, chunk, [&](frame&& f) { got.push_back(std::move(f)); }, &direct);
    expect_pings(got, sizes, chunk);
    EXPECT_EQ(r.buffered_bytes(), 0u);
    EXPECT_FALSE(r.holds_staging()) << "chunk " << chunk;
    if (chunk >= 4096 && chunk < stream.size()) {
      EXPECT_GE(direct, 1u) << "chunk " << chunk;
    }
  }
}

TEST(frame_reader, consume_stages_only_an_incomplete_segment_table) {
  auto f = ping_frame(40);
  frame_reader r(frame_limits{});
  int frames = 0;
  auto sink = [&](frame&&) { ++frames; };
  ASSERT_TRUE(r.consume({f.data(), 3}, sink));  // 3 bytes of the segment count
  EXPECT_TRUE(r.holds_staging());
  EXPECT_EQ(r.buffered_bytes(), 3u);
  ASSERT_TRUE(r.consume({f.data() + 3, 20}, sink));  // the table, and the frame's first bytes
  EXPECT_FALSE(r.holds_staging());
  EXPECT_EQ(frames, 0);
  ASSERT_TRUE(r.consume({f.data() + 23, f.size() - 23}, sink));
  EXPECT_EQ(frames, 1);
  EXPECT_FALSE(r.holds_staging());
}

TEST(frame_reader, consume_rejects_what_feed_rejects) {
  frame_limits lim;
  lim.max_frame_bytes = 4096;
  for (auto bytes : {u32s({1000, 1}), u32s({0, 600}), u32s({0, 0})}) {
    frame_reader r(lim);
    auto res = r.consume(bytes, [](frame&&) { FAIL(); });
    EXPECT_FALSE(res);
  }
}

TEST(frame_reader, direct_reads_land_in_the_frame_buffer) {
  auto f = ping_frame(200000);
  frame_reader r(frame_limits{});
  std::size_t off = 0, frames = 0, direct = 0;
  while (off < f.size()) {
    auto dst = r.prepare();
    if (dst.size() > 64 * 1024) ++direct;
    auto n = std::min(dst.size(), f.size() - off);
    std::memcpy(dst.data(), f.data() + off, n);
    off += n;
    ASSERT_TRUE(r.commit(n, [&](frame&&) { ++frames; }));
  }
  EXPECT_EQ(frames, 1u);
  EXPECT_GE(direct, 1u);
}

TEST(frame_reader, rejects_a_segment_count_over_the_limit_before_allocating) {
  frame_reader r(frame_limits{});
  auto bytes = u32s({0xffffffffu, 1});
  auto res = r.feed(bytes, [](frame&&) { FAIL(); });
  ASSERT_FALSE(res);
  EXPECT_EQ(res.err(), transport_errc::malformed_frame);
  EXPECT_NE(res.err().context().find("segment count"), std::string::npos) << res.err().context();
}

TEST(frame_reader, rejects_an_oversize_frame_before_allocating) {
  frame_limits lim;
  lim.max_frame_bytes = 1 << 20;
  frame_reader r(lim);
  auto bytes = u32s({1, 0x10000000u, 0x10000000u, 0});  // two segments of 2 GiB each
  auto res = r.feed(bytes, [](frame&&) { FAIL(); });
  ASSERT_FALSE(res);
  EXPECT_EQ(res.err(), transport_errc::frame_too_large);
}

TEST(frame_reader, rejects_an_empty_first_segment) {
  frame_reader r(frame_limits{});
  auto res = r.feed(u32s({0, 0}), [](frame&&) { FAIL(); });
  ASSERT_FALSE(res);
  EXPECT_EQ(res.err(), transport_errc::malformed_frame);
}

TEST(frame_reader, handshake_limits_are_small) {
  frame_reader r(handshake_limits());
  auto f = ping_frame(8192);
  auto res = r.feed(f, [](frame&&) { FAIL(); });
  ASSERT_FALSE(res);
  EXPECT_EQ(res.err(), transport_errc::frame_too_large);
}

}  // namespace
}  // namespace troupe
