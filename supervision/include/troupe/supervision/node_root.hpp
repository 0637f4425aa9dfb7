// The root supervisor of a node process (`troupe node`, the master node of `troupe run`).
//
// A node's root has no parent to escalate to: when it gives up (or fails to start), the node is
// beyond self-repair and the process must die visibly, so peers see the connection drop and the
// launcher can start a replacement. The escalation hook does that; tests inject their own.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <caf/fwd.hpp>

#include "troupe/core/clock.hpp"
#include "troupe/supervision/supervisor.hpp"

namespace troupe::supervision {

// Called once, on a CAF thread, with the rendered exit reason when the root exits abnormally
// (anything but a normal exit or user_shutdown).
using escalation_hook = std::function<void(const std::string& reason)>;

// The process hook: logs "root supervisor gave up: <reason>" at critical level, flushes the
// logs and ends the process with `exit_code` (std::_Exit: CAF threads are still running, so
// static destructors must not run).
escalation_hook exit_process_hook(int exit_code = 1);

class node_root {
 public:
  struct state;
  explicit node_root(std::shared_ptr<state> s) : state_(std::move(s)) {}

  const caf::actor& supervisor() const;
  // The rendered exit reason once the root has exited ("" for a normal exit).
  std::optional<std::string> exit_reason() const;
  bool terminated() const { return exit_reason().has_value(); }

  // Starts the ordered shutdown (exit_reason::user_shutdown) and, with a real scheduler, waits up
  // to `timeout` for the root to finish. Returns whether it did. Do not wait on a test coordinator
  // (timeout zero just sends the request). The timeout is measured on `clk`.
  bool shutdown(std::chrono::milliseconds timeout, troupe::clock& clk = troupe::clock::system());
  // Waits until the root has exited or `timeout` passed on `clk`; returns whether it exited.
  bool wait_for(std::chrono::milliseconds timeout, troupe::clock& clk = troupe::clock::system()) const;

 private:
  std::shared_ptr<state> state_;
};

// Spawns the root supervisor with `children` and watches it. `names` must outlive the system's
// actors. Register the error renderer (add_supervision_error_category) in the system's config
// so the logged reason is readable.
node_root run_node_root(caf::actor_system& system, name_registry& names, supervisor_config cfg,
                        std::vector<child_spec> children, escalation_hook on_escalate = exit_process_hook(1));

}  // namespace troupe::supervision
