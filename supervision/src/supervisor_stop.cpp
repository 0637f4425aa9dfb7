// The stopping half of the supervisor: ordered, one child at a time, each with its shutdown
// timeout, then the supervisor's own exit.
#include <spdlog/spdlog.h>

#include "supervisor_actor.hpp"

namespace troupe::supervision {

void supervisor_actor::enqueue_stop(std::vector<std::string> names, after_stop then,
                                    std::function<void()> done) {
  stop_jobs_.push_back(stop_job{std::deque<std::string>(names.begin(), names.end()), then, std::move(done)});
  pump_stops();
}

// Advances the front job until it waits for a child's down_msg or the queue is empty. `done`
// continuations may enqueue jobs (re-entering here); no reference into the queue is held across them.
void supervisor_actor::pump_stops() {
  while (stopping_.empty() && !stop_jobs_.empty()) {
    auto& job = stop_jobs_.front();
    if (job.names.empty()) {
      auto done = std::move(job.done);
      stop_jobs_.pop_front();
      if (done) done();
      continue;
    }
    auto name = std::move(job.names.front());
    job.names.pop_front();
    auto i = index_of(name);
    if (i < 0) continue;  // gone meanwhile (temporary child exited, terminated)
    auto idx = static_cast<std::size_t>(i);
    if (children_[idx].status == child_status::running)
      stop_one(idx);  // sets stopping_: the loop ends and the child's down_msg resumes it
    else
      apply_after(idx, job.then);
  }
}

void supervisor_actor::stop_one(std::size_t idx) {
  auto& c = children_[idx];
  c.status = child_status::stopping;
  stopping_ = c.spec.name;
  if (c.spec.shutdown.count() == 0) {
    emit(supervisor_event::kind::child_killed, c.spec.name, "shutdown timeout 0");
    send_exit(c.handle, caf::exit_reason::kill);
    return;
  }
  send_exit(c.handle, caf::exit_reason::user_shutdown);
  delayed_send(this, c.spec.shutdown, kill_atom::value, c.spec.name, c.generation);
}

void supervisor_actor::apply_after(std::size_t idx, after_stop then) {
  auto& c = children_[idx];
  switch (then) {
    case after_stop::remove:
      remove_child(c.spec.name);
      break;
    case after_stop::restart:
      // Temporary children are never restarted, not even with their siblings.
      if (c.spec.restart == restart_type::temporary)
        remove_child(c.spec.name);
      else
        c.status = child_status::restarting;
      break;
    case after_stop::keep:
      c.status = child_status::stopped;
      break;
  }
}

void supervisor_actor::begin_shutdown(caf::error reason) {
  if (shutting_down_) return;
  shutting_down_ = true;
  exit_reason_ = std::move(reason);
  std::vector<std::string> order;
  for (auto it = children_.rbegin(); it != children_.rend(); ++it) order.push_back(it->spec.name);
  enqueue_stop(std::move(order), after_stop::keep, [this] {
    auto why = render(exit_reason_);
    spdlog::info("supervisor '{}': stopped ({})", cfg_.name, why);
    emit(supervisor_event::kind::stopped, "", why);
    quit(exit_reason_);
  });
}

}  // namespace troupe::supervision
