// A node leaving on SIGTERM (Slurm's preemption, scancel, a scale-down by the runner): it tells the
// master itself rather than letting its death be noticed, so its leases are re-queued and its ring
// rebuilt while the process is still shutting down (docs/job.md, "Leaving on SIGTERM").
#include <spdlog/spdlog.h>

#include "node_runtime.hpp"
#include "troupe/wire/messages.hpp"

namespace troupe::actors {

bool node_runtime::leave(const std::string& reason) {
  if (!leaving_.request_stop()) return true;  // already leaving
  // A master that goes away (the whole job stopping) will not answer: stop waiting then.
  {
    std::lock_guard lk(mu_);
    down_fns_.push_back([this](const peer_event& e) {
      if (e.node.name != "master") return;
      std::lock_guard lk2(mu_);
      master_lost_ = true;
      left_cv_.notify_all();
    });
  }
  if (!net_->connected("master")) return false;
  if (auto s = net_->send("master", "master", wire::node_exited(who_.id, reason), "node"); !s) {
    spdlog::warn("{}: cannot tell the master it leaves: {}", who_.id.to_string(), s.err().to_string());
    return false;
  }
  return true;
}

bool node_runtime::await_left(std::chrono::milliseconds limit) {
  std::unique_lock lk(mu_);
  left_cv_.wait_for(lk, limit, [this] { return left_ || master_lost_; });
  return left_;
}

}  // namespace troupe::actors
