// The pieces of a TCP ring link that the per-pair link (mixed/link.hpp) shares with tcp_ring_link:
// the rendezvous of each half (dial the next rank, accept the previous one) and one message
// streamed over a non-blocking socket.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <span>
#include <string>

#include "tcp/ring_auth.hpp"
#include "troupe/collective/ring.hpp"
#include "troupe/collective/tcp/link.hpp"

namespace troupe::collective::tcp_detail {

using time_point = troupe::clock::time_point;

// A dialled connection to the next rank and the nonce its hello carried (the welcome answers it).
struct dialled {
  int fd = -1;
  ring_nonce nonce{};
};

// Dials o.next_address until it answers or `deadline` (the next rank may not listen yet), then
// names this ring and rank, with the proof of the job's token (tcp/ring_auth.hpp). The socket is
// blocking, tuned for heartbeats.
expected<dialled> dial_next(const tcp_link_options& o, time_point deadline);
// Accepts on `l` until the previous rank of this epoch says hello with the job's token, and
// welcomes it; strays (other epochs' hellos, and hellos without the token: logged once) are closed.
expected<int> accept_prev(tcp_listener& l, const tcp_link_options& o, time_point deadline);
// Waits on dial_next's socket for the next rank's welcome. A hello the next rank closed
// unanswered (it was still linking an older epoch's ring) is dialled again until it is welcomed,
// the epoch is over or `deadline`. Without it, a link to a rank that closed the hello would look
// made and fail at its first transfer, as if that rank had died. A welcome without the job's token
// (another process took the next rank's port) fails the link at once. Takes `d`; returns the
// welcomed socket.
expected<int> confirm_next(dialled d, const tcp_link_options& o, time_point deadline);
// The rendezvous is over: non-blocking, no per-call timeouts.
void make_streaming(int fd);
// Milliseconds until `deadline` on `clk`, clamped to [0, cap].
int remaining_ms(const troupe::clock& clk, time_point deadline, std::chrono::milliseconds cap);

// The header in front of every payload. Both ends run the same build: native layout.
struct header {
  std::uint64_t epoch = 0;
  std::uint64_t op = 0;
  std::uint32_t step = 0;
  std::uint32_t reserved = 0;
  std::uint64_t bytes = 0;
};

// One direction of one transfer: a header, then the payload.
struct cursor {
  header h{};
  std::size_t header_done = 0;
  char* payload = nullptr;
  std::size_t payload_bytes = 0, payload_done = 0;
  std::size_t staged = 0;  // accumulate: bytes in the staging buffer not yet added
  bool active = false;
  // The last send_some left bytes the socket could not take, or the last recv_some found fewer than
  // it asked for: calling again before poll(2) says the socket is ready would move little or nothing.
  bool starved = false;
  bool done() const { return !active || (header_done == sizeof(header) && payload_done == payload_bytes); }
};

// The cursors of one transfer; a side without a span is done from the start.
cursor outgoing(const step_tag& tag, const std::span<const float>* send);
cursor incoming(const std::span<float>* recv);

// Writes what `fd` takes of the header and payload; true when bytes moved. peer_dead when the
// next rank is gone or silent past the heartbeat.
expected<bool> send_some(int fd, cursor& out);
// Reads what has arrived on `fd`; with `accumulate`, a chunk at a time into `staging`, added once
// whole. protocol when the header names another exchange or size.
expected<bool> recv_some(int fd, cursor& in, const step_tag& tag, bool accumulate, std::span<float> staging);
// Bytes the next recv_some on `in` asks for: the rest of the header, else the rest of the current
// chunk of `chunk` bytes (or of the payload, when it is not accumulated).
std::size_t next_read_bytes(const cursor& in, bool accumulate, std::size_t chunk);

// `e`, or `cancelled` when the ring epoch has moved past `epoch`: a neighbour that left a replaced
// ring closed its connections, which says nothing of its health.
error unless_cancelled(error e, const std::atomic<std::uint64_t>* current_epoch, std::uint64_t epoch);

// Whether the next rank has closed (or reset) the connection to it: nothing is ever sent back on it,
// so anything readable is its end. A cheap poll(2) for a sender that has nothing left to write.
bool outbound_closed(int fd);

}  // namespace troupe::collective::tcp_detail
