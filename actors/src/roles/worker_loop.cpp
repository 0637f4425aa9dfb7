#include <spdlog/spdlog.h>

#include <cstdlib>
#include <thread>
#include <utility>

#include "troupe/job/data.hpp"
#include "troupe/wire/messages.hpp"
#include "worker_state.hpp"

namespace troupe::actors {

namespace {

clock::time_point now(worker_state& st) {
  return st.node->clock().now();
}

std::uint64_t wall_ms(worker_state& st) {
  return static_cast<std::uint64_t>(st.node->clock().wall_ms());
}

void send_report(worker_state& st, const held_task& t, const std::string& failure) {
  outbound o;
  auto r = o.body().initTaskReport();
  r.setTaskId(t.id);
  r.setAttempt(t.attempt);
  if (failure.empty())
    r.setDone();
  else
    r.setFailed(failure);
  st.unsent_reports.push_back(std::move(o));
}

// Sends the oldest unacknowledged report (without waiting for the acknowledgement: the next pass
// polls for it), or resends it when its acknowledgement did not come; keeps them all while the
// master is unreachable (a restarted master accepts them: the journal still holds the lease).
void pump_reports(worker_state& st) {
  if (st.report_request != 0) {
    auto reply = st.task_rpc->poll(st.report_request);
    if (!reply) return;  // on its way
    st.report_request = 0;
    if (!*reply) {
      spdlog::debug("task report: {}", reply->err().to_string());
    } else {
      auto err = (*reply)->body().getTaskReportAck().getError();
      if (err.size() > 0) spdlog::warn("task report refused: {}", err.cStr());
      st.unsent_reports.erase(st.unsent_reports.begin());
    }
  }
  if (st.unsent_reports.empty() || now(st) < st.next_report) return;
  auto& o = st.unsent_reports.front();
  // Sending moves the builder out: send a copy, keep the original until acknowledged.
  outbound copy;
  copy.body().setTaskReport(o.body().getTaskReport().asReader());
  auto id = st.task_rpc->send({"master", "dispenser", std::move(copy)}, std::chrono::milliseconds(1000));
  if (!id) {
    spdlog::debug("task report: {}", id.err().to_string());
    st.next_report = now(st) + std::chrono::milliseconds(100);
    return;
  }
  st.report_request = *id;
}

// The leased task with its records read from the local store, or (served records) with the
// fetcher's ticket: its records come in while the current task trains (records_in).
std::optional<held_task> load_task(worker_state& st, schema::Task::Reader t) {
  held_task h;
  h.id = t.getId();
  h.attempt = t.getAttempt();
  h.first = t.getFirstRecord();
  h.count = t.getRecordCount();
  if (st.fetch) {
    h.ticket = st.fetch->want(h.first, h.count);
    return h;
  }
  if (auto r = job::read_records(*st.train, h.first, h.count, h.rows); !r) {
    spdlog::error("task {}: {}", h.id, r.err().to_string());
    send_report(st, h, r.err().to_string());
    return std::nullopt;
  }
  shuffle_rows(h);
  return h;
}

void join_when_ready(worker_state& st);

// Served records of the current task: true once they are in; false while they are on their way,
// or when they failed (a corrupt record, a bad range): the task is reported failed, as a local
// read's failure is, and the next one takes its place.
bool records_in(worker_state& st) {
  auto& t = *st.task;
  if (!t.ticket) return true;
  auto r = st.fetch->take(*t.ticket, t.rows);
  if (!r) return false;
  t.ticket.reset();
  if (!*r) {
    spdlog::error("task {}: {}", t.id, r->err().to_string());
    send_report(st, t, r->err().to_string());
    st.task = std::exchange(st.next, std::nullopt);
    return false;
  }
  shuffle_rows(t);
  join_when_ready(st);
  return true;
}

// One forward and backward pass on the first batch before joining: activations get allocated and
// caches warm, so the first synchronous step with the ring is not a cold one that the partners
// wait for. The gradients are overwritten by the first real step; parameters and optimizer state
// are untouched. Models with embedding tables are skipped (their rows come from the PS shards).
void warm_up(worker_state& st) {
  if (!st.task || st.task->ticket || !st.backend->embedding_tables().empty()) return;
  auto& t = *st.task;
  std::size_t n = std::min(st.node->spec().nn.train.batch_size, t.order.size());
  nn::batch b(t.rows, std::span<const std::uint32_t>(t.order.data(), n));
  if (auto l = st.backend->compute_gradients(b); !l) spdlog::debug("warm-up: {}", l.err().to_string());
  st.strat->warm_up(*st.ctx);
}

// Joining the membership (and the next ring) once the dispenser has answered, with a batch in
// hand (served records: once they are in): a ring partner never waits for this worker's start-up.
// Tasks leased before the join are covered by the master's reconciliation of holders that are not
// members.
void join_when_ready(worker_state& st) {
  if (st.node->ready() || (st.task && st.task->ticket)) return;
  warm_up(st);
  st.node->mark_ready();
}

// The earliest of the loop's own deadlines still to come (asking for a lease again, resending a
// report, renewing the held leases), or `limit` when that is sooner. Deadlines already passed are
// left out: the pumps at the start of the pass acted on them or had nothing to do.
clock::time_point next_due(worker_state& st, clock::time_point limit) {
  const auto t = now(st);
  auto due = limit;
  auto consider = [&](clock::time_point d) {
    if (d > t) due = std::min(due, d);
  };
  if (!st.exhausted && st.lease_request == 0) consider(st.next_lease);
  if (!st.unsent_reports.empty() && st.report_request == 0) consider(st.next_report);
  if (st.lease_ms.count() > 0) consider(st.next_renew);
  return due;
}

// Waits for the reply to the lease request on its way, at most until `deadline`.
void wait_lease_reply(worker_state& st, clock::time_point deadline) {
  auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - now(st));
  if (left.count() > 0) st.task_rpc->wait(st.lease_request, left);
}

void take_lease(worker_state& st, schema::TaskLease::Reader l) {
  switch (l.which()) {
    case schema::TaskLease::TASK: {
      if (!st.first_lease_logged) {
        // Benchmarks read this line: time from `troupe scale` to a new worker's first task.
        spdlog::info("first task {} leased at wall_ms {}", l.getTask().getId(), wall_ms(st));
        st.first_lease_logged = true;
      }
      st.lease_ms = std::chrono::milliseconds(l.getLeaseMs());
      // The first lease held: its renewals start a third of the lease time from now.
      if (!st.task && !st.next && st.unsent_reports.empty()) st.next_renew = now(st) + st.lease_ms / 3;
      auto h = load_task(st, l.getTask());
      if (!h) break;
      if (st.task)
        st.next = std::move(h);
      else
        st.task = std::move(h);
      break;
    }
    case schema::TaskLease::NONE:
      st.next_lease = now(st) + std::chrono::milliseconds(st.task ? 100 : 20);
      break;
    case schema::TaskLease::FINISHED:
      st.exhausted = true;
      break;
  }
  join_when_ready(st);
}

// Asks the dispenser for a task when the worker has none, or for the next one once the current
// task is half trained; takes the answer when it has come. Never waits for it.
void pump_lease(worker_state& st) {
  if (st.lease_request != 0) {
    auto reply = st.task_rpc->poll(st.lease_request);
    if (!reply) return;  // on its way
    st.lease_request = 0;
    if (!*reply) {
      // Typically the master's connection is not up yet (a fresh worker): ask again soon.
      spdlog::debug("task request: {}", reply->err().to_string());
      st.next_lease = now(st) + std::chrono::milliseconds(10);
      return;
    }
    take_lease(st, (*reply)->body().getTaskLease());
    return;
  }
  if (st.exhausted || st.next || now(st) < st.next_lease) return;
  if (st.task && st.task->cursor * 2 < st.task->order.size()) return;
  wire::rpc_channel::request r{"master", "dispenser", outbound()};
  auto req = r.out.body().initTaskRequest();
  std::vector<std::uint64_t> holding;
  if (st.task) holding.push_back(st.task->id);
  for (auto& o : st.unsent_reports) holding.push_back(o.body().getTaskReport().getTaskId());
  auto h = req.initHolding(static_cast<unsigned>(holding.size()));
  for (unsigned i = 0; i < holding.size(); ++i) h.set(i, holding[i]);
  auto id = st.task_rpc->send(std::move(r), std::chrono::milliseconds(2000));
  if (!id) {
    spdlog::debug("task request: {}", id.err().to_string());
    st.next_lease = now(st) + std::chrono::milliseconds(10);
    return;
  }
  st.lease_request = *id;
}

// Every third of the lease time, renews every lease the worker holds (the task it trains, the one
// leased ahead, finished ones whose report is not acknowledged), so that a task that trains longer
// than the lease is not re-queued while this worker is alive. No answer: a lost renewal is made up
// by the next one, two more before the lease runs out.
void pump_renew(worker_state& st) {
  if (st.lease_ms.count() == 0 || now(st) < st.next_renew) return;
  std::vector<std::pair<std::uint64_t, std::uint32_t>> held;
  if (st.task) held.emplace_back(st.task->id, st.task->attempt);
  if (st.next) held.emplace_back(st.next->id, st.next->attempt);
  for (auto& o : st.unsent_reports) {
    auto r = o.body().getTaskReport();
    held.emplace_back(r.getTaskId(), r.getAttempt());
  }
  if (held.empty()) return;
  outbound o;
  auto leases = o.body().initTaskRenew().initLeases(static_cast<unsigned>(held.size()));
  for (unsigned i = 0; i < held.size(); ++i) {
    leases[i].setTaskId(held[i].first);
    leases[i].setAttempt(held[i].second);
  }
  if (auto s = st.node->send("master", "dispenser", std::move(o), "worker"); !s)
    spdlog::debug("lease renewal: {}", s.err().to_string());
  st.next_renew = now(st) + st.lease_ms / 3;
}

void report_progress(worker_state& st, bool force) {
  auto t = now(st);
  if (!force && t - st.last_report < st.node->spec().job.progress_every) return;
  auto o = wire::job();
  auto p = o.body.initWorkerProgress();
  p.setSamples(st.win_samples);
  p.setSteps(st.win_steps);
  p.setLossSum(st.win_loss);
  p.setDroppedSteps(st.dropped);
  if (!st.first_step_sent) p.setFirstStepWallMs(st.first_step_wall_ms);
  if (st.node->send("master", "master", std::move(o.out), "worker")) {
    if (st.first_step_wall_ms != 0) st.first_step_sent = true;
    st.win_samples = st.win_steps = st.dropped = 0;
    st.win_loss = 0;
  }
  st.last_report = t;
}

void finish_loop(worker_state& st) {
  st.done = true;
  report_progress(st, true);
  auto o = wire::job();
  o.body.initWorkerDone().setSteps(st.steps_total);
  (void)st.node->send("master", "master", std::move(o.out), "worker");
  spdlog::info("{}: training loop over after {} steps", st.node->self().to_string(), st.steps_total);
  if (st.ps && st.ps->pulls() > 0)
    spdlog::info("{}: {} PS pulls, {} of them prefetched", st.node->self().to_string(), st.ps->pulls(),
                 st.ps->prefetched());
}

void log_step(worker_state& st) {
  // A trace for the recovery benchmark, compared across processes in wall-clock microseconds (finer
  // than troupe::clock's wall_ms): the one direct system clock read of the loop, off by default.
  auto us = std::chrono::duration_cast<std::chrono::microseconds>(
      std::chrono::system_clock::now().time_since_epoch());
  std::fprintf(st.step_log.get(), "%lld\n", static_cast<long long>(us.count()));
}

}  // namespace

