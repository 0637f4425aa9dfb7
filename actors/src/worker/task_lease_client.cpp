#include "task_lease_client.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <utility>

#include "troupe/wire/messages.hpp"

namespace troupe::actors {

using namespace std::chrono_literals;

task_lease_client::task_lease_client(node_context& node, wire::rpc_channel& rpc) : node_(node), rpc_(rpc) {}

task_lease_client::~task_lease_client() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (step_renewer_.joinable()) step_renewer_.join();
}

void task_lease_client::step_begins(std::span<const lease> held) {
  if (lease_ms_.count() == 0) return;  // no lease granted yet: nothing to renew
  // The snapshot changes with a task (a few per thousand steps): the lock is taken then only. Only
  // this thread writes step_leases_, so it reads them unlocked.
  renewed(held, step_scratch_);
  if (step_scratch_ != step_leases_ || step_lease_ms_ != lease_ms_) {
    std::lock_guard lk(mu_);
    step_leases_.swap(step_scratch_);
    step_lease_ms_ = lease_ms_;
  }
  step_began_.store(now().time_since_epoch().count(), std::memory_order_relaxed);
  stepping_.store(true, std::memory_order_release);
  if (!step_renewer_.joinable()) step_renewer_ = std::thread([this] { renew_during_steps(); });
}

// Wakes each sixth of the lease time; renews when a step runs and the last renewal (the training
// thread's or its own) is a third of the lease time old: at most half the lease apart.
void task_lease_client::renew_during_steps() {
  std::unique_lock lk(mu_);
  while (!stop_) {
    const auto lease = step_lease_ms_;
    // Real naps of at most 200 ms (a sixth of a short lease): the clock is read again after each.
    const auto nap = std::clamp<troupe::clock::duration>(lease / 6, 10ms, 200ms);
    troupe::wait_until(
        node_.clock(), cv_, lk, now() + lease / 6, [&] { return stop_; }, nap);
    if (stop_) break;
    const auto t = now().time_since_epoch().count();
    const auto ns = [](auto d) { return std::chrono::duration_cast<troupe::clock::duration>(d).count(); };
    if (!stepping_.load(std::memory_order_acquire) || step_leases_.empty() ||
        t - last_renewed_.load(std::memory_order_relaxed) < ns(lease / 3) ||
        t - step_began_.load(std::memory_order_relaxed) > ns(10 * lease))
      continue;
    auto leases = step_leases_;
    lk.unlock();
    send_renewal(leases);
    lk.lock();
  }
}

void task_lease_client::report(const lease& t, const std::string& failure, std::uint64_t trained,
                               std::uint64_t step) {
  outbound o(outbound::small_words);
  auto r = o.body().initTaskReport();
  r.setTaskId(t.id);
  r.setAttempt(t.attempt);
  r.setStep(step);
  if (failure.empty()) {
    r.setDone();
  } else {
    r.setFailed(failure);
    r.setFailedAfter(trained);
  }
  unsent_.push_back(std::move(o));
}

void task_lease_client::hand_back(const lease& t, std::uint64_t trained, std::uint64_t step,
                                  const std::string& why) {
  outbound o(outbound::small_words);
  auto r = o.body().initTaskReport();
  r.setTaskId(t.id);
  r.setAttempt(t.attempt);
  r.setStep(step);
  r.setLeft(trained);
  if (!why.empty()) r.setGivenBack(why);
  unsent_.push_back(std::move(o));
}

bool task_lease_client::settle_reports(time_point deadline) {
  next_report_ = now();  // a resend waits for nobody now
  for (;;) {
    pump_reports();
    if (unsent_.empty()) return true;
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - now());
    if (left.count() <= 0) return false;
    if (report_request_ != 0)
      rpc_.wait(report_request_, std::min<std::chrono::milliseconds>(left, 100ms));
    else
      node_.clock().sleep_for(std::min<std::chrono::milliseconds>(left, 10ms));
  }
}

// Sends the oldest unacknowledged report (without waiting for the acknowledgement: the next pass
// polls for it), or resends it when its acknowledgement did not come; keeps them all while the
// master is unreachable (a restarted master accepts them: the journal still holds the lease).
void task_lease_client::pump_reports() {
  if (report_request_ != 0) {
    auto reply = rpc_.poll(report_request_);
    if (!reply) return;  // on its way
    report_request_ = 0;
    if (!*reply) {
      spdlog::debug("task report: {}", reply->err().to_string());
    } else {
      auto err = (*reply)->body().getTaskReportAck().getError();
      if (err.size() > 0) spdlog::warn("task report refused: {}", err.cStr());
      unsent_.erase(unsent_.begin());
    }
  }
  if (unsent_.empty() || now() < next_report_) return;
  // Sending moves the builder out: send a copy, keep the original until acknowledged.
  outbound copy;
  copy.body().setTaskReport(unsent_.front().body().getTaskReport().asReader());
  auto id = rpc_.send({"master", "dispenser", std::move(copy)}, 1000ms);
  if (!id) {
    spdlog::debug("task report: {}", id.err().to_string());
    next_report_ = now() + 100ms;
    return;
  }
  report_request_ = *id;
}

