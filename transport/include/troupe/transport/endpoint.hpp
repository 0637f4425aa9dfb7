// A node's transport endpoint: listens, dials, authenticates peers with the cluster token, and
// routes frames to local handlers by actor name. Asio and Cap'n Proto stay behind the pimpl.
//
// Threads: the endpoint owns one io thread (or shares one: io_group). Handlers, watch callbacks and peer
// callbacks run on it, one at a time, and must not block (forward into a mailbox, or post work elsewhere).
// Every public method is thread-safe; connect() blocks and so must not be called from the io thread.
//
// Addressing: a peer is named by its node name (node_id::name; the incarnation tells restarts
// apart), an actor by (node name, actor name). Messages to the endpoint's own node name are
// delivered locally (through the io thread, after a copy).
//
// Failure detection: a connection that closes (peer exited or was killed) is reported down at
// once; an open connection on which nothing arrives for heartbeat_timeout is closed and reported
// down. Either way every watch on that node fires. Any frame counts as a sign of life: a side sends a
// heartbeat only after a heartbeat_interval in which it wrote nothing else. Dialled connections are
// re-dialled with exponential backoff and jitter (reconnect_attempts per outage).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "troupe/core/clock.hpp"
#include "troupe/core/error.hpp"
#include "troupe/core/ids.hpp"
#include "troupe/transport/config.hpp"

namespace troupe {

class message;
class outbound;

struct peer_event {
  node_id node;
  std::string address;  // remote "host:port"
  std::string reason;   // why it went down ("connection closed by peer", "heartbeat timeout: ...")
};

struct endpoint_stats {
  std::uint64_t bytes_sent = 0, bytes_received = 0, frames_sent = 0, frames_received = 0;
  std::uint64_t frames_dropped = 0;     // by the fault-injection knob
  std::uint64_t frames_unroutable = 0;  // addressed to a name nobody registered
  std::uint64_t malformed_frames = 0, auth_refused = 0;
  std::int64_t queued_bytes = 0;  // in all send queues now
  std::size_t open_connections = 0;
};

// Test knob: drop a fraction of outgoing application frames, or hold each one back for `delay`.
// Handshake and heartbeat frames are never affected.
struct fault_injection {
  double drop_probability = 0.0;
  std::chrono::microseconds delay{0};
};

// Io threads that several endpoints share, for a process that plays many nodes (bench/control's
// simulated workers): a thread per endpoint there costs a context switch per frame. Each endpoint
// created in the group runs on one of its threads (round robin), so an endpoint's handlers still run
// one at a time, but beside other endpoints' handlers on that thread. The group outlives its
// endpoints; an endpoint is destroyed off the group's threads.
class io_group {
 public:
  explicit io_group(unsigned threads);
  ~io_group();
  io_group(const io_group&) = delete;
  io_group& operator=(const io_group&) = delete;
  struct impl;

 private:
  friend class endpoint;
  std::unique_ptr<impl> impl_;
};

using message_handler = std::function<void(const message&)>;
using watch_callback = std::function<void(const actor_address& watched, const std::string& reason)>;
using peer_callback = std::function<void(const peer_event&)>;

class endpoint {
 public:
  // Starts the io thread, or takes one of `group`'s. The config is validated here (error names the
  // key). Heartbeat and handshake deadlines and connect()'s limit are measured on `clk`.
  static expected<std::unique_ptr<endpoint>> create(node_id self, transport_config cfg,
                                                    io_group* group = nullptr,
                                                    troupe::clock& clk = troupe::clock::system());
  // Closes every connection (peers see them drop), waits until its io thread has run what closing
  // them queued, and joins that thread unless an io_group shares it. No callback runs after.
  ~endpoint();
  endpoint(const endpoint&) = delete;
  endpoint& operator=(const endpoint&) = delete;

  const node_id& self() const;

  // Binds and listens; returns the bound "host:port" (useful with port 0).
  expected<std::string> listen(const std::string& host, std::uint16_t port);
  // Dials `address` and waits for the handshake (up to connect_timeout + handshake_timeout).
  // Returns the peer's identity. With `reconnect`, a later drop is re-dialled with backoff.
  // auth_failed when the peer does not share our token. Not from the io thread (wrong_thread).
  expected<node_id> connect(const std::string& address, bool reconnect = true);
  bool connected(const std::string& node) const;
  std::vector<node_id> peers() const;

  // Frames whose `to` is `name` go to `h` (on the io thread). name_taken if already registered.
  expected<void> register_name(const std::string& name, message_handler h);
  // Removes the handler; remote watchers of `name` get a Down.
  void unregister_name(const std::string& name);

  // Stamps `to`/`from` into the envelope and queues it for `node`. not_connected when there is no
  // open connection; queue_full when that connection's queue is at its limit (after waiting up to
  // `wait` for room, only off the io thread): that is the backpressure signal.
  expected<void> send(const std::string& node, const std::string& to, outbound&& m,
                      const std::string& from = "", std::chrono::milliseconds wait = {});

  // Calls `cb` once when `name` on `node` goes away: unregistered, never registered, or its node
  // down (or not connected at the time of the call). Returns an id for unwatch().
  std::uint64_t watch(const std::string& node, const std::string& name, watch_callback cb);
  void unwatch(std::uint64_t id);

  // Peer callbacks fire on the io thread when a node's first connection opens / its last closes.
  void on_peer_up(peer_callback cb);
  void on_peer_down(peer_callback cb);
  // From now on peers' up and down lines are logged at debug, not info: a job's nodes leaving at its
  // end are not news (the runner printed "peer master#0 down: connection closed by peer" among the
  // lines of every job that finished well).
  void quiet_peer_lines();

  void set_fault_injection(const fault_injection& f);
  endpoint_stats stats() const;

  // Runs `fn` on the io thread.
  void post(std::function<void()> fn);
  bool in_io_thread() const;

  struct impl;

 private:
  // The transport's tests write malformed frames through it (transport/src/endpoint_testing.hpp).
  friend struct endpoint_testing;
  explicit endpoint(std::unique_ptr<impl> p);
  std::unique_ptr<impl> impl_;
};

}  // namespace troupe
