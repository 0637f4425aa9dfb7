// How a supervisor starts, restarts and stops one child.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include <caf/fwd.hpp>

#include "troupe/core/error.hpp"

namespace troupe::supervision {

class name_registry;

// When a child that stopped is started again (Erlang/OTP's restart types).
enum class restart_type {
  permanent,  // always, whatever the exit reason
  transient,  // only after an abnormal exit (not normal, not user_shutdown)
  temporary,  // never; the child is forgotten when it stops
};
std::string_view to_string(restart_type t) noexcept;

// What a factory gets. References are valid only during the call.
struct spawn_context {
  caf::actor_system& system;
  name_registry& names;
  const std::string& name;  // the child's stable name
  std::uint32_t restarts;   // 0 at the first start, then 1, 2, ... (the incarnation)
  const caf::actor& supervisor;
};

// Spawns the child and returns its handle. It may throw (a std::exception or anything): the
// supervisor catches it and counts a failed start. Returning an invalid handle is a failed start.
// The supervisor monitors the child; the factory must not link it to the supervisor.
using child_factory = std::function<caf::actor(spawn_context&)>;

struct child_spec {
  std::string name;  // stable name, registered in the name_registry (valid_actor_name)
  child_factory start;
  restart_type restart = restart_type::permanent;
  // How long a child may take to stop after exit_reason::user_shutdown before it is killed
  // (exit_reason::kill, which no actor can trap). Zero kills at once.
  std::chrono::milliseconds shutdown = std::chrono::milliseconds(5000);
};

// Checks name, factory and shutdown; the error (invalid_spec) names the child and the problem.
expected<void> validate(const child_spec& spec);

}  // namespace troupe::supervision
