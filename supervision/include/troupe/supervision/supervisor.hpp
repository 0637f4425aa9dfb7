// The supervisor actor. CAF 0.17 has no OTP supervisors: this one monitors its children, and on
// a child's down_msg applies the child's restart type and the supervisor's strategy, restarts
// with exponential backoff under an intensity limit, and re-registers each restarted child (a
// new actor with a new id) under its stable name. Past the intensity limit it gives up: it stops
// its children in reverse start order and exits with supervision_errc::intensity_exceeded, which
// its own parent sees in the down_msg (escalation). See docs/supervision.md.
//
// Talking to a running supervisor (messages in protocol.hpp):
//   start_child(child_spec) -> caf::actor       terminate_child(name) -> unit
//   which_children() -> std::vector<child_info>  count_children() -> child_counts
// Stopping it: anon_send_exit(sup, exit_reason::user_shutdown) runs the ordered shutdown; the
// supervisor exits with that reason once every child is down. exit_reason::kill (untrappable)
// kills the children at once instead.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include <caf/fwd.hpp>

#include "troupe/core/config.hpp"
#include "troupe/supervision/backoff.hpp"
#include "troupe/supervision/child_spec.hpp"

namespace troupe::supervision {

enum class strategy {
  one_for_one,   // restart only the child that failed
  one_for_all,   // stop all others (reverse order), restart all (start order)
  rest_for_one,  // stop the children started after it (reverse order), restart those and it
};
std::string_view to_string(strategy s) noexcept;

// What happened inside a supervisor, in the order it happened; for logs, metrics and tests.
struct supervisor_event {
  enum class kind {
    child_started,      // child: name, restarts: its incarnation
    child_exited,       // child stopped (any reason); reason: rendered exit reason
    restart_scheduled,  // child: the failed child; delay: the backoff before the restart
    child_killed,       // child did not stop within its shutdown timeout
    start_failed,       // factory threw or returned no actor; reason: why
    gave_up,            // intensity exceeded; the supervisor is escalating
    stopped,            // the supervisor finished its shutdown; reason: its exit reason
  };
  kind what;
  std::string supervisor;
  std::string child;
  std::string reason;
  duration delay{0};
  std::uint32_t restarts = 0;
};
std::string_view to_string(supervisor_event::kind k) noexcept;
// Called on the supervisor's scheduler thread; must not block.
using event_hook = std::function<void(const supervisor_event&)>;

struct supervisor_config {
  std::string name = "supervisor";  // for logs and events
  strategy strat = strategy::one_for_one;
  // Intensity: at most max_restarts restarts within `window`; one more and it gives up.
  std::uint32_t max_restarts = 5;
  duration window = std::chrono::seconds(30);
  backoff_policy backoff;
  // A child that ran at least this long before failing starts its backoff from `base` again.
  duration backoff_reset_after = std::chrono::seconds(30);
  // Seeds the jitter; 0 takes a random seed.
  std::uint64_t seed = 0;
  event_hook on_event;

  // Reads strategy, max_restarts, window_ms, backoff_base_ms, backoff_max_ms, backoff_jitter,
  // backoff_reset_ms, seed from `s` (a table the embedding program names; a troupe job file has
  // none: its nodes' limits are [job] keys, docs/supervision.md) over `defaults`.
  // Problems are recorded in the section's reader (see config_reader::finish).
  static supervisor_config read(config_section s, supervisor_config defaults);
  // Checks the numbers (jitter in [0,1], base <= max, ...); the error names the field.
  expected<void> validate() const;
};

// Spawns a supervisor that starts `children` in order when it first runs (on a scheduler
// thread, so they may not be registered yet when this returns: an answered request to the
// supervisor, e.g. count_children, proves they are). If one fails to start, the ones already
// started are stopped (reverse order) and the supervisor exits with start_failed. `names` must
// outlive the supervisor. Keep the returned handle: CAF terminates an actor nobody references
// (exit_reason::unreachable), and a supervisor that dies kills its children. The handle is not
// monitored: spawn it as a child of another supervisor (supervisor_child) or use node_root to
// see it escalate.
caf::actor spawn_supervisor(caf::actor_system& system, name_registry& names, supervisor_config cfg,
                            std::vector<child_spec> children);

// A child spec whose child is itself a supervisor (a subtree). Its shutdown timeout should cover
// its own children's.
child_spec supervisor_child(std::string name, supervisor_config cfg, std::vector<child_spec> children,
                            restart_type restart = restart_type::permanent,
                            std::chrono::milliseconds shutdown = std::chrono::seconds(60));

}  // namespace troupe::supervision
