// What a worker tells the master of the task it trains with its progress: the rows that would
// outlive it (WorkerProgress.task), and its replica's step (WorkerProgress.replicaStep); the kept rows
// of a held task that a ring restarted from its checkpoint lost.
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

}  // namespace troupe::actors
