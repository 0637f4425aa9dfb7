// One inference request as the front end holds it from its parse to its answer.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "troupe/core/clock.hpp"

namespace troupe::serve {

// Why a request got no logits; routes.cpp turns each into its HTTP status.
enum class failure {
  none,
  queue_full,       // 503 with Retry-After: past max_queue_rows
  not_ready,        // 503: no replica serves the model yet
  timed_out,        // 504: still queued after request_timeout
  model_failed,     // 500: forward failed on the batch (its message)
  replicas_failed,  // 503: sent to max_attempts replicas, each died or hung on it
  shutting_down,    // 503: the server is stopping
  bad_rows,         // 400: raw rows the model version they went to cannot encode (a swap since)
};

struct outcome {
  failure why = failure::none;
  std::string message;        // for a failure
  std::vector<float> logits;  // [rows, width]
  std::size_t width = 0;
  std::string version;  // the model version that answered
  std::uint32_t generation = 0;
};

struct request {
  std::uint64_t id = 0;
  // The input, immutable once submitted (batches read it on other threads, without the lock).
  std::size_t rows = 0;
  std::vector<float> dense;       // [rows, dense_dim]
  std::vector<std::int64_t> ids;  // [rows, fields] or empty
  // Raw rows (/rows) are encoded by one model version's encoder: `generation` is its generation (0:
  // inputs as the client sent them, fit for any generation a swap accepts), and `reencode` encodes
  // the rows again, into this request, as generation g's encoder does ("" done, else why not).
  std::uint32_t generation = 0;
  std::function<std::string(request&, std::uint32_t g)> reencode;
  clock::time_point arrived{}, deadline{};
  // Under the core's lock:
  int attempts = 0;  // replicas it was sent to
  // Sent in a batch of its own: its last batch failed in the model, and each of that batch's requests
  // goes again alone, so that only the one the model fails on is answered with the error.
  bool alone = false;
  // Called once, with the lock released, on whichever thread finished it.
  std::function<void(outcome&&)> done;
};
using request_ptr = std::shared_ptr<request>;

}  // namespace troupe::serve
