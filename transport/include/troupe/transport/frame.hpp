// Framing: a frame is one Cap'n Proto message in the standard stream layout
//   u32 (segment count - 1) | u32 size in words, per segment | pad to 8 bytes | segments
// (docs/wire_format.md). frame_reader cuts a byte stream into frames, checking the segment count
// and the total size against frame_limits BEFORE allocating, and hands out each frame as its own
// 8-byte aligned buffer. It has no I/O: the connection reads into prepare() and calls commit(),
// and the fuzz test feeds it bytes the same way.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "troupe/core/error.hpp"
#include "troupe/transport/config.hpp"

namespace troupe {

// One complete frame: aligned words holding exactly the segment table and the segments.
struct frame {
  std::unique_ptr<std::uint64_t[]> words;
  std::size_t word_count = 0;
  std::size_t size_bytes() const { return word_count * 8; }
};

class frame_reader {
 public:
  // Frames of at least this many bytes still missing are read straight into their own buffer.
  static constexpr std::size_t direct_threshold = 16 * 1024;

  explicit frame_reader(frame_limits limits);
  // Limits for frames whose segment table has not been read yet (tightened during a handshake).
  void set_limits(const frame_limits& limits);

  // Where the next bytes from the stream should be written; never empty.
  std::span<std::byte> prepare();
  // `n` bytes were written at the last prepare(). Each completed frame goes to `sink` in order.
  // A bad segment table (count or size over the limits, a zero-size first segment) is an error
  // naming the problem; the stream cannot be resynchronised after that and must be closed.
  expected<void> commit(std::size_t n, const std::function<void(frame&&)>& sink);
  // Copies `data` through prepare()/commit() (the tests' way in).
  expected<void> feed(std::span<const std::byte> data, const std::function<void(frame&&)>& sink);

  // The other way in, for a reader fed from a buffer it does not own (a connection reads into its
  // endpoint's one read buffer): frames are cut from `data` straight into their own buffers; only
  // an incomplete segment table is kept, and the staging buffer is freed again once it is empty. So
  // a reader between frames holds no buffer at all (1,000 idle connections: no 4 KB page each).
  expected<void> consume(std::span<const std::byte> data, const std::function<void(frame&&)>& sink);
  // The rest of a frame being assembled, when at least direct_threshold bytes of it are missing
  // and nothing is staged: read those into it directly (prepare() returns it too); else empty.
  std::span<std::byte> direct();

  std::size_t buffered_bytes() const { return end_ - begin_; }
  bool holds_staging() const { return staging_ != nullptr; }

 private:
  // Cuts frames out of [p, p + n); returns the bytes used (all but an incomplete segment table).
  expected<std::size_t> parse(const std::byte* p, std::size_t n, const std::function<void(frame&&)>& sink);
  // Parses the segment table at p (n bytes available) and allocates the frame: false if incomplete.
  expected<bool> start_frame(const std::byte* p, std::size_t n);
  std::byte* staging();  // allocated on first use
  // A connection holds a reader (a master: one per member), so its fields are small: of the
  // limits only the two it checks, the frame size capped at 4 GiB (the configuration allows 2 GiB).
  std::uint32_t max_segments_ = 0, max_frame_bytes_ = 0;
  // 64 KB for prepare()/commit() and feed(), allocated on first use and not zeroed (only the bytes
  // received are written); through consume() it holds only an incomplete segment table and is
  // freed once empty.
  std::unique_ptr<std::uint64_t[]> staging_;
  std::uint32_t begin_ = 0, end_ = 0;  // valid bytes in staging_
  frame current_;                      // frame being assembled, words == nullptr when none
  std::uint32_t filled_ = 0;           // bytes of current_ already written (< max_frame_bytes_)
  bool last_direct_ = false;
};

}  // namespace troupe
