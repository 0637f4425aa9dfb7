#include "troupe/supervision/node_root.hpp"

#include <condition_variable>
#include <cstdlib>
#include <mutex>

#include <spdlog/spdlog.h>

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>
#include <caf/send.hpp>

#include "troupe/supervision/caf_errors.hpp"

namespace troupe::supervision {

struct node_root::state {
  caf::actor root;
  mutable std::mutex mu;
  mutable std::condition_variable cv;
  std::optional<std::string> reason;
};

escalation_hook exit_process_hook(int exit_code) {
  return [exit_code](const std::string& reason) {
    spdlog::critical("root supervisor gave up: {}; exiting with code {}", reason, exit_code);
    if (auto logger = spdlog::default_logger()) logger->flush();
    std::_Exit(exit_code);
  };
}

const caf::actor& node_root::supervisor() const {
  return state_->root;
}

std::optional<std::string> node_root::exit_reason() const {
  std::lock_guard<std::mutex> g(state_->mu);
  return state_->reason;
}

bool node_root::shutdown(std::chrono::milliseconds timeout, troupe::clock& clk) {
  if (state_->root) caf::anon_send_exit(state_->root, caf::exit_reason::user_shutdown);
  return timeout.count() > 0 ? wait_for(timeout, clk) : terminated();
}

bool node_root::wait_for(std::chrono::milliseconds timeout, troupe::clock& clk) const {
  std::unique_lock<std::mutex> g(state_->mu);
  return troupe::wait_until(clk, state_->cv, g, clk.now() + timeout,
                            [this] { return state_->reason.has_value(); });
}

node_root run_node_root(caf::actor_system& system, name_registry& names, supervisor_config cfg,
                        std::vector<child_spec> children, escalation_hook on_escalate) {
  auto st = std::make_shared<node_root::state>();
  st->root = spawn_supervisor(system, names, std::move(cfg), std::move(children));
  // Weak: the functor is stored in the root itself, a strong reference would be a cycle.
  std::weak_ptr<node_root::state> weak = st;
  st->root->attach_functor([weak, &system, hook = std::move(on_escalate)](const caf::error& reason) {
    auto why = is_normal_exit(reason) ? std::string{} : system.render(reason);
    if (auto s = weak.lock()) {
      std::lock_guard<std::mutex> g(s->mu);
      s->reason = why;
      s->cv.notify_all();
    }
    if (!why.empty() && hook) hook(why);
  });
  return node_root(std::move(st));
}

}  // namespace troupe::supervision
