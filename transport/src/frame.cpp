#include "troupe/transport/frame.hpp"

#include <algorithm>
#include <cstring>
#include <limits>
#include <string>

#include "troupe/transport/errc.hpp"

namespace troupe {
namespace {
constexpr std::size_t staging_bytes = 64 * 1024;

std::uint32_t load_u32(const std::byte* p) {
  std::uint32_t v;
  std::memcpy(&v, p, 4);
  return v;  // the wire is little-endian; so are the machines troupe runs on
}
}  // namespace

frame_reader::frame_reader(frame_limits limits) {
  set_limits(limits);
}

void frame_reader::set_limits(const frame_limits& limits) {
  constexpr std::size_t cap = std::numeric_limits<std::uint32_t>::max();
  max_segments_ = limits.max_segments;
  max_frame_bytes_ = static_cast<std::uint32_t>(std::min(limits.max_frame_bytes, cap));
}

std::byte* frame_reader::staging() {
  if (!staging_) staging_ = std::make_unique_for_overwrite<std::uint64_t[]>(staging_bytes / 8);
  return reinterpret_cast<std::byte*>(staging_.get());
}

std::span<std::byte> frame_reader::direct() {
  if (!current_.words || begin_ != end_) return {};
  std::size_t missing = current_.size_bytes() - filled_;
  if (missing < direct_threshold) return {};
  return {reinterpret_cast<std::byte*>(current_.words.get()) + filled_, missing};
}

std::span<std::byte> frame_reader::prepare() {
  if (auto d = direct(); !d.empty()) {
    last_direct_ = true;
    return d;
  }
  last_direct_ = false;
  auto* base = staging();
  if (begin_ == end_) {
    begin_ = end_ = 0;
  } else if (begin_ > 0 && (end_ - begin_ <= 512 || staging_bytes - end_ < 4096)) {
    // A short partial frame moves to the front (cheap): the next read lands on pages already
    // resident instead of creeping through the buffer.
    std::memmove(base, base + begin_, end_ - begin_);
    end_ -= begin_;
    begin_ = 0;
  }
  return {base + end_, staging_bytes - end_};
}

expected<void> frame_reader::commit(std::size_t n, const std::function<void(frame&&)>& sink) {
  if (last_direct_) {
    filled_ += static_cast<std::uint32_t>(n);
    if (filled_ == current_.size_bytes()) {
      frame done = std::move(current_);
      current_ = frame{};
      filled_ = 0;
      sink(std::move(done));
    }
    return {};
  }
  end_ += static_cast<std::uint32_t>(n);
  auto used = parse(staging() + begin_, end_ - begin_, sink);
  if (!used) return std::move(used).err();
  begin_ += static_cast<std::uint32_t>(*used);
  return {};
}

expected<bool> frame_reader::start_frame(const std::byte* base, std::size_t avail) {
  if (avail < 8) return false;
  const std::uint64_t segments = std::uint64_t(load_u32(base)) + 1;
  if (segments > max_segments_)
    return make_unexpected(
        transport_errc::malformed_frame,
        "bad segment count " + std::to_string(segments) + " (limit " + std::to_string(max_segments_) + ")");
  const std::size_t table_words = (segments + 2) / 2;  // (1 + segments) u32s, padded to 8 bytes
  if (avail < table_words * 8) return false;
  std::uint64_t body_words = 0;
  for (std::uint64_t i = 0; i < segments; ++i) {
    std::uint32_t w = load_u32(base + 4 + 4 * i);
    if (i == 0 && w == 0) return make_unexpected(transport_errc::malformed_frame, "empty first segment");
    body_words += w;
  }
  const std::uint64_t total = (table_words + body_words) * 8;
  if (total > max_frame_bytes_)
    return make_unexpected(
        transport_errc::frame_too_large,
        "frame of " + std::to_string(total) + " bytes (limit " + std::to_string(max_frame_bytes_) + ")");
  current_.word_count = table_words + body_words;
  current_.words = std::make_unique_for_overwrite<std::uint64_t[]>(current_.word_count);
  filled_ = 0;
  return true;
}

expected<std::size_t> frame_reader::parse(const std::byte* p, std::size_t n,
                                          const std::function<void(frame&&)>& sink) {
  std::size_t pos = 0;
  for (;;) {
    if (!current_.words) {
      auto started = start_frame(p + pos, n - pos);
      if (!started) return std::move(started).err();
      if (!*started) return pos;
    }
    std::size_t take = std::min(n - pos, current_.size_bytes() - filled_);
    std::memcpy(reinterpret_cast<std::byte*>(current_.words.get()) + filled_, p + pos, take);
    pos += take;
    filled_ += static_cast<std::uint32_t>(take);
    if (filled_ < current_.size_bytes()) return pos;
    frame done = std::move(current_);
    current_ = frame{};
    filled_ = 0;
    sink(std::move(done));
  }
}

expected<void> frame_reader::feed(std::span<const std::byte> data, const std::function<void(frame&&)>& sink) {
  while (!data.empty()) {
    auto dst = prepare();
    std::size_t n = std::min(dst.size(), data.size());
    std::memcpy(dst.data(), data.data(), n);
    data = data.subspan(n);
    if (auto r = commit(n, sink); !r) return r;
  }
  return {};
}

expected<void> frame_reader::consume(std::span<const std::byte> data,
                                     const std::function<void(frame&&)>& sink) {
  if (begin_ != end_) {  // an incomplete segment table is staged: the new bytes go behind it
    if (auto r = feed(data, sink); !r) return r;
  } else {
    auto used = parse(data.data(), data.size(), sink);
    if (!used) return std::move(used).err();
    data = data.subspan(*used);  // an incomplete segment table, or nothing
    if (!data.empty()) {
      std::memcpy(staging(), data.data(), data.size());
      begin_ = 0;
      end_ = static_cast<std::uint32_t>(data.size());
    }
  }
  if (begin_ == end_) {
    begin_ = end_ = 0;
    staging_.reset();
  }
  return {};
}

}  // namespace troupe
