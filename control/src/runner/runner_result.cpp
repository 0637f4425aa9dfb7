// How a job ends, whatever the way: its nodes stopped, its shared memory removed, nodes.json
// final, and result.json written with the outcome and the reason (finished, failed, stopped,
// interrupted), then printed as the runner's final line; and the deadline of a disk fault.
#include <cstdio>
#include <filesystem>

#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include "runner.hpp"
#include "troupe/cluster/run_tool.hpp"
#include "troupe/collective/cleanup.hpp"
#include "troupe/storage/task_journal.hpp"

namespace troupe::control {

int runner::finish(int rc) {
  if (net_) poll_status(true);
  if (launcher_) shutdown_nodes();
  if (dir_ && !instance_.empty())
    collective::remove_job_leftovers(collective::instance_key(dir_->job_id(), instance_));
  print_progress(true);
  if (!dir_) return rc;
  ended_ = clock_.now();  // the job's time; writing its model is reported apart (model_seconds)
  if (rc == 0 && result_ok_ && spec_.job.strategy != "predict") export_model();
  auto text = final_json(rc);
  timeline_.job_end(end_state_, end_reason_);
  if (auto w = cluster::write_file_atomic(dir_->result_path(), text + "\n"); !w)
    spdlog::warn("{}", w.err().to_string());
  if (rc == 0)
    spdlog::info("job {} {}: {}", dir_->job_id(), end_state_, end_reason_);
  else
    spdlog::error("job {} {}: {}", dir_->job_id(), end_state_, end_reason_);
  std::printf("%s\n", text.c_str());
  std::fflush(stdout);
  return rc;
}

namespace {
// Why a job whose master reported it failed did: how many tasks were quarantined and the last error
// the journal holds for them (a damaged record store names its file and page there).
std::string quarantine_reason(const cluster::job_dir& dir) {
  std::string generic = "the master reported the job failed (quarantined tasks: see the tasks counts)";
  auto journal = storage::task_journal::open(dir.journal_dir());
  if (!journal) return generic;
  auto failed = journal->list(storage::task_state::failed);
  if (!failed || failed->empty()) return generic;
  const auto& last = failed->back();
  return std::to_string(failed->size()) + " task(s) quarantined after " + std::to_string(last.failures) +
         " failures each; task " + std::to_string(last.id) + " last failed with: " + last.last_error;
}
}  // namespace

// The master's final metrics when it sent them, else the last counts it reported; with what only
// the runner knows: the outcome and its reason, wall time, node relaunches, the planted model's AUC.
std::string runner::final_json(int rc) {
  nlohmann::json j = nlohmann::json::object();
  std::unique_lock lk(mu_);
  if (!result_json_.empty()) {
    auto m = nlohmann::json::parse(result_json_, nullptr, false);
    if (m.is_object()) j = std::move(m);
  } else if (status_.valid) {
    auto s = wire::to_json(status_);
    j["tasks"] = s["tasks"];
    j["samples_total"] = s["samples_total"];
  }
  const bool master_finished = finished_, has_result = !result_json_.empty();
  lk.unlock();
  if (end_state_.empty()) {
    end_state_ = rc == 0 ? "finished" : "failed";
    if (rc == 0)
      end_reason_ = "every task done";
    else if (!fatal_.empty())
      end_reason_ = fatal_;
    else if (master_finished && j.contains("error") && j["error"].is_string())
      end_reason_ = j["error"].get<std::string>();  // the master's own word (a failed evaluation)
    else if (master_finished)
      end_reason_ = quarantine_reason(*dir_);
    else
      end_reason_ = "failed";
  }
  if (!has_result) {  // no result: what the runner knows of the work done
    j["strategy"] = spec_.job.strategy;
    j["model"] = spec_.nn.model.type;
    if (j.contains("tasks")) {
      j["tasks_done"] = j["tasks"]["done"];
      j["tasks_failed"] = j["tasks"]["failed"];
      j["tasks_requeued"] = j["tasks"]["requeued"];
      j["samples_trained"] = j["samples_total"];
    }
  }
  j["job"] = dir_->job_id();
  j["ok"] = rc == 0;
  j["status"] = end_state_;
  j["reason"] = end_reason_;
  j["exit_code"] = rc;
  j["wall_seconds"] = std::chrono::duration<double>((ended_ ? *ended_ : clock_.now()) - started_).count();
  j["node_restarts"] = restarts_;
  j["runner_start_wall_ms"] = started_wall_ms_;
  if (!opt_.resume.empty()) j["resumed"] = true;
  // Worker clocks are this machine's clock (local launcher), so wall times compare.
  if (j.contains("first_step_wall_ms") && j["first_step_wall_ms"].is_number())
    j["first_step_seconds"] =
        static_cast<double>(j["first_step_wall_ms"].get<std::int64_t>() - started_wall_ms_) / 1000.0;
  if (data_.true_auc > 0) j["true_auc"] = data_.true_auc;
  if (auto m = nlohmann::json::parse(model_json_, nullptr, false); m.is_object()) {
    j["model_dir"] = m.value("model", "");
    j["model_seconds"] = model_seconds_;
  }
  if (!model_error_.empty()) j["model_error"] = model_error_;
  return j.dump();
}

void runner::export_model() {
  std::error_code ec;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  const auto started = clock_.now();
  auto r = cluster::run_tool({ec ? std::string("troupe") : self.string(), "export", dir_->path()}, "",
                             std::chrono::minutes(10), 1 << 20, clock_);
  const double secs = std::chrono::duration<double>(clock_.now() - started).count();
  model_seconds_ = secs;
  if (r && r->code == 0) {
    model_json_ = r->out.substr(0, r->out.find('\n'));
    spdlog::info("model written in {:.2f} s: {}", secs, model_json_);
    timeline_.model_exported(dir_->path() + "/model", secs);
    return;
  }
  model_error_ = !r ? r.err().to_string() : r->err.substr(0, 2000);
  while (!model_error_.empty() && model_error_.back() == '\n') model_error_.pop_back();
  spdlog::error("job {} finished, but its model could not be written: {}", dir_->job_id(), model_error_);
}

std::string runner::disk_fault_expired() {
  std::unique_lock lk(mu_);
  std::string fault = status_.fault;
  lk.unlock();
  auto now = clock_.now();
  if (fault.empty()) {
    if (fault_since_) spdlog::info("the disk fault is over: the job resumes");
    fault_since_.reset();
    return {};
  }
  if (!fault_since_) {
    fault_since_ = now;
    spdlog::error("job paused: {} (it fails after {} s unless the disk recovers: job.disk_full_timeout_ms)",
                  fault, spec_.job.disk_full_timeout.count() / 1000.0);
  }
  if (now - *fault_since_ < spec_.job.disk_full_timeout) return {};
  return std::string("job failed: ")
      .append(fault)
      .append(" for more than ")
      .append(std::to_string(spec_.job.disk_full_timeout.count()))
      .append(" ms (job.disk_full_timeout_ms)");
}

}  // namespace troupe::control
