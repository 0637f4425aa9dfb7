// How a job ends, whatever the way: its nodes stopped, its shared memory removed, nodes.json
// final, and result.json written with the outcome and the reason (finished, failed, stopped,
// interrupted), then printed as the runner's final line; and the deadline of a disk fault.
#include <algorithm>
#include <cstdio>
#include <filesystem>

#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include "runner.hpp"
#include "troupe/cluster/process.hpp"
#include "troupe/cluster/run_tool.hpp"
#include "troupe/collective/cleanup.hpp"
#include "troupe/storage/task_journal.hpp"

namespace troupe::control {

// A finished job's model, and a stopped one's (from its latest checkpoints: what it had learnt;
// `--resume` continues it and writes the model again at its end). One stopped before it started a
// node has trained nothing (and its data may still be imported). Returns the job's exit code: a job
// that did its work but could not deliver its model failed (exit 1), as `train --local` does (a
// user found exit 0 and no model, a layer with no TorchScript form said in one log line). Its
// checkpoints stay: `troupe export` writes the model once the cause is mended.
int runner::write_model(int rc) {
  const bool stopped = outcome_.state() == "stopped" && nodes_started_;
  if (!((rc == 0 && outcome_.master_ok()) || stopped) || !spec_.traits().trains) return rc;
  // A stopped job's result.json is the runner's own (its master finished nothing): written first,
  // without the model's fields, so that model.json's metrics have its train_loss (they were {}).
  if (stopped) (void)cluster::write_file_atomic(dir_->result_path(), final_json(rc) + "\n");
  if (export_model() || rc != 0 || stopped) return rc;
  outcome_.end("failed",
               "every task done, but the model could not be written (`troupe export " + dir_->path() +
                   "` writes it from the job's checkpoints once that is mended): " + outcome_.model_error());
  return 1;
}

int runner::finish(int rc) {
  if (net_) poll_status(true);
  if (launcher_) shutdown_nodes();
  if (dir_ && !instance_.empty())
    collective::remove_job_leftovers(collective::instance_key(dir_->job_id(), instance_));
  print_progress(true);
  if (!dir_) return rc;
  outcome_.nodes_stopped();  // the job's time; writing its model is reported apart (model_seconds)
  rc = write_model(rc);
  auto text = final_json(rc);
  if (keep_record_) {
    spdlog::info("the job's record ({}) is left as it was: this --resume started nothing",
                 dir_->result_path());
  } else {
    if (!outcome_.finished()) last_metrics(text);
    timeline_.job_end(outcome_.state(), outcome_.reason());
    if (auto w = cluster::write_file_atomic(dir_->result_path(), text + "\n"); !w)
      spdlog::warn("{}", w.err().to_string());
  }
  // A job stopped or interrupted as asked is no error (a requested stop read "E [runner] ... stopped").
  if (rc == 0 || outcome_.state() == "stopped" || outcome_.state() == "interrupted")
    spdlog::info("job {} {}: {}", dir_->job_id(), outcome_.state(), outcome_.reason());
  else
    spdlog::error("job {} {}: {}", dir_->job_id(), outcome_.state(), outcome_.reason());
  if (opt_.result_line) {
    std::printf("%s\n", text.c_str());
    std::fflush(stdout);
  }
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

void runner::release_leases() {
  if (!dir_) return;
  for (const auto& [name, slot] : slots_.slots())
    if (slot.handle) return;  // a node not known to have exited may still report its task
  auto journal = storage::task_journal::open(dir_->journal_dir());
  if (!journal) return;  // never created (the job ended before its dispenser), or unreadable: kept
  auto moved = journal->requeue_holders_except({});
  if (!moved) return;  // kept: a resumed job's dispenser requeues them
  for (const auto& [h, n] : *moved) {
    spdlog::info("{}: {} task(s) it held as the job ended back to TODO", h, n);
    timeline_.requeue(h, n, "job ended");
  }
}

// A job its master did not finish (stopped, failed, interrupted): its timeline's last metrics event
// the figures of its result.json (the master wrote one as it finished; here the last was its periodic
// one, a second or more before the end: 4,779,520 samples where result.json said 4,981,504).
void runner::last_metrics(const std::string& result_json) {
  auto j = nlohmann::json::parse(result_json, nullptr, false);
  if (!j.is_object() || !j.contains("samples_trained")) return;  // it trained nothing
  auto n = [&](const char* k) { return j.value(k, std::uint64_t{0}); };
  observe::metrics_sample m;
  m.samples = n("samples_trained");
  if (auto l = j.find("train_loss"); l != j.end() && l->is_number()) m.loss = l->get<double>();
  m.restarts = n("node_restarts");
  if (auto t = j.find("tasks"); t != j.end() && t->is_object()) {
    m.tasks_todo = t->value("todo", std::uint64_t{0});
    m.tasks_doing = t->value("doing", std::uint64_t{0});
  }
  m.tasks_done = n("tasks_done");
  m.tasks_failed = n("tasks_failed");
  m.tasks_requeued = n("tasks_requeued");
  m.epoch = watch_.status().epoch;
  timeline_.metrics(m);
}

// result.json: the outcome (job_outcome.hpp) with what the rest of the runner knows.
std::string runner::final_json(int rc) {
  outcome_facts f;
  f.job_id = dir_->job_id();
  f.strategy = spec_.job.strategy;
  f.model_type = spec_.nn.model.type;
  if (auto st = watch_.status(); st.valid) f.status = static_cast<const wire::job_status&>(st);
  // The journal's counts once the nodes stopped: the reports committed after the last status poll
  // (workers finishing a task as they left) are in them, as in `troupe status` of the ended job.
  if (f.status)
    if (auto journal = storage::task_journal::open(dir_->journal_dir()))
      if (auto c = journal->counts()) {
        auto& t = f.status->tasks;
        t.todo = c->todo;
        t.doing = c->doing;
        t.done = c->done;
        t.failed = c->failed;
        t.requeued = c->requeued;
        t.records_done = c->records_done;
        // Never below the DONE tasks' records: the workers' last progress windows were lost at the
        // stop (399,456 samples for 447,600 records done).
        f.status->samples_total = std::max(f.status->samples_total, c->records_done);
      }
  f.restarts = slots_.restarts();
  f.resumed = !opt_.resume.empty();
  f.reopened_done = reopened_done_;
  f.reopened_failed = reopened_failed_;
  f.true_auc = data_.true_auc;
  f.init = spec_.nn.model.init;
  f.quarantine_reason = [this] { return quarantine_reason(*dir_); };
  return outcome_.final_json(rc, f);
}

namespace {
// What `troupe export` said of its failure: its error line (the last one, "troupe: error: ..."),
// not its stderr from the top (the plugin's info line came first, and 2000 characters of it).
std::string export_error(const std::string& err) {
  std::string last;
  std::size_t at = 0;
  while (at < err.size()) {
    auto end = err.find('\n', at);
    auto line = err.substr(at, end == std::string::npos ? std::string::npos : end - at);
    if (line.find_first_not_of(" \r") != std::string::npos) last = std::move(line);
    if (end == std::string::npos) break;
    at = end + 1;
  }
  if (auto tag = last.find("troupe: error: "); tag != std::string::npos) last.erase(0, tag + 15);
  return last.substr(0, 2000);
}
}  // namespace

// How the job ended, for the export's messages (it runs before the outcome is final).
std::string runner::ended_as() const {
  return outcome_.state().empty() ? (outcome_.finished() ? "finished" : "ended") : outcome_.state();
}

bool runner::export_model() {
  const auto self = cluster::self_exe_to_run();  // "<path> (deleted)" after an upgrade: not run
  const auto started = clock_.now();
  auto r = cluster::run_tool({self ? *self : std::string("troupe"), "export", dir_->path()}, "",
                             std::chrono::minutes(10), 1 << 20, clock_);
  const double secs = std::chrono::duration<double>(clock_.now() - started).count();
  if (r && r->code == 0) {
    auto line = r->out.substr(0, r->out.find('\n'));
    spdlog::info("model written in {:.2f} s: {}", secs, line);
    timeline_.model_exported(dir_->path() + "/model", secs);
    outcome_.model_written(std::move(line), secs);
    return true;
  }
  std::string why = !r ? r.err().to_string() : export_error(r->err);
  // A troupe built without libtorch (scripts/install-deps.sh --demo; `troupe export` exits
  // exit_not_built): the job is fine, its model.pt can be written later from its checkpoints; said
  // as what to do, not as a failure.
  const bool not_built = r && r->code == exit_not_built;
  if (not_built)
    spdlog::warn(
        "job {} {}; model.pt not written: this troupe was built without libtorch (the TorchScript "
        "plugin). After scripts/install-deps.sh and scripts/build.sh, `troupe export {}` writes it from "
        "the job's checkpoints",
        dir_->job_id(), ended_as(), dir_->path());
  else
    spdlog::error("job {} {}, but its model could not be written: {}", dir_->job_id(), ended_as(), why);
  outcome_.model_failed(std::move(why));
  return not_built;
}

std::string runner::disk_fault_expired() {
  const std::string fault = watch_.status().fault;
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