std::optional<task_lease_client::answer> task_lease_client::pump_lease(bool wants,
                                                                       std::span<const lease> held) {
  if (lease_request_ != 0) {
    auto reply = rpc_.poll(lease_request_);
    if (!reply) return std::nullopt;  // on its way
    lease_request_ = 0;
    if (!*reply) {
      // Typically the master's connection is not up yet (a fresh worker): ask again soon.
      spdlog::debug("task request: {}", reply->err().to_string());
      next_lease_ = now() + 10ms;
      return std::nullopt;
    }
    return take(**reply, held);
  }
  if (exhausted_ || !wants || now() < next_lease_) return std::nullopt;
  ask(held);
  return std::nullopt;
}

void task_lease_client::ask(std::span<const lease> held) {
  wire::rpc_channel::request r{"master", "dispenser", outbound(outbound::small_words)};
  std::vector<std::uint64_t> holding;
  for (const auto& l : held) holding.push_back(l.id);
  for (auto& o : unsent_) holding.push_back(o.body().getTaskReport().getTaskId());
  auto h = r.out.body().initTaskRequest().initHolding(static_cast<unsigned>(holding.size()));
  for (unsigned i = 0; i < holding.size(); ++i) h.set(i, holding[i]);
  auto id = rpc_.send(std::move(r), 2000ms);
  if (!id) {
    spdlog::debug("task request: {}", id.err().to_string());
    next_lease_ = now() + 10ms;
    return;
  }
  lease_request_ = *id;
}

task_lease_client::answer task_lease_client::take(const message& reply, std::span<const lease> held) {
  auto l = reply.body().getTaskLease();
  answer a;
  switch (l.which()) {
    case schema::TaskLease::TASK: {
      auto t = l.getTask();
      if (!first_lease_logged_) {
        // Benchmarks read this line: time from `troupe scale` to a new worker's first task.
        spdlog::info("first task {} leased at wall_ms {}", t.getId(), node_.clock().wall_ms());
        first_lease_logged_ = true;
      }
      lease_ms_ = std::chrono::milliseconds(l.getLeaseMs());
      // The first lease held: its renewals start a third of the lease time from now.
      if (held.empty() && unsent_.empty()) next_renew_ = now() + lease_ms_ / 3;
      a.what = answer::kind::task;
      a.task = lease{t.getId(),    t.getAttempt(), t.getFirstRecord(),  t.getRecordCount(),
                     t.getEpoch(), t.getTrained(), t.getOrderAttempt(), t.getTrainedStep()};
      break;
    }
    case schema::TaskLease::NONE:
      a.what = answer::kind::none;
      next_lease_ = now() + (held.empty() ? 20ms : 100ms);
      break;
    case schema::TaskLease::FINISHED:
      a.what = answer::kind::finished;
      exhausted_ = true;
      break;
  }
  return a;
}

std::vector<std::pair<std::uint64_t, std::uint32_t>> task_lease_client::renewed(std::span<const lease> held) {
  std::vector<std::pair<std::uint64_t, std::uint32_t>> leases;
  renewed(held, leases);
  return leases;
}

void task_lease_client::renewed(std::span<const lease> held,
                                std::vector<std::pair<std::uint64_t, std::uint32_t>>& leases) {
  leases.clear();
  for (const auto& l : held) leases.emplace_back(l.id, l.attempt);
  for (auto& o : unsent_) {
    auto r = o.body().getTaskReport();
    leases.emplace_back(r.getTaskId(), r.getAttempt());
  }
}

void task_lease_client::pump_renew(std::span<const lease> held) {
  if (lease_ms_.count() == 0 || now() < next_renew_) return;
  const auto leases = renewed(held);
  if (leases.empty()) return;
  send_renewal(leases);
  next_renew_ = now() + lease_ms_ / 3;
}

void task_lease_client::send_renewal(const std::vector<std::pair<std::uint64_t, std::uint32_t>>& leases) {
  outbound o;
  auto out = o.body().initTaskRenew().initLeases(static_cast<unsigned>(leases.size()));
  for (unsigned i = 0; i < leases.size(); ++i) {
    out[i].setTaskId(leases[i].first);
    out[i].setAttempt(leases[i].second);
  }
  if (auto s = node_.send("master", "dispenser", std::move(o), "worker"); !s)
    spdlog::debug("lease renewal: {}", s.err().to_string());
  last_renewed_.store(now().time_since_epoch().count(), std::memory_order_relaxed);
}

task_lease_client::time_point task_lease_client::next_due(time_point limit) {
  const auto t = now();
  auto due = limit;
  auto consider = [&](time_point d) {
    if (d > t) due = std::min(due, d);
  };
  if (!exhausted_ && lease_request_ == 0) consider(next_lease_);
  if (!unsent_.empty() && report_request_ == 0) consider(next_report_);
  if (lease_ms_.count() > 0) consider(next_renew_);
  return due;
}

void task_lease_client::wait_for_lease(time_point deadline) {
  auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - now());
  if (left.count() > 0) rpc_.wait(lease_request_, left);
}

}  // namespace troupe::actors
