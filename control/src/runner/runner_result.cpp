// How a job that did not finish ends: the disk-fault deadline, and the final JSON line of a job
// that failed, was stopped or was interrupted (the same shape as a finished job's, without test_*).
#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include "runner.hpp"

namespace troupe::control {

std::string runner::disk_fault_expired() {
  std::unique_lock lk(mu_);
  std::string fault = status_.fault;
  lk.unlock();
  auto now = steady::now();
  if (fault.empty()) {
    if (fault_since_ != steady::time_point{}) spdlog::info("the disk fault is over: the job resumes");
    fault_since_ = {};
    return {};
  }
  if (fault_since_ == steady::time_point{}) {
    fault_since_ = now;
    spdlog::error("job paused: {} (it fails after {} s unless the disk recovers: job.disk_full_timeout_ms)",
                  fault, spec_.job.disk_full_timeout.count() / 1000.0);
  }
  if (now - fault_since_ < spec_.job.disk_full_timeout) return {};
  return std::string("job failed: ")
      .append(fault)
      .append(" for more than ")
      .append(std::to_string(spec_.job.disk_full_timeout.count()))
      .append(" ms (job.disk_full_timeout_ms)");
}

std::string runner::unfinished_json(int rc) {
  std::unique_lock lk(mu_);
  const job_status s = status_;
  lk.unlock();
  if (!dir_) return {};
  nlohmann::json j;
  j["job"] = dir_->job_id();
  j["strategy"] = spec_.job.strategy;
  j["model"] = spec_.nn.model.type;
  j["ok"] = false;
  j["exit_code"] = rc;
  j["reason"] = !fatal_.empty() ? fatal_ : !end_reason_.empty() ? end_reason_ : "ended without a result";
  j["samples_trained"] = s.samples_total;
  j["tasks_done"] = s.tasks.done;
  j["tasks_failed"] = s.tasks.failed;
  j["tasks_requeued"] = s.tasks.requeued;
  return j.dump();
}

}  // namespace troupe::control
