// State of an endpoint. Fields marked (io) are touched only on the io thread; the others are
// guarded by the mutex next to them or are atomic.
#pragma once

#include <atomic>
#include <map>
#include <mutex>
#include <optional>
#include <string_view>
#include <thread>
#include <unordered_map>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>

#include "connection.hpp"
#include "limited_warning.hpp"
#include "troupe/transport/endpoint.hpp"

namespace troupe {

namespace detail {
// An io_context and the thread that runs it, owned by one endpoint or shared by an io_group's.
struct io_runner {
  io_runner();
  ~io_runner();  // stops the io_context and joins the thread
  asio::io_context io;
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work;
  std::thread thread;
};
}  // namespace detail

struct io_group::impl {
  std::vector<std::shared_ptr<detail::io_runner>> runners;
  std::atomic<std::size_t> next{0};
};

struct endpoint::impl final : detail::connection_owner {
  using conn_ptr = std::shared_ptr<detail::connection>;
  using dial_waiter = std::function<void(expected<node_id>)>;

  struct dial {
    std::string address;
    std::shared_ptr<detail::socket_type> sock;  // while a connect is on its way
    std::string node;                           // learned at the first handshake
    bool reconnect = false;
    int attempts = 0;
    bool established = false;  // opened at least once: failures are re-dialled from then on
    dial_waiter waiter;
    std::unique_ptr<detail::asio::steady_timer> timer;
  };
  struct local_watch {
    std::string node, name;
    watch_callback cb;
  };
  struct remote_watch {
    std::string node;
    std::uint64_t id;
  };

  impl(node_id s, transport_config c, std::shared_ptr<detail::io_runner> r, troupe::clock& clk);
  ~impl() override = default;

  // connection_owner
  void on_open(const conn_ptr& c) override;
  void on_message(const conn_ptr& c, message&& m) override;
  void on_closed(const conn_ptr& c, const std::string& reason) override;

  // (io) dialling
  void start_dial(std::uint64_t id);
  void on_tcp_connected(std::uint64_t id, detail::socket_type sock);
  // (io) A new connection: tracked in `all`, started, and swept for heartbeats.
  void add(const conn_ptr& c);
  void forget(const conn_ptr& c);  // (io) out of `all`
  void arm_sweep();
  void dial_failed(std::uint64_t id, const error& e);
  void schedule_redial(std::uint64_t id);
  struct listener;
  void accept_next(listener& l);
  void shutdown_all();

  // (io) routing and watches
  void route(const message& m, const conn_ptr& c);
  void handle_watch(const conn_ptr& c, const message& m);
  void handle_down(const conn_ptr& c, const message& m);
  void send_down(const std::string& node, std::uint64_t id, const std::string& name, const std::string& why);
  void fire_watches(const std::string& node, const std::string& name_or_all, const std::string& reason);
  void fire_peer(const std::vector<peer_callback>& cbs, const peer_event& ev);
  void start_watch(std::uint64_t id, local_watch w);

  conn_ptr primary_for(const std::string& node) const;
  bool has_name(const std::string& name) const;
  expected<void> enqueue(const conn_ptr& c, outbound&& m, std::chrono::milliseconds wait);

  // First, so destroyed last: the io thread outlives every asio object below (and may be shared).
  std::shared_ptr<detail::io_runner> runner;
  detail::asio::io_context& io;
  // Heartbeat and handshake deadlines, connect()'s wait and the warnings' windows are on it; the
  // asio timers (the sweep's period, connect_timeout's, re-dial backoff) wait in real time.
  troupe::clock& clk;
  node_id self;
  transport_config cfg;
  detail::shared_stats stats;
  std::shared_ptr<detail::conn_params> params = std::make_shared<detail::conn_params>();
  std::unique_ptr<std::byte[]> read_buffer;  // params.read_buffer: the connections' one (io)
  std::atomic<bool> stopping{false};
  std::atomic<bool> quiet_peers{false};  // quiet_peer_lines()
  std::atomic<std::uint64_t> next_id{1};
  std::atomic<double> drop_probability{0.0};
  std::atomic<std::int64_t> delay_us{0};

  // A hash that the map need not cache in each node (a noexcept hash is "fast" to libstdc++): a
  // node of 40 bytes, a 48-byte block, where the cached hash made it 64.
  struct name_hash {
    std::size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
  };
  mutable std::mutex conns_mu;
  // The open connection to each peer, keyed by a view of the connection's own peer name.
  std::unordered_map<std::string_view, conn_ptr, name_hash> primary;

  mutable std::mutex names_mu;
  std::unordered_map<std::string, std::shared_ptr<message_handler>> handlers;

  // An acceptor and its pause after a failed accept (cancelled with it at shutdown: no handler of
  // its may run after the endpoint).
  struct listener {
    explicit listener(detail::asio::io_context& io) : acceptor(io), pause(io) {}
    detail::tcp::acceptor acceptor;
    detail::asio::steady_timer pause;
  };
  std::vector<std::unique_ptr<listener>> acceptors;  // (io)
  // The inbound connections that may be in their handshake at once (endpoint.cpp, accept_next): a
  // joining node's handshake takes a round trip, so only a burst of more than this many dials at
  // once meets it (a refused one re-dials); strangers holding descriptors without a word are
  // refused past it.
  static constexpr std::size_t max_inbound_handshakes = 512;
  std::size_t inbound_handshakes() const;  // (io)
  std::vector<conn_ptr> all;  // (io) every connection, at its `slot`; 16 bytes each, not a set's 48
  detail::asio::steady_timer sweep_timer{io};                           // (io) heartbeats of all
  bool sweeping = false;                                                // (io) sweep_timer armed
  std::map<std::uint64_t, dial> dials;                                  // (io)
  std::map<std::uint64_t, local_watch> watches;                         // (io)
  std::unordered_map<std::string, std::vector<remote_watch>> watchers;  // (io) local name -> remote
  std::vector<peer_callback> up_cbs, down_cbs;                          // (io)
  // (io) What strangers can make repeat: rate-limited (one line per connection filled the disk).
  detail::limited_warning refused_warning{io, clk, "refused connections"};
  detail::limited_warning frame_warning{io, clk, "connections closed for malformed frames"};
  detail::limited_warning accept_warning{io, clk, "failed accepts"};
};

}  // namespace troupe
