// The front end's scheduling core: requests in, batches out to replicas, results back to the
// requests. It owns the batcher and the dispatcher behind one lock and does its I/O (sending a
// batch, answering a request) only after releasing it, through the replica_link and each
// request's `done`.
//
// Contract:
// - Thread-safe: HTTP threads submit, the transport's io thread reports results and replicas
//   coming and going, the front end's ticker calls tick(). Nothing blocks under the lock.
// - Every admitted request is answered exactly once: with the logits of one batch computed by one
//   replica (one model version), or with a failure (timed out in the queue, refused by forward,
//   max_attempts replicas lost while holding it, shutdown). A batch whose replica dies, hangs past
//   replica_timeout or cannot be sent to goes back to the front of the queue and is sent again
//   (its requests re-batched, never split).
// - New batches go to ready replicas of the active generation only; activate(g) makes g active and
//   drains the older generations (their batches in flight finish there); tick() names the drained
//   replicas once, to be stopped, and the hung ones, to be fenced.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "batcher.hpp"
#include "dispatcher.hpp"
#include "serve_metrics.hpp"

namespace troupe::serve {

class replica_link {
 public:
  virtual ~replica_link() = default;
  // Sends the rows of `requests` as batch `batch_id` to `node`; false when it cannot now (not
  // connected, its queue full). Called without the core's lock, on the caller's thread.
  virtual bool send_batch(const std::string& node, std::uint64_t batch_id,
                          const std::vector<request_ptr>& requests, std::size_t rows) = 0;
};

struct replica_ref {
  std::string node;
  std::uint64_t incarnation = 0;
  bool operator==(const replica_ref&) const = default;
};

struct core_options {
  batch_limits limits;
  std::size_t pipeline = 2;
  clock::duration replica_timeout = std::chrono::seconds(10);
  int max_attempts = 3;
};

struct core_stats {
  std::uint32_t active = 0;
  std::size_t queued_requests = 0, queued_rows = 0, inflight_batches = 0;
  std::size_t ready = 0;  // ready replicas of the active generation
  std::vector<replica_info> replicas;
};

class serving_core {
 public:
  serving_core(core_options options, replica_link& link, serve_metrics& metrics, troupe::clock& clk);

  // Queues the request (its `done` is called later) and returns failure::none, or refuses it at
  // once (queue_full, shutting_down) without calling `done`.
  failure submit(request_ptr r);

  void add_replica(const std::string& node, std::uint64_t incarnation, std::uint32_t generation,
                   std::size_t slot);
  bool replica_ready(const std::string& node, std::uint64_t incarnation, const std::string& version,
                     const std::string& placement, int pid);
  // The replica is gone (its connection closed, its process exited): its batches are sent again.
  void replica_gone(const std::string& node, std::optional<std::uint64_t> incarnation);
  // A replica's InferResult. `logits` is [rows, width]; `error` non-empty when forward failed.
  void result(std::uint64_t batch_id, const float* logits, std::size_t rows, std::size_t width,
              const std::string& error, const std::string& version, std::uint32_t forward_us);

  void activate(std::uint32_t generation);

  struct tick_result {
    std::vector<replica_ref> fence;         // replicas holding a batch past replica_timeout, or unreachable
    std::vector<std::string> stop;          // drained replicas of older generations
    std::optional<clock::time_point> next;  // when the next tick has work (a batch due, a deadline)
  };
  tick_result tick();

  // Refuses new requests from now on (shutting_down); queued and in-flight ones go on.
  void stop_accepting();
  // Waits until nothing is queued and nothing in flight, or until `deadline` on the core's clock;
  // true when idle.
  bool wait_idle(clock::time_point deadline);
  // Refuses new requests and answers every queued and in-flight one with shutting_down: afterwards
  // the core holds no request (nor its `done`).
  void shutdown();

  core_stats stats() const;

 private:
  struct effects {
    std::vector<std::pair<request_ptr, outcome>> answers;
    struct send {
      std::string node;
      std::uint64_t incarnation;
      std::uint64_t batch_id;
      std::vector<request_ptr> requests;
      std::size_t rows;
    };
    std::vector<send> sends;
  };
  // Cuts and records the batches that can go now (lock held).
  void pump(effects& fx);
  // `requests` as generation `gen`'s replicas take them: raw rows another generation encoded are
  // encoded again (request::reencode); those it cannot encode are answered (fx) and left out.
  std::vector<request_ptr> encoded_for(std::vector<request_ptr> requests, std::uint32_t gen, effects& fx);
  // A batch back from a lost replica: its requests to the front, or failed past max_attempts.
  void requeue(batch&& b, const std::string& why, effects& fx);
  // A batch the model failed on: its requests to the front, each to go in a batch of its own.
  void retry_alone(std::vector<request_ptr>& requests);
  // The gauges set, and wait_idle's waiters woken once the core is idle (lock held: after every
  // change to the queue or the batches in flight).
  void update_gauges();
  bool idle_locked() const { return queue_.size() == 0 && replicas_.inflight_batches() == 0; }
  // Sends and answers with the lock released; a send that fails puts its batch back.
  void apply(effects&& fx);

  core_options opt_;
  replica_link& link_;
  serve_metrics& metrics_;
  troupe::clock& clock_;
  mutable std::mutex mu_;
  std::condition_variable idle_cv_;
  batcher queue_;
  dispatcher replicas_;
  std::uint32_t active_ = 0;
  bool stopped_ = false;
  std::vector<replica_ref> unreachable_;  // sends failed: fenced at the next tick
};

}  // namespace troupe::serve
