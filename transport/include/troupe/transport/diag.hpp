// Diagnostics on top of an endpoint: an echo service, a round-trip prober and a bulk-throughput
// prober. `troupe net serve|ping`, the tests and bench/transport use them.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

#include "troupe/core/error.hpp"
#include "troupe/transport/endpoint.hpp"

namespace troupe {

// Registers `name`: a Ping is answered with a Pong carrying the same seq, timestamp and payload,
// sent back to the pinger's (node, from name), unless the ping says noReply (bulk traffic).
expected<void> install_echo(endpoint& ep, const std::string& name = "echo");

struct ping_options {
  std::string node;  // peer node name (from connect())
  std::string name = "echo";
  std::size_t count = 1000;  // measured round trips
  std::size_t warmup = 100;  // round trips before measuring
  std::size_t payload_bytes = 32;
  std::chrono::milliseconds timeout{30'000};
  // Round trips and the timeout are measured on it.
  std::reference_wrapper<troupe::clock> clock{troupe::clock::system()};
};

struct ping_result {
  std::size_t count = 0, payload_bytes = 0;
  double min_us = 0, p50_us = 0, p90_us = 0, p99_us = 0, max_us = 0, mean_us = 0;
};

// One ping in flight at a time; the next is sent from the pong's handler on the io thread, so a
// round trip is wire + two handler dispatches, no thread hop. Not from the io thread.
expected<ping_result> run_ping(endpoint& ep, const ping_options& o);

struct bulk_options {
  std::string node;
  std::string name = "echo";
  std::size_t frame_bytes = 1u << 20;  // payload per frame
  std::size_t frames = 1000;
  std::chrono::milliseconds timeout{60'000};
  // The transfer time and the timeout are measured on it.
  std::reference_wrapper<troupe::clock> clock{troupe::clock::system()};
};

struct bulk_result {
  std::size_t frames = 0, frame_bytes = 0;
  double seconds = 0, gbit_per_s = 0;
};

// Streams `frames` no-reply pings whose payload references one static buffer (zero-copy through
// the builder), then one ping with a reply: the time to that pong is the time to move all bytes.
expected<bulk_result> run_bulk(endpoint& ep, const bulk_options& o);

}  // namespace troupe
