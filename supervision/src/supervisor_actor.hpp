// The supervisor actor's class (private; spawn it with spawn_supervisor). The message handlers
// and restart logic are in supervisor_actor.cpp, the stopping machinery in supervisor_stop.cpp.
//
// Stopping is sequential: one stop job at a time, one child at a time within a job, in the order
// given (reverse start order). A child asked to stop gets exit_reason::user_shutdown and a kill
// timer of its shutdown timeout; its down_msg completes the step and applies the job's
// after-action (remove it, mark it for restart, or keep it stopped).
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include <caf/actor_clock.hpp>
#include <caf/event_based_actor.hpp>

#include "troupe/supervision/backoff.hpp"
#include "troupe/supervision/name_registry.hpp"
#include "troupe/supervision/protocol.hpp"
#include "troupe/supervision/supervisor.hpp"

namespace troupe::supervision {

// Self-messages: a restart timer fired / a child's shutdown timeout passed.
using restart_atom = caf::atom_constant<caf::atom("sup_rstrt")>;
using kill_atom = caf::atom_constant<caf::atom("sup_kill")>;

class supervisor_actor : public caf::event_based_actor {
 public:
  supervisor_actor(caf::actor_config& cfg, name_registry* names, supervisor_config conf,
                   std::vector<child_spec> specs);

  caf::behavior make_behavior() override;
  void on_exit() override;
  const char* name() const override { return "troupe.supervisor"; }

 private:
  using time_point = caf::actor_clock::time_point;

  struct child {
    child_spec spec;
    caf::actor handle;  // valid while running or stopping
    child_status status = child_status::restarting;
    std::uint32_t restarts = 0;    // incarnation: restarts so far
    std::uint32_t attempt = 0;     // consecutive failures, drives the backoff
    std::uint64_t generation = 0;  // bumped at each spawn; tags kill timers
    time_point started_at{};
  };
  enum class after_stop { remove, restart, keep };
  struct stop_job {
    std::deque<std::string> names;
    after_stop then;
    std::function<void()> done;
  };

  // Message handlers.
  void start_initial_children(std::vector<child_spec> specs);
  caf::result<caf::actor> handle_start_child(child_spec& spec);
  caf::response_promise handle_terminate_child(const std::string& name);
  std::vector<child_info> handle_which_children() const;
  child_counts handle_count_children() const;
  void handle_down(const caf::down_msg& msg);
  void handle_exit(const caf::exit_msg& msg);
  void handle_restart(const std::vector<std::string>& names);
  void handle_kill_timer(const std::string& name, std::uint64_t generation);

  // Children and restarts.
  std::ptrdiff_t index_of(std::string_view name) const;
  std::ptrdiff_t index_of(const caf::actor_addr& addr) const;
  caf::error spawn_child(std::size_t idx);
  void handle_failure(std::size_t idx, const caf::error& reason);
  void restart_by_strategy(std::size_t idx, duration delay);
  std::vector<std::string> restart_group(std::size_t idx) const;
  void schedule_restart(std::vector<std::string> names, duration delay);
  void give_up(const std::string& child_name, const caf::error& reason);
  void remove_child(const std::string& name);

  // Stopping (supervisor_stop.cpp).
  void enqueue_stop(std::vector<std::string> names, after_stop then, std::function<void()> done);
  void pump_stops();
  void stop_one(std::size_t idx);
  void apply_after(std::size_t idx, after_stop then);
  void begin_shutdown(caf::error reason);

  void emit(supervisor_event::kind what, const std::string& child, std::string reason = {},
            duration delay = duration::zero(), std::uint32_t restarts = 0);
  std::string render(const caf::error& e) const;

  name_registry* names_;
  supervisor_config cfg_;
  std::vector<child_spec> initial_;
  std::vector<child> children_;  // in start order; dynamic children appended
  std::deque<stop_job> stop_jobs_;
  std::string stopping_;  // the child the front stop job waits for; empty when none
  intensity_window intensity_;
  std::mt19937_64 rng_;
  bool shutting_down_ = false;
  caf::error exit_reason_;
};

}  // namespace troupe::supervision
