// Blocking request/response over the transport for code that runs on its own thread (a worker's
// training step waiting for its PS shards, its task lease). Replies are routed straight to the
// waiting thread on the endpoint's io thread, never through an actor mailbox (the worker actor is
// the one waiting). Each reply is matched by the request id the request carried.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "troupe/core/error.hpp"
#include "troupe/transport/endpoint.hpp"
#include "troupe/transport/message.hpp"

namespace troupe::actors {

class rpc_client {
 public:
  struct request {
    std::string node, to;
    outbound out;
    std::uint64_t id = 0;
  };

  // Registers `name` on the endpoint for the replies.
  static expected<std::unique_ptr<rpc_client>> create(endpoint& net, std::string name);
  ~rpc_client();

  std::uint64_t next_id() { return ++last_id_; }
  const std::string& name() const { return name_; }

  // Sends every request (from this client's name) and waits for all replies, or fails with the
  // first send error or a timeout (core_errc::io_error naming the silent nodes).
  expected<std::vector<message>> call_all(std::vector<request>& reqs, std::chrono::milliseconds timeout);
  expected<message> call(request req, std::chrono::milliseconds timeout);

  // Without blocking: sends the request and returns; poll(req.id) until the reply is there. Lets a
  // training loop keep stepping while its next task lease or a task report is on the way.
  expected<void> send(request req, std::chrono::milliseconds timeout);
  // nullopt while the reply to a send() is due; else the reply, or an error once `timeout` has
  // passed or the node it went to went down (either forgets the request).
  std::optional<expected<message>> poll(std::uint64_t id);

  // The request id a reply carries (0 when the kind has none).
  static std::uint64_t reply_id(const message& m);

 private:
  rpc_client(endpoint& net, std::string name) : net_(net), name_(std::move(name)) {}
  void on_reply(const message& m);
  // The incarnation of `node` the endpoint is connected to now; 0 when it is not connected.
  std::uint64_t incarnation_of(const std::string& node) const;
  endpoint& net_;
  std::string name_;
  std::uint64_t last_id_ = 0;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::uint64_t, std::optional<message>> pending_;
  struct in_flight {
    std::string node;
    std::uint64_t incarnation = 0;  // of the node when sent; 0: not connected then
    std::chrono::steady_clock::time_point deadline;
    std::chrono::milliseconds timeout;
  };
  std::map<std::uint64_t, in_flight> sent_;  // send() requests, by id (owned by the calling thread)
};

}  // namespace troupe::actors
