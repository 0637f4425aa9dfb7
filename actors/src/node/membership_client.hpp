// A node's side of the membership (docs/job.md): it joins the master (a worker only once it can
// train: its ring partners would otherwise wait for it in the ring's rendezvous), joins again when
// the master's connection comes back (a restarted master) or no view of the master lists it (a join
// that reached a master whose actors were not up yet), and leaves on SIGTERM by telling the master
// itself (node_exited) so that its leases are re-queued and its ring rebuilt at once.
//
// Contract:
// - Threads: mark_ready(), leave() and the master's events may come from any thread (actors, the
//   endpoint's io thread, main); one mutex, no call blocks but await_left().
// - The node's transport is reached through `links` only, which the node guards against its own
//   shutdown; the client never owns a connection. The re-join thread (start_rejoining()) is stopped
//   and joined by the destructor or stop(): stop it before the transport goes.
// - Errors are logged (a join that cannot be sent is sent again on the next occasion); leave()
//   returns false when the master cannot be told.
// - Once leaving, the node never joins again.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <stop_token>
#include <string>
#include <thread>

#include "node_context.hpp"
#include "node_view.hpp"
#include "troupe/core/error.hpp"
#include "troupe/transport/message.hpp"

namespace troupe::actors {

class membership_client {
 public:
  // What the client needs of its node's transport.
  struct links {
    // Sends `m` to the master node's "master" actor, as "node"; fails once the node shuts down.
    std::function<expected<void>(outbound&&)> to_master;
    // Whether the master's connection is up (false once the node shuts down).
    std::function<bool()> master_up;
    // The address its ring neighbours dial (node_ring_listener; empty when there is none).
    std::function<std::string()> ring_address;
  };

  // `who` and `address` (the node's advertised "host:port") are this node's; `view` is the view it
  // follows (whether it lists this node).
  membership_client(node_identity who, std::string address, node_view& view, links l);
  ~membership_client() { stop(); }
  membership_client(const membership_client&) = delete;
  membership_client& operator=(const membership_client&) = delete;

  // Starts re-joining: every 250 ms, a ready node connected to a master whose views do not list it
  // (two looks in a row) joins again.
  void start_rejoining();
  void stop();
  // The master's connection opened (a first dial, a restarted master): a ready node joins.
  void master_up();
  // The master's connection closed: not joined any more; a leaving node stops waiting for its answer.
  void master_down();

  // Until mark_ready(), the node connects without joining (a worker defers its join).
  void defer() { ready_.store(false); }
  void mark_ready();
  bool ready() const { return ready_.load(); }
  // A membership delta came that the held view cannot take (a view was missed): a ready member
  // that is not leaving joins again, which the master answers with its whole view.
  void request_view();

  // Tells the master that this incarnation leaves (false when it could not be told: its death
  // notice then does the same, later). From here on the node never joins again.
  bool leave(const std::string& reason);
  // A view without this node came while leaving: the master's answer to leave().
  void left();
  // Waits until left() came (true), the master's connection was lost or `limit` passed (false).
  bool await_left(std::chrono::milliseconds limit);
  bool leaving() const { return leaving_.stop_requested(); }
  // Requested by leave().
  std::stop_token leave_token() const { return leaving_.get_token(); }

 private:
  void send_join();
  void rejoin(std::stop_token stop);

  node_identity who_;
  std::string address_;
  node_view& view_;
  links links_;
  std::atomic<bool> ready_{true};
  std::stop_source leaving_;
  std::mutex mu_;
  std::condition_variable left_cv_;
  bool left_ = false, master_lost_ = false;  // under mu_
  std::jthread rejoin_;
};

}  // namespace troupe::actors
