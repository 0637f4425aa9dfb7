// One authenticated TCP connection to a peer node: handshake, framing, heartbeats and a bounded
// send queue. Private to the transport; all callbacks into the owner run on the io thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <capnp/message.h>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

#include "handshake.hpp"
#include "troupe/core/clock.hpp"
#include "troupe/core/small_mutex.hpp"
#include "troupe/transport/errc.hpp"
#include "troupe/transport/frame.hpp"
#include "troupe/transport/message.hpp"

namespace troupe::detail {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using time_point = troupe::clock::time_point;
// A socket bound to the io_context's own executor, not the type-erased any_io_executor: 32 bytes
// less in each connection, and as much less in each operation pending on it (a master holds one
// connection and one pending wait per member).
using socket_type = asio::basic_stream_socket<tcp, asio::io_context::executor_type>;

struct shared_stats {
  std::atomic<std::uint64_t> bytes_sent{0}, bytes_received{0}, frames_sent{0}, frames_received{0};
  std::atomic<std::uint64_t> frames_dropped{0}, frames_unroutable{0}, malformed_frames{0}, auth_refused{0};
  std::atomic<std::int64_t> queued_bytes{0};
};

class connection_owner;

struct conn_params {
  connection_owner* owner = nullptr;  // the endpoint: told of opens, messages and closes
  node_id self;
  auth_key key{};
  frame_limits limits;
  std::chrono::milliseconds heartbeat_interval{250}, heartbeat_timeout{1000}, handshake_timeout{2000};
  std::size_t queue_bytes = 64u << 20;
  shared_stats* stats = nullptr;
  // The endpoint's clock: handshake deadlines, heartbeat silence and heartbeat stamps.
  troupe::clock* clock = &troupe::clock::system();
  // The endpoint's one read buffer (io thread only): every connection reads into it once its
  // socket is readable, so no connection keeps a buffer between frames.
  std::span<std::byte> read_buffer;
  // Senders off the io thread waiting for room in a connection's full queue (rare): one condition
  // variable for all connections of the endpoint, not 48 bytes in each. Notified only when
  // someone waits.
  mutable std::condition_variable_any room;
  mutable std::atomic<int> room_waiters{0};
  // At most this many bytes of a frame go straight to the socket (write_now); tests lower it to
  // make the socket seem full (endpoint_testing). Read and written on the io thread only.
  std::size_t direct_write_limit = SIZE_MAX;
};

class connection;

class connection_owner {
 public:
  virtual ~connection_owner() = default;
  virtual void on_open(const std::shared_ptr<connection>& c) = 0;
  virtual void on_message(const std::shared_ptr<connection>& c, message&& m) = 0;
  virtual void on_closed(const std::shared_ptr<connection>& c, const std::string& reason) = 0;
};

class connection : public std::enable_shared_from_this<connection> {
 public:
  enum class phase : std::uint8_t { handshake, open, closed };

  // `params` are the endpoint's, shared by all its connections (a connection may outlive it).
  connection(socket_type socket, std::shared_ptr<const conn_params> params, bool dialled, std::string remote);
  ~connection();

  // Sends the Hello and starts reading (io thread).
  void start();
  // Queues a frame (any thread). Past the byte limit: queue_full at once, or after waiting up to
  // `wait` for room when called off the io thread.
  expected<void> enqueue(outbound&& m, std::chrono::milliseconds wait = {});
  expected<void> enqueue_raw(std::vector<std::byte> bytes);
  // Closes the socket and reports on_closed once (io thread).
  void close(const std::string& reason, transport_errc code = transport_errc::closed);
  // The owner's heartbeat sweep, every min(heartbeat interval, timeout / 4) (io thread): drops a
  // connection past its handshake deadline or silent past the heartbeat timeout, and sends a
  // heartbeat when nothing was sent for an interval. One timer per endpoint, not one per
  // connection: an idle connection has no pending timer wait.
  void tick(time_point now);

  phase state() const { return phase_.load(); }
  const node_id& peer() const { return peer_; }  // valid once open
  bool dialled() const { return dialled_; }
  const std::string& remote() const { return remote_; }
  transport_errc close_code() const { return close_code_; }
  std::size_t queued_bytes() const;

  // Owner bookkeeping (io thread only).
  bool superseded = false;  // a duplicate of another open connection: closing it is no peer-down
  bool opened = false;

