// The task queue of ElasticDL's design (TODO/DOING/DONE) in etcd 3.4, over its v3 JSON gateway
// (HTTP/1.1 keep-alive, one connection per client as each worker would have): the peer the
// control-plane bench measures troupe's dispenser against.
//
// A lease: a range read of the first `window` keys under todo/ (the client picks one of them at
// random so that clients do not all race for the first), then one transaction that moves it to
// doing/ if its mod revision is still the one read (compare MOD == rev; a lost race retries). A
// report: one transaction that moves doing/<id> to done/<id>. etcd fsyncs its WAL on every commit.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

namespace troupe::bench {

class etcd_client {
 public:
  // Connects to 127.0.0.1:`port` (throws std::runtime_error when it cannot).
  explicit etcd_client(std::uint16_t port, std::uint64_t seed);
  ~etcd_client();
  etcd_client(const etcd_client&) = delete;
  etcd_client& operator=(const etcd_client&) = delete;

  // Puts todo/<id> for ids [first, first + n), up to 128 per transaction (etcd's --max-txn-ops).
  void fill(std::uint64_t first, std::uint64_t n);
  // Leases a todo task to `holder`; nullopt when todo is empty or, after a lost race, `go` is
  // false (the phase is over). `conflicts` counts lost races.
  std::optional<std::uint64_t> lease(const std::string& holder, unsigned window, std::uint64_t& conflicts,
                                     const std::atomic<bool>& go);
  // doing/<id> -> done/<id>.
  void report(std::uint64_t id);

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

// Waits until etcd at 127.0.0.1:`port` answers /health (true) or `seconds` passed (false).
bool etcd_wait_healthy(std::uint16_t port, double seconds);

}  // namespace troupe::bench