void open_step_log(worker_state& st) {
  const char* dir = std::getenv("TROUPE_STEP_LOG");
  if (!dir || !*dir) return;
  std::string path = std::string(dir) + "/" + st.node->self().to_string() + ".steps";
  st.step_log.reset(std::fopen(path.c_str(), "w"));
  if (st.step_log)
    std::setvbuf(st.step_log.get(), nullptr, _IOLBF, 0);
  else
    spdlog::warn("TROUPE_STEP_LOG: cannot write {}", path);
}

// A trained step's samples and loss into the progress window (and the step log).
void count_step(worker_state& st, const step_result& res) {
  if (res.samples == 0) return;
  st.win_samples += res.samples;
  st.win_steps += 1;
  st.win_loss += res.loss;
  st.steps_total += 1;
  if (st.first_step_wall_ms == 0) {
    st.first_step_wall_ms = wall_ms(st);
    report_progress(st, true);  // the master learns the time of the first step at once
  }
  if (st.step_log) log_step(st);
}

// [train] max_samples_per_s: sleeps until the samples trained so far fit the rate. A worker that
// fell behind (a ring change, a slow step) does not catch up in a burst: at most one step's worth.
void pace(worker_state& st, std::size_t samples) {
  const double rate = st.node->spec().nn.train.max_samples_per_s;
  if (rate <= 0 || samples == 0) return;
  auto& clk = st.node->clock();
  const auto now = clk.now();
  const auto step = std::chrono::duration_cast<worker_state::clock::duration>(
      std::chrono::duration<double>(static_cast<double>(samples) / rate));
  st.pace_until = std::max(st.pace_until, now - step) + step;
  if (st.pace_until > now) clk.sleep_for(st.pace_until - now);
}

