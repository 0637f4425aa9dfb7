// Blocking request/response over the transport for code that runs on its own thread (a worker's
// training step waiting for its PS shards, its task lease). Replies are routed straight to the
// waiting thread on the endpoint's io thread, never through an actor mailbox (the worker actor is
// the one waiting). Each request carries a fresh correlation id in its envelope; the answer echoes
// it (reply_to, message.hpp) and is paired with its request by it, whatever its kind.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <stop_token>
#include <string>
#include <vector>

#include "troupe/core/clock.hpp"
#include "troupe/core/error.hpp"
#include "troupe/transport/endpoint.hpp"
#include "troupe/transport/message.hpp"

namespace troupe::wire {

// Requests and their replies, as a role's own thread sees them; rpc_client implements it over an
// endpoint, unit tests fake it.
class rpc_channel {
 public:
  struct request {
    std::string node, to;  // the node and actor the request goes to
    outbound out;          // its body; the channel sets the envelope's correlation id
  };
  virtual ~rpc_channel() = default;

  // Without blocking: sends the request and returns the correlation id to poll() until the reply is
  // there. Lets a training loop keep stepping while its next task lease or a task report is on
  // the way. Fails at once (nothing pending) when the request cannot be sent.
  virtual expected<std::uint64_t> send(request req, std::chrono::milliseconds timeout) = 0;
  // nullopt while the reply to a send() is due; else the reply, or an error once `timeout` has
  // passed or the node it went to went down (either forgets the request), or for an id that is
  // not pending (never sent, or already answered).
  virtual std::optional<expected<message>> poll(std::uint64_t id) = 0;
  // Blocks until the reply to a send() is there or `most` has passed (then poll() it), woken by the
  // reply's arrival (rpc_client: its condition variable), not a nap.
  virtual void wait(std::uint64_t id, std::chrono::milliseconds most) = 0;
  // Sends the request and waits for its reply, or fails with the send error or a timeout
  // (core_errc::io_error naming the silent node).
  virtual expected<message> call(request req, std::chrono::milliseconds timeout) = 0;
  // Sends every request and waits for all replies (in the order of `reqs`), or fails with the first
  // send error or a timeout (core_errc::io_error naming the silent nodes). Moves out each req.out.
  virtual expected<std::vector<message>> call_all(std::vector<request>& reqs,
                                                  std::chrono::milliseconds timeout) = 0;
};

// Sends `answer` (built by reply_to(request)) back to the actor that sent `request`, from `from`.
expected<void> send_reply(endpoint& net, const message& request, outbound&& answer, const std::string& from);

// Every timeout and wait limit is measured on `clk` (a manual clock in tests: a call times out when
// the test moves it past the deadline; waiting for a reply still wakes on the reply at once).
// Once `stop` is requested (a worker leaving on SIGTERM: node_runtime::leave_token), no call waits
// any more: a call or call_all in progress or to come fails within a nap (20 ms) with
// core_errc::io_error naming the nodes it waited for, and wait() returns. send() and poll() are
// unchanged (they never block).
class rpc_client final : public rpc_channel {
 public:
  // Registers `name` on the endpoint for the replies.
  static expected<std::unique_ptr<rpc_client>> create(endpoint& net, std::string name,
                                                      troupe::clock& clk = troupe::clock::system(),
                                                      std::stop_token stop = {});
  ~rpc_client() override;

  const std::string& name() const { return name_; }

  expected<std::uint64_t> send(request req, std::chrono::milliseconds timeout) override;
  std::optional<expected<message>> poll(std::uint64_t id) override;
  void wait(std::uint64_t id, std::chrono::milliseconds most) override;
  expected<message> call(request req, std::chrono::milliseconds timeout) override;
  expected<std::vector<message>> call_all(std::vector<request>& reqs,
                                          std::chrono::milliseconds timeout) override;

 private:
  rpc_client(endpoint& net, std::string name, troupe::clock& clk, std::stop_token stop)
      : net_(net), clock_(clk), name_(std::move(name)), stop_(std::move(stop)) {}
  void on_reply(const message& m);
  // The incarnation of `node` the endpoint is connected to now; nullopt when it is not connected
  // (every node's first incarnation is 0: 0 cannot mean "not connected").
  std::optional<std::uint64_t> incarnation_of(const std::string& node) const;
  // Marks a fresh id pending, stamps it on the request and sends it; forgets it if the send fails.
  expected<std::uint64_t> start(request& req, std::chrono::milliseconds timeout);
  // `sent_to`: the incarnation of each request's node just before the requests went out.
  std::string wait_all(std::unique_lock<std::mutex>& lk, const std::vector<request>& reqs,
                       const std::map<std::string, std::optional<std::uint64_t>>& sent_to,
                       const std::vector<std::uint64_t>& ids, std::chrono::milliseconds timeout);
  endpoint& net_;
  troupe::clock& clock_;
  std::string name_;
  std::stop_token stop_;
  std::atomic<std::uint64_t> last_id_{0};
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::uint64_t, std::optional<message>> pending_;
  struct in_flight {
    std::string node;
    std::optional<std::uint64_t> incarnation;  // of the node when sent; nullopt: not connected then
    troupe::clock::time_point deadline;
    std::chrono::milliseconds timeout;
  };
  std::map<std::uint64_t, in_flight> sent_;  // send() requests, by id (owned by the calling thread)
};

}  // namespace troupe::wire
