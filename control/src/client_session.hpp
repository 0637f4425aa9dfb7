// What client.cpp (status, scale) and client_stop.cpp (stop) share: a session with a job's runner
// over the transport, and what the job directory says when the runner cannot be asked.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "troupe/cluster/job_dir.hpp"
#include "troupe/core/error.hpp"
#include "troupe/transport/endpoint.hpp"
#include "troupe/wire/rpc.hpp"

namespace troupe::control::client_detail {

struct session {
  std::unique_ptr<endpoint> net;
  std::unique_ptr<wire::rpc_client> rpc;
  ~session() {
    rpc.reset();
    net.reset();
  }
};

// The job's result.json; not an object when it left none (or a torn one).
nlohmann::json read_result(const cluster::job_dir& dir);
// How a job no runner runs ended ("" when it left no result).
std::string ended_as(const cluster::job_dir& dir);
// The pid of `dir`'s runner while it has not started its nodes (no nodes.json yet: nothing to reach
// it at); nullopt when no runner runs it, or once it has.
std::optional<int> starting_runner(const cluster::job_dir& dir);
// Why the runner at `address` could not be reached. Its master finished the job and the runner,
// ending it, stopped listening: said so (it read "connect failed ... is it still running?" of a
// runner that ran on and finished the job).
error unreachable_runner(const cluster::job_dir& dir, const std::string& address, error e);
// The session with `job_dir`'s runner; with `clean_dead` (stop), a job whose runner died has its
// shared-memory leftovers removed as well as being said not running.
expected<std::unique_ptr<session>> connect_runner(const std::string& job_dir, bool clean_dead = false);

}  // namespace troupe::control::client_detail
