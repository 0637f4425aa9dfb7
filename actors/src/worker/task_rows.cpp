// Where the rows a worker trained are, and what goes back to the dispenser with them: the rows that
// would outlive it, told with its progress (WorkerProgress.task) with its replica's step
// (WorkerProgress.replicaStep); the kept rows of a held task that a ring restarted from its checkpoint
// lost; a leaving worker's hand-back; the tasks whose rows wait for the strategy's next round
// (strategy::rows_settle_in_rounds), reported or given back.
#include <algorithm>

#include <spdlog/spdlog.h>

#include "worker_state.hpp"

namespace troupe::actors {

std::uint64_t rows_that_go_back(const worker_state& st, std::uint64_t rows) {
  const held_task& t = *st.task;
  if (st.ctx->local_batch > 0 && rows + 1 == t.order.size()) rows -= 1;
  return rows <= t.trained || rows >= t.order.size() ? 0 : rows;
}

// The held task's rows that would outlive this worker should it die now (WorkerProgress.task; the
// master's surviving_rows): applied by the ring's replicas at its replica's step (allreduce on the
// host), or pushed and acknowledged by the PS shards (async_ps: a batch's worth less for each push not
// acknowledged yet). None where the strategy cannot say (local_sgd, predict, the GPU path). As a
// hand-back, fewer than all and a lone last row left (rows_that_go_back).
void write_task_rows(const worker_state& st, schema::WorkerProgress::Builder p) {
  if (!st.ctx) return;
  const std::uint64_t step = st.strat->checkpointed_step(*st.ctx);
  p.setReplicaStep(step);
  const bool shards = st.strat->steps_on_shards();
  if (!st.task || !st.strat->steps_outlive_worker() || (!shards && step == 0)) return;
  const held_task& t = *st.task;
  std::uint64_t rows = t.cursor;
  if (shards)
    rows -=
        std::min<std::uint64_t>(rows, st.ctx->ps.unsettled_pushes() * st.node->spec().nn.train.batch_size);
  rows = rows_that_go_back(st, rows);
  if (rows == 0) return;
  auto r = p.initTask();
  r.setTaskId(t.id);
  r.setAttempt(t.attempt);
  r.setTrained(rows);
  r.setStep(shards ? 0 : step);
  r.setOnShards(shards);
}

// The ring's replicas start again from its checkpoint of `step` (every replica that had trained is
// gone: worker_context::replicas_restarted). A task held with rows kept at a later step lost them
// with the replicas: it trains from its first row (the master forgot them as well: RingRestored).
// This worker trained none of it yet (it had trained no step).
bool forget_rows_kept_after(worker_state& st, std::uint64_t step) {
  bool changed = false;
  for (auto* h : {&st.task, &st.next}) {
    if (!*h || (*h)->trained == 0 || (*h)->trained_step <= step) continue;
    spdlog::warn(
        "task {}: its first {} rows, kept from an earlier holder at step {}, were lost with the replicas "
        "(the ring starts again from step {}): the task trains from its first row",
        (*h)->id, (*h)->trained, (*h)->trained_step, step);
    (*h)->trained = (*h)->trained_step = 0;
    (*h)->cursor = 0;
    changed = true;
  }
  return changed;
}

// The rows of the held task trained so far that go back with it as it leaves this worker partway (a
// leave, a failed step) when its steps outlive the worker (the ring's replicas; the PS shards once
// they took the pushes): rows_that_go_back of its cursor, else 0.
std::uint64_t rows_to_keep(worker_state& st) {
  if (!st.task || !st.ctx || !st.strat->steps_outlive_worker()) return 0;
  const std::uint64_t rows = rows_that_go_back(st, st.task->cursor);
  if (rows == 0) return 0;
  if (auto s = st.ctx->ps.settle(); !s) {
    spdlog::warn("task {}: a push of its last steps failed ({}): its rows are trained again", st.task->id,
                 s.err().to_string());
    return 0;
  }
  return rows;
}

void hand_back_on_leave(worker_state& st, bool checkpointed) {
  const auto until = st.node->clock().now() + leave_reports_bound;
  if (const std::uint64_t rows = checkpointed ? rows_to_keep(st) : 0; rows > 0) {
    spdlog::info("{}: leaving: task {} goes back with {} of its {} rows trained", st.node->self().to_string(),
                 st.task->id, rows, st.task->order.size());
    st.leases->hand_back(*st.task, rows, st.strat->checkpointed_step(*st.ctx));
  }
  give_back_unsettled(st, "");  // their rows are its replica's alone: trained again
  if (!st.leases->settle_reports(until))
    spdlog::warn(
        "{}: leaving with {} task report(s) not acknowledged: the master re-queues their tasks whole",
        st.node->self().to_string(), st.leases->unacknowledged());
  st.node->hand_back_pending(false);
}

void report_settled(worker_state& st) {
  if (!st.ctx || st.ctx->rounds_settled == st.rounds_seen) return;
  st.rounds_seen = st.ctx->rounds_settled;
  const std::uint64_t step = st.strat->checkpointed_step(*st.ctx);
  for (const auto& t : st.unsettled) st.leases->report(t, "", 0, step);
  if (!st.unsettled.empty()) st.leases->pump_reports();
  st.unsettled.clear();
  for (auto* h : {&st.task, &st.next})
    if (*h) (*h)->settled = (*h)->cursor;
}

void give_back_unsettled(worker_state& st, const std::string& why) {
  for (const auto& t : st.unsettled) st.leases->hand_back(t, 0, 0, why);
  st.unsettled.clear();
}

// The rows since the last settled round were in this replica alone: the ring's resync overwrites it.
bool lose_unsettled_rows(worker_state& st) {
  if (!st.unsettled.empty()) {
    std::string ids;
    for (const auto& t : st.unsettled) ids += (ids.empty() ? "" : ", ") + std::to_string(t.id);
    spdlog::warn(
        "{}: the ring's resync overwrites this replica before its rows were averaged: task(s) {} trained "
        "to their end since the last round go back to be trained again",
        st.node->self().to_string(), ids);
    give_back_unsettled(st,
                        "its rows were lost before they were averaged (the ring's resync overwrote the "
                        "replica that trained them)");
  }
  if (!st.task || st.task->cursor <= st.task->settled) return false;
  spdlog::warn(
      "task {}: the ring's resync overwrites this replica before its rows were averaged: its {} rows "
      "trained since the last round are trained again",
      st.task->id, st.task->cursor - st.task->settled);
  st.task->cursor = st.task->settled;
  return true;
}

}  // namespace troupe::actors
