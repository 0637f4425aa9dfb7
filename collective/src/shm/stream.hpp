// The pieces of a shared-memory ring link that the per-pair link (mixed/link.hpp) shares with
// shm_ring_link: one message streamed into or out of a ring, the rendezvous of each half (this
// rank's inbound ring, the next rank's ring), and the watch on a same-host neighbour's process.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>

#include "troupe/collective/liveness.hpp"
#include "troupe/collective/ring.hpp"
#include "troupe/collective/shm/link.hpp"
#include "troupe/transport/shm_ring.hpp"

namespace troupe::collective::shm_detail {

// Every message on a ring: this header, then `floats` float32 values. 24 bytes keeps every offset
// a multiple of 4, so a float never straddles the wrap point.
struct wire_header {
  std::uint64_t epoch;
  std::uint64_t op;
  std::uint32_t step;
  std::uint32_t floats;
};
static_assert(sizeof(wire_header) == 24);

// Streams one message (header + payload) into a ring, a piece at a time.
struct sender {
  wire_header hdr;
  std::span<const std::byte> payload;
  std::size_t sent = 0;  // over header + payload
  std::size_t total() const { return sizeof(hdr) + payload.size(); }
  bool done() const { return sent == total(); }
  // Whether it progressed.
  bool pump(transport::shm_ring& ring);
};

// Reads one message, checking the header, reducing or copying the payload straight out of the ring.
struct receiver {
  std::span<float> out;
  bool accumulate;
  wire_header hdr{};
  std::size_t hdr_got = 0;
  std::size_t floats_got = 0;
  bool done() const { return hdr_got == sizeof(hdr) && floats_got == out.size(); }
  // Returns -1 on a protocol error, else whether it progressed.
  int pump(transport::shm_ring& ring, const step_tag& tag);
  // The protocol error for what pump() returned -1 on.
  error mismatch(const step_tag& tag) const;
};

// Reads what the ring has of a message's header into hdr (got: its bytes so far). Returns -1 once
// it is whole and not `tag`'s of `floats` floats, else the bytes read now.
int pump_header(transport::shm_ring& ring, wire_header& hdr, std::size_t& got, const step_tag& tag,
                std::size_t floats);
// The protocol error of a header that is not `tag`'s, or not of `floats` floats.
error header_mismatch(const wire_header& hdr, const step_tag& tag, std::size_t floats);

// Inline: the hot loops of every shared-memory transfer, compiled into each link's transfer loop.
inline bool sender::pump(transport::shm_ring& ring) {
  std::size_t before = sent;
  while (!done()) {
    std::span<const std::byte> src =
        sent < sizeof(hdr)
            ? std::span<const std::byte>(reinterpret_cast<const std::byte*>(&hdr) + sent, sizeof(hdr) - sent)
            : payload.subspan(sent - sizeof(hdr));
    std::size_t n = ring.write_some(src);
    if (n == 0) break;
    sent += n;
  }
  return sent != before;
}

inline int pump_header(transport::shm_ring& ring, wire_header& hdr, std::size_t& got, const step_tag& tag,
                       std::size_t floats) {
  std::size_t n = ring.read_some({reinterpret_cast<std::byte*>(&hdr) + got, sizeof(hdr) - got});
  got += n;
  if (got == sizeof(hdr) &&
      (hdr.epoch != tag.epoch || hdr.op != tag.op || hdr.step != tag.step || hdr.floats != floats))
    return -1;
  return static_cast<int>(n);
}

inline int receiver::pump(transport::shm_ring& ring, const step_tag& tag) {
  bool progressed = false;
  if (hdr_got < sizeof(hdr)) {
    if (pump_header(ring, hdr, hdr_got, tag, out.size()) < 0) return -1;
    progressed = hdr_got > 0;
    if (hdr_got < sizeof(hdr)) return progressed;
  }
  while (floats_got < out.size()) {
    auto region = ring.peek();
    std::size_t n = std::min(region.size() / sizeof(float), out.size() - floats_got);
    if (n == 0) break;
    const float* src = reinterpret_cast<const float*>(region.data());
    float* dst = out.data() + floats_got;
    if (accumulate) {
      for (std::size_t i = 0; i < n; ++i) dst[i] += src[i];
    } else {
      std::memcpy(dst, src, n * sizeof(float));
    }
    ring.consume(n * sizeof(float));
    floats_got += n;
    progressed = true;
  }
  return progressed;
}

// The sender and receiver of one transfer; a side without a span is done from the start.
sender make_sender(const step_tag& tag, const std::span<const float>* send);
receiver make_receiver(const std::span<float>* recv, bool accumulate);

// A pid that is gone, or a zombie nobody reaped yet, is dead.
bool process_dead(pid_t pid);

// A same-host neighbour: its pidfd (Linux >= 5.3; polls readable once the process has exited,
// before it is reaped) or, without one, its pid in /proc; and its liveness beacon when it has one.
class peer_watch {
 public:
  peer_watch() = default;
  peer_watch(pid_t pid, liveness* live, const node_id& node);
  ~peer_watch();
  peer_watch(const peer_watch&) = delete;
  peer_watch& operator=(const peer_watch&) = delete;
  // Whether checking costs one poll(2) (a pidfd, or no pid to watch), not a read of /proc.
  bool cheap() const noexcept { return pid_ <= 0 || pidfd_ >= 0; }
  bool dead() const;
  pid_t pid() const noexcept { return pid_; }

 private:
  pid_t pid_ = 0;
  int pidfd_ = -1;
  std::unique_ptr<liveness::watch> beacon_;
};

// Lane `lane` of this rank's inbound rings for `o` (lane 0: the spare one when it fits), a leftover
// of the name replaced.
expected<std::unique_ptr<transport::shm_ring>> make_inbound_ring(const shm_link_options& o, int lane = 0);
// Lane `lane` (>= 1) of the next rank's inbound rings, without waiting: null when that rank made no
// such lane (it made its lanes before its lane 0, which this rank has opened).
expected<std::unique_ptr<transport::shm_ring>> open_next_lane(const shm_link_options& o, int lane);
// Opens the next rank's inbound ring, waiting until `deadline` in short slices: a membership change
// (cancelled) or the next rank's death (peer_dead) ends the wait at once.
expected<std::unique_ptr<transport::shm_ring>> open_next_ring(const shm_link_options& o,
                                                              troupe::clock::time_point deadline);

}  // namespace troupe::collective::shm_detail
