#include "master_watch.hpp"

namespace troupe::control {

void master_watch::launched() {
  launched_ = clock_.now();
  answered_ = false;
}

bool master_watch::poll_due(bool force) {
  auto now = clock_.now();
  if (!force && last_poll_ && now - *last_poll_ < limits_.poll_interval) return false;
  last_poll_ = now;
  return true;
}

std::optional<troupe::clock::time_point> master_watch::next_poll() const {
  if (!last_poll_) return std::nullopt;
  return *last_poll_ + limits_.poll_interval;
}

void master_watch::answered(const wire::job_status& s) {
  status_snapshot st;
  static_cast<wire::job_status&>(st) = s;
  st.valid = true;
  {
    std::lock_guard lk(mu_);
    status_ = std::move(st);
  }
  heard_ = clock_.now();
  answered_ = true;
}

void master_watch::excuse() {
  heard_ = launched_ = clock_.now();
}

void master_watch::forget_status() {
  std::lock_guard lk(mu_);
  status_.valid = false;
}

std::optional<troupe::clock::duration> master_watch::hung() const {
  auto silent = clock_.now() - (answered_ ? heard_ : launched_);
  if (silent < (answered_ ? limits_.hang_limit : limits_.startup_limit)) return std::nullopt;
  return silent;
}

void master_watch::refresh() {
  quiet_ = answered_ && clock_.now() - heard_ > limits_.quiet_after;
}

status_snapshot master_watch::status() const {
  std::lock_guard lk(mu_);
  return status_;
}

void master_watch::publish(runner_fields f) {
  std::lock_guard lk(mu_);
  fields_ = std::move(f);
}

runner_fields master_watch::fields() const {
  std::lock_guard lk(mu_);
  return fields_;
}

wire::job_status master_watch::answer() const {
  std::unique_lock lk(mu_);
  wire::job_status s = status_;
  s.job_id = fields_.job_id;
  s.workers_target = fields_.workers_target;
  s.workers_launched = fields_.workers_launched;
  s.finished = fields_.finished;
  s.restarts = fields_.restarts;
  s.result_json = fields_.result_json;
  lk.unlock();
  if (quiet_) s.samples_per_sec = 0;  // the master's last figure is stale, not the pace
  return s;
}

}  // namespace troupe::control
