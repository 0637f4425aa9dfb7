#include <unistd.h>

#include <cstdio>

#include <spdlog/spdlog.h>

#include "runner.hpp"
#include "troupe/transport/endpoint.hpp"
#include "troupe/wire/messages.hpp"

namespace troupe::control {

void runner::on_message(const message& m) {
  wire::guarded("runner", [&] {
    if (m.kind() != schema::Envelope::Body::JOB) return;
    auto j = m.body().getJob();
    switch (j.which()) {
      case schema::JobMessage::JOB_FINISHED: {
        std::lock_guard lk(mu_);
        if (finished_) return;
        result_json_ = j.getJobFinished().getResultJson().cStr();
        result_ok_ = j.getJobFinished().getOk();
        finished_ = true;
        wake_.notify_one();
        break;
      }
      case schema::JobMessage::STATUS_REQUEST:
        answer_status(m.from_node().name, std::string(m.from()), m.correlation_id());
        break;
      case schema::JobMessage::SCALE: {
        auto s = j.getScale();
        std::uint32_t n = std::clamp(s.getWorkers(), spec_.job.min_workers, spec_.job.max_workers);
        {
          std::lock_guard lk(mu_);
          scale_requests_.push_back(n);
          wake_.notify_one();
        }
        timeline_.scale(n, s.getWorkers());
        auto o = wire::job_reply(m);
        auto r = o.body.initScaleReply();
        r.setWorkers(n);
        if (n != s.getWorkers())
          r.setError("clamped to [" + std::to_string(spec_.job.min_workers) + ", " +
                     std::to_string(spec_.job.max_workers) + "]");
        (void)net_->send(m.from_node().name, std::string(m.from()), std::move(o.out), "runner");
        break;
      }
      case schema::JobMessage::STOP: {
        {
          std::lock_guard lk(mu_);
          if (!stop_) {  // the first stop's reason is the job's
            stop_reason_ = j.getStop().getReason().cStr();
            if (stop_reason_.empty()) stop_reason_ = "a stop message from " + m.from_node().to_string();
            stop_ = true;
          }
          wake_.notify_one();
        }
        auto o = wire::job_reply(m);
        o.body.initStopReply();
        (void)net_->send(m.from_node().name, std::string(m.from()), std::move(o.out), "runner");
        break;
      }
      default:
        break;
    }
  });
}

void runner::poll_status(bool force) {
  auto now = clock_.now();
  if ((!force && last_poll_ && now - *last_poll_ < status_poll_interval) || !net_->connected("master"))
    return;
  last_poll_ = now;
  auto o = wire::job();
  o.body.initStatusRequest();
  auto reply = rpc_->call({"master", "master", std::move(o.out)}, std::chrono::milliseconds(1000));
  if (!reply) return;
  bool ok = wire::guarded("status", [&] {
    status_snapshot st;
    static_cast<wire::job_status&>(st) = wire::read_job_status(reply->body().getJob().getJobStatus());
    st.valid = true;
    std::lock_guard lk(mu_);
    status_ = std::move(st);
  });
  if (ok) {
    master_heard_ = clock_.now();
    master_answered_ = true;
    if (auto it = nodes_.find("master"); it != nodes_.end()) it->second.joined = true;
  }
}

void runner::print_progress(bool final_line) {
  std::unique_lock lk(mu_);
  const status_snapshot s = status_;
  lk.unlock();
  if (!opt_.progress || !s.valid) return;
  auto now = clock_.now();
  bool tty = ::isatty(STDERR_FILENO);
  // On a terminal the line is redrawn in place; in a log, one line every 2 s.
  if (!final_line && last_progress_ &&
      now - *last_progress_ < (tty ? std::chrono::milliseconds(250) : std::chrono::seconds(2)))
    return;
  last_progress_ = now;
  std::uint64_t total = s.tasks.total();
  // Workers launched but not in the job yet: starting, or (Slurm) waiting in the queue for room.
  std::string waiting;
  if (auto launched = launched_workers(); launched > s.workers_alive)
    waiting.append("  (").append(std::to_string(launched - s.workers_alive)).append(" starting or queued)");
  if (s.workers_alive < spec_.job.min_workers)
    waiting.append("  waiting for min_workers ").append(std::to_string(spec_.job.min_workers));
  double secs = std::chrono::duration<double>(now - started_).count();
  if (master_quiet_ && !final_line) {
    // Its last numbers are stale: say so rather than show them as the job's pace.
    std::fprintf(stderr, "%s[%6.1fs] tasks %llu/%llu  master not answering for %.1f s%s", tty ? "\r" : "",
                 secs, static_cast<unsigned long long>(s.tasks.done), static_cast<unsigned long long>(total),
                 std::chrono::duration<double>(now - master_heard_).count(), tty ? "" : "\n");
    return;
  }
  // "data epoch": the pass over the dataset (the membership epoch is in `troupe status`); no loss
  // is shown before the first step.
  char loss[32] = "-";
  if (s.has_loss()) std::snprintf(loss, sizeof loss, "%.4f", s.loss);
  std::string paused;
  if (!s.evaluating.empty()) paused.append("  evaluating on ").append(s.evaluating);
  if (s.tasks.failed > 0)
    paused.append("  ")
        .append(std::to_string(s.tasks.failed))
        .append(" quarantined (")
        .append(s.task_error)
        .append(")");
  if (!s.fault.empty()) paused.append("  PAUSED: ").append(s.fault);
  paused.append(outage_note_);
  std::fprintf(stderr,
               "%s[%6.1fs] data epoch %u/%u  tasks %llu/%llu  %8.0f samples/s  loss %s  workers %u/%u%s%s  "
               "restarts %llu%s%s",
               tty ? "\r" : "", secs, std::min(s.tasks.data_epoch + 1, std::max(s.tasks.data_epochs, 1u)),
               s.tasks.data_epochs, static_cast<unsigned long long>(s.tasks.done),
               static_cast<unsigned long long>(total), s.samples_per_sec, loss, s.workers_alive,
               target_workers_, waiting.c_str(),
               spec_.uses_ps() ? ("  ps " + std::to_string(s.ps_alive)).c_str() : "",
               static_cast<unsigned long long>(restarts_), paused.c_str(), tty && !final_line ? "" : "\n");
}

void runner::answer_status(const std::string& node, const std::string& to, std::uint64_t id) {
  std::unique_lock lk(mu_);
  wire::job_status s = status_;  // the master's, with the runner's own fields
  s.job_id = dir_->job_id();
  s.workers_target = target_workers_;
  s.finished = finished_;
  s.restarts = restarts_;
  s.result_json = result_json_;
  lk.unlock();
  if (master_quiet_) s.samples_per_sec = 0;  // the master's last figure is stale, not the pace
  auto o = wire::job();
  o.out.set_correlation_id(id);  // the request's: the asker pairs the answer with it
  wire::write_job_status(o.body.initJobStatus(), s);
  (void)net_->send(node, to, std::move(o.out), "runner");
}

}  // namespace troupe::control
