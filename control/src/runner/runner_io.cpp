// The runner's messages and its progress line. on_message runs on the transport's io thread: it
// pushes events for the loop and answers from what the loop published (master_watch), touching
// no other state of the runner.
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <utility>

#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include "runner.hpp"
#include "troupe/transport/endpoint.hpp"
#include "troupe/wire/messages.hpp"

namespace troupe::control {

void runner::on_message(const message& m) {
  wire::guarded("runner", [&] {
    if (m.kind() != schema::Envelope::Body::JOB) return;
    auto j = m.body().getJob();
    switch (j.which()) {
      case schema::JobMessage::JOB_FINISHED:
        // The nodes leave now: their connections' ends are not news. Here, on the transport's
        // thread, before the master's close that follows this message is logged.
        if (m.from_node().name == "master") net_->quiet_peer_lines();
        events_.push(finished_event{j.getJobFinished().getResultJson().cStr(), j.getJobFinished().getOk(),
                                    m.from_node()});
        break;
      case schema::JobMessage::STATUS_REQUEST:
        answer_status(m.from_node().name, std::string(m.from()), m.correlation_id());
        break;
      case schema::JobMessage::SCALE:
        reply_scale(m, j.getScale().getWorkers(), j.getScale().getHost().cStr());
        break;
      case schema::JobMessage::STOP: {
        std::string reason = j.getStop().getReason().cStr();
        reply_stop(m, reason.empty() ? "a stop message from " + m.from_node().to_string() : reason);
        break;
      }
      default:
        break;
    }
  });
}

// A host is checked here, before anything changes (the launcher's check_host is thread-safe; for
// Slurm one sinfo); a refused one leaves the target as it was.
void runner::reply_scale(const message& m, std::uint32_t asked, std::string host) {
  // Workers joined by hand hold slots up to max_workers: a scale to max_workers launched one the
  // master refused, relaunched until the job failed.
  const auto f = watch_.fields();
  const std::uint32_t hi = f.max_launched > 0 ? f.max_launched : spec_.job.max_workers;
  std::uint32_t n = std::clamp(asked, spec_.job.min_workers, hi);
  auto o = wire::job_reply(m);
  auto r = o.body.initScaleReply();
  if (stop_asked_) {  // it said "workers: 5" and recorded a scale event, launching nothing
    r.setRefused(true);
    r.setError("the job is stopping (troupe stop): it takes no scale");
    (void)net_->send(m.from_node().name, std::string(m.from()), std::move(o.out), "runner");
    return;
  }
  if (!host.empty()) {
    const auto* placer = placer_.load();
    auto ok = placer ? placer->check_host(host)
                     : expected<void>(make_unexpected(core_errc::invalid_argument,
                                                      "the job is starting (no launcher yet): try again"));
    if (!ok) {
      r.setRefused(true);
      r.setError(ok.err().context());
      (void)net_->send(m.from_node().name, std::string(m.from()), std::move(o.out), "runner");
      return;
    }
  }
  events_.push(scale_event{n, asked, std::move(host)});
  r.setWorkers(n);
  if (n != asked)
    r.setError("clamped to [" + std::to_string(spec_.job.min_workers) + ", " + std::to_string(hi) + "]" +
               (f.hand_workers > 0 && hi < spec_.job.max_workers
                    ? ": max_workers " + std::to_string(spec_.job.max_workers) + " less " +
                          std::to_string(f.hand_workers) + " worker" + (f.hand_workers == 1 ? "" : "s") +
                          " joined by hand"
                    : ", the job's min_workers and max_workers"));
  (void)net_->send(m.from_node().name, std::string(m.from()), std::move(o.out), "runner");
}

// The stop is recorded (queued: the loop ends the job on it) before the reply says so.
void runner::reply_stop(const message& m, std::string reason) {
  stop_asked_ = true;
  events_.push(stop_event{std::move(reason)});
  auto o = wire::job_reply(m);
  o.body.initStopReply();
  (void)net_->send(m.from_node().name, std::string(m.from()), std::move(o.out), "runner");
}

void runner::poll_status(bool force) {
  if (!net_->connected("master") || !watch_.poll_due(force)) return;
  auto o = wire::job();
  o.body.initStatusRequest();
  auto reply = rpc_->call({"master", "master", std::move(o.out)}, std::chrono::milliseconds(1000));
  if (!reply) return;
  wire::job_status got;
  bool ok =
      wire::guarded("status", [&] { got = wire::read_job_status(reply->body().getJob().getJobStatus()); });
  if (!ok) return;
  // The master's word for the console (a ring that lost every replica: the tasks trained again), once.
  if (!got.notice.empty() && got.notice != notice_) spdlog::warn("{}", notice_ = got.notice);
  watch_.answered(got);
  if (auto* m = slots_.find("master")) m->joined = true;
}

// What the progress line adds after the worker counts: workers launched and not in yet, a wait for
// min_workers.
std::string runner::progress_notes(const status_snapshot& s) const {
  std::string notes;
  // Workers launched but not in the job yet: starting, or (Slurm) waiting in the queue for room.
  if (auto launched = slots_.launched_workers(); launched > s.workers_alive)
    notes.append("  (").append(std::to_string(launched - s.workers_alive)).append(" starting or queued)");
  if (s.workers_alive < spec_.job.min_workers)
    notes.append("  waiting for min_workers ").append(std::to_string(spec_.job.min_workers));
  // What waits in the cluster manager's queue, and why (Slurm's reason), the first two named.
  if (auto w = slots_.waiting(); !w.empty()) {
    notes.append("  queued: ").append(w[0].first + " " + w[0].second);
    if (w.size() > 1) notes.append(", ").append(w[1].first + " " + w[1].second);
    if (w.size() > 2) notes.append(" and ").append(std::to_string(w.size() - 2)).append(" more");
  }
  return notes;
}

// What it adds at its end: an evaluation, quarantined tasks, a pause for a disk fault, the cluster
// manager away.
std::string runner::pause_notes(const status_snapshot& s) const {
  std::string paused;
  if (!s.evaluating.empty()) paused.append("  evaluating on ").append(s.evaluating);
  if (s.tasks.failed > 0)
    paused.append("  ")
        .append(std::to_string(s.tasks.failed))
        .append(" quarantined (")
        .append(s.task_error)
        .append(")");
  if (!s.fault.empty()) paused.append("  PAUSED: ").append(s.fault);
  return paused.append(outage_note_);
}

// The rate and loss a progress line shows: the master's last window's; on the final line this run's
// mean rate and the training loss of the master's result (the last status's when it sent none: a
// job's last window is mostly without steps, and one that trained 100,000 rows ended on "0
// samples/s  loss -").
// A prediction's rows may have no labels: its loss (against class 0 then) is not shown; nor is one
// before the first step ("-").
std::pair<double, std::string> runner::shown_pace(const status_snapshot& s, double secs,
                                                  bool final_line) const {
  double rate = s.samples_per_sec, loss = s.has_loss() ? s.loss : std::nan("");
  if (final_line && samples_at_start_ && secs > 0 && s.samples_total >= *samples_at_start_)
    rate = static_cast<double>(s.samples_total - *samples_at_start_) / secs;
  // The final line's loss is the final JSON's `train_loss` (the master's word as it finished): the
  // last status the runner had was up to a poll older, and an allreduce job's read 0.5718 beside
  // the JSON's 0.4214.
  if (final_line) {
    auto r = nlohmann::json::parse(outcome_.master_result(), nullptr, false);
    if (r.is_object() && r.contains("train_loss") && r["train_loss"].is_number())
      loss = r["train_loss"].get<double>();
  }
  char text[32] = "-";
  if (std::isfinite(loss) && spec_.traits().trains) std::snprintf(text, sizeof text, "%.4f", loss);
  return {rate, text};
}

void runner::print_progress(bool final_line) {
  const status_snapshot s = watch_.status();
  if (s.valid && !samples_at_start_) samples_at_start_ = s.samples_total;  // a resumed job's restored count
  if (!opt_.progress || !s.valid) return;
  auto now = clock_.now();
  bool tty = ::isatty(STDERR_FILENO);
  // On a terminal the line is redrawn in place; in a log, one line every 2 s.
  if (!final_line && last_progress_ &&
      now - *last_progress_ < (tty ? std::chrono::milliseconds(250) : std::chrono::seconds(2)))
    return;
  last_progress_ = now;
  std::uint64_t total = s.tasks.total();
  double secs = outcome_.seconds();
  if (watch_.quiet() && !final_line) {
    // Its last numbers are stale: say so rather than show them as the job's pace.
    std::fprintf(stderr, "%s[%6.1fs] tasks %llu/%llu  master not answering for %.1f s%s", tty ? "\r" : "",
                 secs, static_cast<unsigned long long>(s.tasks.done), static_cast<unsigned long long>(total),
                 std::chrono::duration<double>(watch_.silent_for()).count(), tty ? "" : "\n");
    return;
  }
  if (total == 0 && s.tasks.data_epochs == 0) {  // no status from the master yet: no "epoch 1/0"
    std::fprintf(stderr, "%s[%6.1fs] starting  workers %u/%u%s", tty ? "\r" : "", secs, s.workers_alive,
                 slots_.target(), tty && !final_line ? "" : "\n");
    return;
  }
  // "data epoch": the pass over the dataset (the membership epoch is in `troupe status`).
  const auto [rate, loss] = shown_pace(s, secs, final_line);
  std::fprintf(stderr,
               "%s[%6.1fs] data epoch %u/%u  tasks %llu/%llu  %8.0f samples/s  loss %s  workers %u/%u%s%s  "
               "restarts %llu%s%s",
               tty ? "\r" : "", secs, std::min(s.tasks.data_epoch + 1, std::max(s.tasks.data_epochs, 1u)),
               s.tasks.data_epochs, static_cast<unsigned long long>(s.tasks.done),
               static_cast<unsigned long long>(total), rate, loss.c_str(), s.workers_alive, slots_.target(),
               progress_notes(s).c_str(),
               spec_.uses_ps() ? ("  ps " + std::to_string(s.ps_alive)).c_str() : "",
               static_cast<unsigned long long>(slots_.restarts()), pause_notes(s).c_str(),
               tty && !final_line ? "" : "\n");
}

void runner::answer_status(const std::string& node, const std::string& to, std::uint64_t id) {
  auto s = watch_.answer();  // the master's, with the runner's own fields
  auto o = wire::job();
  o.out.set_correlation_id(id);  // the request's: the asker pairs the answer with it
  wire::write_job_status(o.body.initJobStatus(), s);
  (void)net_->send(node, to, std::move(o.out), "runner");
}

}  // namespace troupe::control
