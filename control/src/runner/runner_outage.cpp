// The cluster manager going away mid-job (Slurm: slurmctld down). Running nodes do not need it
// (slurmd keeps its jobs running), so the job trains on: the runner warns once, shows it on the
// progress line and fails (exit 1) only when the controller has not answered for
// [cluster] controller_timeout_s. Node exits meanwhile are reported when it answers again. Every
// Slurm job the runner submitted is cancelled at the end; while the controller does not answer,
// the end waits up to controller_timeout_s more for it, then names the jobs it could not cancel.
#include <spdlog/spdlog.h>

#include "runner.hpp"

namespace troupe::control {

std::string runner::check_outage() {
  auto o = launcher_->outage();
  if (!o) {
    if (!outage_note_.empty()) {
      spdlog::info("the cluster manager answers again");
      outage_note_.clear();
      scale_to(slots_.target());  // workers it could not take meanwhile (troupe scale)
    }
    return {};
  }
  // The launcher reads the runner's clock (make_launcher in runner_setup.cpp): `since` is on it.
  double down = std::chrono::duration<double>(clock_.now() - o->since).count(),
         limit = spec_.cluster.controller_timeout_s;
  if (outage_note_.empty())
    spdlog::warn(
        "the Slurm controller does not answer ({}): the nodes train on, their exits are seen when it "
        "answers again; the job fails if it does not within {:.0f} s",
        o->why, limit);
  outage_note_ = "  SLURM CONTROLLER NOT ANSWERING for " + std::to_string(static_cast<int>(down)) + " s";
  if (down < limit) return {};
  return "the Slurm controller has not answered for " + std::to_string(static_cast<int>(down)) +
         " s (controller_timeout_s " + std::to_string(static_cast<int>(limit)) + "): " + o->why;
}

void runner::cancel_left_jobs() {
  if (launcher_->running().empty() || !launcher_->outage()) return;
  double limit = spec_.cluster.controller_timeout_s;
  spdlog::warn(
      "{} Slurm jobs not cancelled yet: the controller does not answer; waiting up to {:.0f} s for it",
      launcher_->running().size(), limit);
  auto deadline = clock_.now() + std::chrono::milliseconds(static_cast<std::int64_t>(limit * 1000));
  while (!launcher_->running().empty() && clock_.now() < deadline) launcher_->kill_all();
  auto left = launcher_->running();
  if (left.empty()) return spdlog::info("the controller answered: every Slurm job of the job is cancelled");
  std::string ids;
  for (const auto& h : left) ids.append(" ").append(std::to_string(h.pid));
  spdlog::error("the Slurm controller did not answer: jobs{} are left; cancel them once it does: scancel{}",
                ids, ids);
}

}  // namespace troupe::control
