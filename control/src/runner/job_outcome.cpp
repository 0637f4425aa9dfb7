#include "job_outcome.hpp"

#include <nlohmann/json.hpp>

namespace troupe::control {

void job_outcome::start() {
  started_ = clock_.now();
  started_wall_ms_ = clock_.wall_ms();
}

void job_outcome::nodes_stopped() {
  ended_ = clock_.now();
}

bool result_is_object(const std::string& result_json) {
  return nlohmann::json::parse(result_json, nullptr, false).is_object();
}

bool job_outcome::master_finished(std::string result_json, bool ok) {
  if (finished_) return false;
  finished_ = true;
  result_json_ = std::move(result_json);
  ok_ = ok;
  return true;
}

void job_outcome::stop_requested(std::string reason) {
  if (stop_) return;
  stop_ = true;
  stop_reason_ = std::move(reason);
}

void job_outcome::fail(std::string why) {
  if (fatal_.empty()) fatal_ = std::move(why);
}

void job_outcome::end(std::string state, std::string reason) {
  if (!state_.empty()) return;
  state_ = std::move(state);
  reason_ = std::move(reason);
}

void job_outcome::model_written(std::string json_line, double seconds) {
  model_json_ = std::move(json_line);
  model_seconds_ = seconds;
}

void job_outcome::model_failed(std::string why) {
  model_error_ = std::move(why);
}

void job_outcome::settle(int rc, const std::string& master_error, const outcome_facts& f) {
  if (!state_.empty()) return;
  state_ = rc == 0 ? "finished" : "failed";
  if (rc == 0)
    reason_ = "every task done";
  else if (!fatal_.empty())
    reason_ = fatal_;
  else if (finished_ && !master_error.empty())
    reason_ = master_error;  // the master's own word (a failed evaluation)
  else if (finished_)
    reason_ = f.quarantine_reason ? f.quarantine_reason() : "the master reported the job failed";
  else
    reason_ = "failed";
}

namespace {

// The master's final metrics when it sent them, else what the runner knows of the work done.
nlohmann::json work_done(const std::string& result_json, const outcome_facts& f) {
  nlohmann::json j = nlohmann::json::object();
  if (!result_json.empty()) {
    auto m = nlohmann::json::parse(result_json, nullptr, false);
    if (m.is_object()) return m;
  } else if (f.status) {
    auto s = wire::to_json(*f.status);
    j["tasks"] = s["tasks"];
    j["samples_total"] = s["samples_total"];
    j["train_loss"] =
        s.contains("loss") ? s["loss"] : nlohmann::json(nullptr);  // the last window's (null: none)
  }
  if (!result_json.empty()) return j;  // a result that is no object: nothing of it
  j["strategy"] = f.strategy;
  j["model"] = f.model_type;
  if (j.contains("tasks")) {
    j["tasks_done"] = j["tasks"]["done"];
    j["tasks_failed"] = j["tasks"]["failed"];
    j["tasks_requeued"] = j["tasks"]["requeued"];
    j["samples_trained"] = j["samples_total"];
  }
  return j;
}

}  // namespace

std::string job_outcome::final_json(int rc, const outcome_facts& f) {
  nlohmann::json j = work_done(result_json_, f);
  const bool has_error = j.contains("error") && j["error"].is_string();
  settle(rc, has_error ? j["error"].get<std::string>() : std::string(), f);
  // The master's warning (a test loss that is no number) goes into the reason of a finished job.
  if (rc == 0 && j.contains("warning") && j["warning"].is_string() && reason_ == "every task done")
    reason_ += "; warning: " + j["warning"].get<std::string>();
  j["job"] = f.job_id;
  j["ok"] = rc == 0;
  j["status"] = state_;
  j["reason"] = reason_;
  j["exit_code"] = rc;
  j["wall_seconds"] = std::chrono::duration<double>((ended_ ? *ended_ : clock_.now()) - started_).count();
  j["node_restarts"] = f.restarts;
  j["runner_start_wall_ms"] = started_wall_ms_;
  if (f.resumed) j["resumed"] = true;
  if (f.reopened_done + f.reopened_failed > 0)
    j["reopened_tasks"] = {{"done", f.reopened_done}, {"failed", f.reopened_failed}};
  // Worker clocks are this machine's clock (local launcher), so wall times compare. A resumed job's
  // first step was taken under an earlier runner: no time from this one's start then.
  if (j.contains("first_step_wall_ms") && j["first_step_wall_ms"].is_number() &&
      j["first_step_wall_ms"].get<std::int64_t>() >= started_wall_ms_)
    j["first_step_seconds"] =
        static_cast<double>(j["first_step_wall_ms"].get<std::int64_t>() - started_wall_ms_) / 1000.0;
  if (f.true_auc > 0) j["true_auc"] = f.true_auc;
  if (!f.init.empty()) j["init"] = f.init;
  if (auto m = nlohmann::json::parse(model_json_, nullptr, false); m.is_object()) {
    j["model_dir"] = m.value("model", "");
    j["model_seconds"] = model_seconds_;
  }
  if (!model_error_.empty()) j["model_error"] = model_error_;
  return j.dump();
}

}  // namespace troupe::control
