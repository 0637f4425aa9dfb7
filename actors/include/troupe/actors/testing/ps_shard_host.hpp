// For benchmarks and tests: the real PS shard actor (spawn_ps_shard) in an actor system of its own,
// reached over a real transport endpoint as node "ps-0" (the name "ps" on the endpoint goes to the
// actor's mailbox, as a node delivers it; the shard's replies go back over the endpoint). The shard
// sees a node with an identity, the job's spec, send() and the system clock, and no membership
// (there is no master). ps_bench drives one.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "troupe/core/error.hpp"
#include "troupe/job/data.hpp"
#include "troupe/job/job_spec.hpp"

namespace troupe::actors::testing {

class ps_shard_host {
 public:
  // A shard of `spec` over `data`, its checkpoints under `work`, listening on host:port (port 0:
  // any); the endpoint's token is "ps-bench". Errors: the endpoint's (create, listen).
  static expected<std::unique_ptr<ps_shard_host>> start(const job::job_spec& spec,
                                                        const job::prepared_data& data,
                                                        const std::string& work, const std::string& host,
                                                        std::uint16_t port);
  // Stops the shard, waits until its actor is gone, then closes the endpoint.
  ~ps_shard_host();
  ps_shard_host(const ps_shard_host&) = delete;
  ps_shard_host& operator=(const ps_shard_host&) = delete;

  // The address the shard listens on.
  const std::string& bound() const;

 private:
  struct impl;
  explicit ps_shard_host(std::unique_ptr<impl> i);
  std::unique_ptr<impl> impl_;
};

}  // namespace troupe::actors::testing