 private:  // two of the small fields below, in the gap before `slot` (sizeof is checked in connection.cpp)
  bool closed_ = false;        // under mu_
  bool write_active_ = false;  // under mu_: a write is posted or in flight

 public:
  std::uint32_t slot = 0;  // its index in the owner's list of connections
  std::uint64_t dial_id = 0;

 private:
  struct out_frame {
    std::vector<std::shared_ptr<const void>> holds;  // outbound::hold(); outlives builder
    std::unique_ptr<capnp::MallocMessageBuilder> builder;
    std::vector<std::byte> raw;
    std::vector<std::uint32_t> table;
    std::size_t bytes = 0;
  };
  static out_frame make_frame(outbound&& m);
  // Calls fn with each buffer of f's bytes on the wire, in order (raw bytes, or table and segments).
  template <class Fn>
  static void for_each_buffer(const out_frame& f, Fn&& fn);
  expected<void> push(out_frame&& f, std::chrono::milliseconds wait);
  // Appends f to the queue (mu_ held). True when no write was active: the caller starts one.
  bool queue_locked(out_frame&& f);
  void do_write();
  // `batch` is what the write took from the queue: its write operation holds it, not the
  // connection, so an idle connection keeps no batch.
  void on_written(const boost::system::error_code& ec, std::size_t n, std::vector<out_frame>& batch);
  // Reading: a large frame's missing bytes are read straight into it (async_read_some); otherwise
  // the connection waits until its socket is readable and reads once into the shared read buffer.
  // (An async_read_some after every frame cost a second recv that found nothing: asio tries the
  // read at once, and one frame of ~100 bytes is all a control connection has.)
  void do_read();
  void on_read(const boost::system::error_code& ec, std::size_t n);
  void on_readable(const boost::system::error_code& ec);
  bool read_failed(const boost::system::error_code& ec);  // closes on an error; true when closed
  // After n bytes were read and parsed: counts them; closes on a malformed frame. False when closed.
  bool took(std::size_t n, const expected<void>& parsed);
  void on_frame(frame&& f);
  void notify_room();
  // connection_handshake.cpp: the peer's Hello (answered with this side's Auth), then its Auth.
  void on_handshake(const message& m);
  void on_hello(const message& m);
  void on_auth(const message& m);
  void refuse(const std::string& why, transport_errc code);
  void send_hello();
  // Writes a frame straight to the socket when nothing else is queued or being written (a
  // heartbeat of an idle connection, as a rule): no queue entry, no write operation pending. The
  // part the socket did not take is queued. False (f untouched) when it must be queued whole.
  bool write_now(out_frame& f);
  // write_now's socket took the first `n` bytes of `used`: the rest goes first, through the queue
  // (mu_ held in `lk`, released before the write starts).
  void queue_rest(std::unique_lock<small_mutex>& lk, std::span<const asio::const_buffer> used, std::size_t n);
  bool on_io_thread() { return socket_.get_executor().running_in_this_thread(); }
  template <class T>
  struct slot_allocator;  // read_slot_ for the pending wait, else the heap (connection.cpp)
  struct on_readable_handler;

  socket_type socket_;
  std::shared_ptr<const conn_params> params_;
  std::string remote_;
  frame_reader reader_;
  node_id peer_;
  // What only the handshake needs (io thread), freed once the connection is open: an idle
  // connection of a master with thousands of members keeps no nonces.
  struct handshake_state {
    nonce mine = make_nonce(), peers{};
    bool got_hello = false;
    time_point deadline;
  };
  std::unique_ptr<handshake_state> hs_;
  time_point last_rx_, last_hb_;

  // A vector, not a deque: an idle connection holds no block (a deque keeps 576 bytes even empty).
  // do_write hands it whole to the write when it fits one batch.
  std::vector<out_frame> queue_;
  std::size_t queued_ = 0;
  // The small fields together (a master keeps one connection per member; the queue state above,
  // closed_ and write_active_ are under mu_, 4 bytes where std::mutex takes 40).
  mutable small_mutex mu_;
  std::uint32_t hb_seq_ = 0;
  transport_errc close_code_ = transport_errc::closed;
  std::atomic<phase> phase_{phase::handshake};
  const bool dialled_;
  bool read_slot_used_ = false;  // (io thread)
  // The pending wait for the socket to be readable lives here (slot_allocator), not on the heap.
  alignas(std::max_align_t) std::byte read_slot_[80];
};

}  // namespace troupe::detail