// A finished task is reported once the PS shards acknowledged its pushes (killed after its report,
// a worker lost none; before, the task is trained again); one that failed went with its shard.
static void settle_pushes(worker_state& st) {
  if (auto s = st.ctx->ps.settle(); !s)
    spdlog::warn("task {}: a push of its last steps failed: {}", st.task->id, s.err().to_string());
}

// The strategy's step on `b`. An exception while the worker holds a task is the task's failure
// (reported; the next task takes its place): nullopt. Without a task it is not a data problem: it
// propagates, and the supervisor restarts the actor.
static std::optional<step_result> run_step(worker_state& st, const nn::batch* b) {
  auto after = batch_after(st);
  st.ctx->next = after ? &*after : nullptr;
  try {
    auto r = st.strat->step(*st.ctx, b, st.exhausted && !st.task);
    st.ctx->next = nullptr;
    return r;
  } catch (const std::exception& e) {
    st.ctx->next = nullptr;
    if (!st.task) throw;
    spdlog::error("task {} failed: {}", st.task->id, e.what());
    send_report(st, *st.task, e.what());
    st.task = std::exchange(st.next, std::nullopt);
    return std::nullopt;
  }
}

bool train_some(worker_state& st, clock::time_point until) {
  if (st.done) return false;
  pump_reports(st);
  if (!st.task && st.next) st.task = std::exchange(st.next, std::nullopt);
  pump_lease(st);
  pump_renew(st);
  if (st.task && !records_in(st)) {
    // The task's served records are on their way (or it failed: the next one is tried at once).
    if (st.task && st.task->ticket) st.fetch->wait(*st.task->ticket, next_due(st, until));
    return true;
  }
  if (!st.task && st.lease_request != 0) {
    // No batch yet but one on its way: wait for it rather than step without one (a strategy
    // waits out a ring change then, far longer than the dispenser's answer takes).
    wait_lease_reply(st, next_due(st, until));
    return true;
  }
  // A ring change during the step ends the wait that follows it at once.
  const auto epoch = st.node->ring_epoch().load(std::memory_order_acquire);
  auto b = current_batch(st);
  auto stepped = run_step(st, b ? &*b : nullptr);
  if (!stepped) return true;
  const step_result& res = *stepped;
  if (res.dropped) st.dropped += 1;
  switch (res.what) {
    case step_result::kind::trained:
      if (b) st.task->cursor += b->size();
      count_step(st, res);
      pace(st, res.samples);
      break;
    case step_result::kind::idle:
      // No batch and none on its way: wait for the loop's next deadline (asking for a lease again
      // after the dispenser had none) or a ring change. An exhausted worker waits for nothing of its
      // own: its rounds with the partners that still train are paced by them.
      if (!st.task && !st.exhausted) st.node->wait_ring_change(epoch, next_due(st, until));
      break;
    case step_result::kind::retry:
      // A dropped collective is retried at once (the ring may already be rebuilt, or this worker
      // may go on alone); otherwise wait for the next ring epoch (or the loop's next deadline).
      if (!res.dropped) st.node->wait_ring_change(epoch, next_due(st, until));
      break;
    case step_result::kind::finished:
      finish_loop(st);
      return false;
  }
  if (st.task && st.task->cursor >= st.task->order.size()) {
    settle_pushes(st);
    send_report(st, *st.task, "");
    st.task = std::exchange(st.next, std::nullopt);
    pump_reports(st);
  }
  report_progress(st, false);
  return true;
}

}  // namespace troupe::actors
