#include <spdlog/spdlog.h>

#include <cmath>
#include <cstdlib>
#include <numeric>
#include <utility>

#include "troupe/job/data.hpp"
#include "troupe/wire/messages.hpp"
#include "troupe/wire/status_codec.hpp"
#include "worker_state.hpp"

namespace troupe::actors {

namespace {

clock::time_point now(worker_state& st) {
  return st.node->clock().now();
}

// The leases the worker holds: the task it trains, the one leased ahead and those trained to their
// end whose rows are not settled yet (strategy::rows_settle_in_rounds). No allocation but while
// the unsettled ones outnumber the vector's capacity so far.
std::span<const task_lease_client::lease> held(worker_state& st) {
  auto& h = st.held_scratch;
  h.clear();
  if (st.task) h.push_back(*st.task);
  if (st.next) h.push_back(*st.next);
  h.insert(h.end(), st.unsettled.begin(), st.unsettled.end());
  return h;
}

std::uint64_t wall_ms(worker_state& st) {
  return static_cast<std::uint64_t>(st.node->clock().wall_ms());
}

// A task's rows in a shuffled order, or in record order for a strategy that writes per-task output.
// A task an earlier holder trained partly (it left, or a later step of it failed) starts after the
// rows it trained (in its order).
void order_rows(worker_state& st, held_task& h) {
  if (!st.strat->keeps_row_order()) {
    shuffle_rows(h);
    h.cursor = h.settled = std::min<std::size_t>(h.trained, h.order.size());
    if (h.cursor > 0)
      spdlog::info(
          "task {}: {} of its {} rows were trained by an earlier holder (it left, or a step after them "
          "failed): training the rest",
          h.id, h.cursor, h.order.size());
    return;
  }
  h.order.resize(h.rows.rows);
  std::iota(h.order.begin(), h.order.end(), 0u);
}

// The leased task with its records read from the local store, or (served records) with the
// feed's ticket: its records come in while the current task trains (records_in).
std::optional<held_task> load_task(worker_state& st, const task_lease_client::lease& l) {
  held_task h;
  static_cast<task_lease_client::lease&>(h) = l;
  auto ticket = st.feed->fetch(h.first, h.count, h.rows);
  if (!ticket) {
    spdlog::error("task {}: {}", h.id, ticket.err().to_string());
    st.leases->report(h, ticket.err().to_string());
    return std::nullopt;
  }
  h.ticket = *ticket;
  if (h.ticket) return h;  // ordered once its records are in (records_in)
  order_rows(st, h);
  return h;
}

void join_when_ready(worker_state& st);

// Served records of the current task: true once they are in; false while they are on their way,
// or when they failed (a corrupt record, a bad range): the task is reported failed, as a local
// read's failure is, and the next one takes its place.
bool records_in(worker_state& st) {
  auto& t = *st.task;
  if (!t.ticket) return true;
  auto r = st.feed->take(*t.ticket, t.rows);
  if (!r) return false;
  t.ticket.reset();
  if (!*r) {
    spdlog::error("task {}: {}", t.id, r->err().to_string());
    st.leases->report(t, r->err().to_string());
    st.task = std::exchange(st.next, std::nullopt);
    return false;
  }
  order_rows(st, t);
  join_when_ready(st);
  return true;
}

// One forward and backward pass on the first batch before joining: activations get allocated and
// caches warm, so the first synchronous step with the ring is not a cold one that the partners
// wait for. The gradients are overwritten by the first real step; parameters and optimizer state
// are untouched, and the buffers the forward moved (batch norm's running statistics, a module's step
// counter) are put back: they saw the first batch twice, a counter counted one step a worker start
// more. Models with embedding tables are skipped (their rows come from the PS shards). Leases are
// renewed as during a step: a warm-up longer than the lease lost them, their rows trained twice.
void warm_up(worker_state& st) {
  if (!st.task || st.task->ticket || !st.backend->embedding_tables().empty()) return;
  auto& t = *st.task;
  std::size_t n = std::min(st.node->spec().nn.train.batch_size, t.order.size());
  nn::batch b(t.rows, std::span<const std::uint32_t>(t.order.data(), n));
  std::vector<std::vector<float>> kept;
  for (auto buffer : st.backend->buffers()) kept.emplace_back(buffer.begin(), buffer.end());
  st.leases->step_begins(held(st));
  if (auto l = st.backend->compute_gradients(b); !l) spdlog::debug("warm-up: {}", l.err().to_string());
  auto buffers = st.backend->buffers();
  for (std::size_t i = 0; i < kept.size() && i < buffers.size(); ++i)
    std::copy(kept[i].begin(), kept[i].end(), buffers[i].begin());
  st.strat->warm_up(*st.ctx);
  st.leases->step_ends();
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

// Takes the dispenser's answer to a lease request (the task's records: read, or on their way),
// or asks for a lease when the worker has no task, or for the next one once the current task is
// half trained. Never waits for the answer.
void pump_lease(worker_state& st) {
  bool wants = !st.next && (!st.task || st.task->cursor * 2 >= st.task->order.size());
  auto a = st.leases->pump_lease(wants, held(st));
  if (!a) return;
  if (a->what == task_lease_client::answer::kind::task) {
    auto h = load_task(st, a->task);  // nullopt: its records could not be read (reported failed)
    if (h) (st.task ? st.next : st.task) = std::move(h);
  }
  join_when_ready(st);
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
  if (auto g = st.strat->goodput(); g.valid) wire::write_goodput(p.initGoodput(), g);
  write_task_rows(st, p);
  if (st.node->send("master", "master", std::move(o.out), "worker")) {
    if (st.first_step_wall_ms != 0) st.first_step_sent = true;
    st.win_samples = st.win_steps = st.dropped = 0;
    st.win_loss = 0;
  }
  st.last_report = t;
}

void finish_loop(worker_state& st) {
  st.done = true;
  st.node->hand_back_pending(false);  // nothing left to hand back
  report_progress(st, true);
  auto o = wire::job();
  o.body.initWorkerDone().setSteps(st.steps_total);
  (void)st.node->send("master", "master", std::move(o.out), "worker");
  spdlog::info("{}: training loop over after {} steps", st.node->self().to_string(), st.steps_total);
  if (st.ps && st.ps->pulls() > 0)
    spdlog::info("{}: {} PS pulls, {} of them prefetched", st.node->self().to_string(), st.ps->pulls(),
                 st.ps->prefetched());
}

// A trace for the recovery benchmark, compared across processes in wall-clock microseconds (finer
// than troupe::clock's wall_ms): the wall time when the log opened plus the monotonic time since.
// Gaps within one process are exact; between processes the bases differ by up to 1 ms (wall_ms
// truncates), well under the recovery times compared.
void log_step(worker_state& st) {
  auto since = std::chrono::duration_cast<std::chrono::microseconds>(now(st) - st.step_log_opened);
  std::fprintf(st.step_log.get(), "%lld\n", static_cast<long long>(st.step_log_wall_us + since.count()));
}

}  // namespace

void open_step_log(worker_state& st) {
  const char* dir = std::getenv("TROUPE_STEP_LOG");
  if (!dir || !*dir) return;
  std::string path = std::string(dir) + "/" + st.node->self().to_string() + ".steps";
  st.step_log.reset(std::fopen(path.c_str(), "w"));
  if (!st.step_log) {
    spdlog::warn("TROUPE_STEP_LOG: cannot write {}", path);
    return;
  }
  std::setvbuf(st.step_log.get(), nullptr, _IOLBF, 0);
  st.step_log_opened = now(st);
  st.step_log_wall_us = st.node->clock().wall_ms() * 1000;
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

void pace_compute(worker_state& st, std::size_t samples, double since_s) {
  const double rate = st.node->spec().nn.train.max_samples_per_s;
  if (rate <= 0 || samples == 0) return;
  auto& clk = st.node->clock();
  const worker_state::clock::time_point due(std::chrono::duration_cast<worker_state::clock::duration>(
      std::chrono::duration<double>(since_s + static_cast<double>(samples) / rate)));
  const auto now = clk.now();
  if (due > now) clk.sleep_for(due - now);
  st.paced_in_step = true;
}

// A finished task is reported once the PS shards acknowledged its pushes (killed after its report,
// a worker lost none; before, the task is trained again); one that failed went with its shard.
static void settle_pushes(worker_state& st) {
  if (auto s = st.ctx->ps.settle(); !s)
    spdlog::warn("task {}: a push of its last steps failed: {}", st.task->id, s.err().to_string());
}

// A trained step whose loss is not a number (NaN, inf) fails its task: the model's weights are no
// longer numbers either (training diverged, or the model computes a NaN), and every later step
// would fail the same way, so its tasks are quarantined and the job fails saying why, rather than
// finish "ok" with a model that predicts nothing. Prediction jobs' rows may carry no label.
static void diverged(const worker_state& st, const step_result& r) {
  if (r.what != step_result::kind::trained || r.samples == 0 || std::isfinite(r.loss) || !st.task ||
      st.strat->keeps_row_order())
    return;
  throw std::runtime_error("training diverged: the loss of step " + std::to_string(st.steps_total + 1) +
                           " is " + (std::isnan(r.loss) ? "NaN" : "infinite") +
                           " (the model's weights are no longer numbers: a lower train.learning_rate, or a "
                           "model that computes no NaN)");
}

// The strategy's step on `b`. An exception while the worker holds a task is the task's failure
// (reported; the next task takes its place): nullopt. Without a task it is not a data problem: it
// propagates, and the supervisor restarts the actor.
static std::optional<step_result> run_step(worker_state& st, const nn::batch* b) {
  auto after = batch_after(st);
  st.ctx->next = after ? &*after : nullptr;
  try {
    auto r = st.strat->step(*st.ctx, b, st.leases->exhausted() && !st.task);
    st.ctx->next = nullptr;
    diverged(st, r);
    return r;
  } catch (const std::exception& e) {
    st.ctx->next = nullptr;
    if (!st.task) throw;
    const std::uint64_t kept = rows_to_keep(st);
    spdlog::error(
        "task {} failed{}: {}", st.task->id,
        kept > 0 ? " after " + std::to_string(kept) + " of its rows (kept: tried again from there)" : "",
        e.what());
    st.leases->report(*st.task, e.what(), kept, kept > 0 ? st.strat->checkpointed_step(*st.ctx) : 0);
    st.task = std::exchange(st.next, std::nullopt);
    return std::nullopt;
  }
}

// What follows a step: a trained batch counted (checkpoint turn, pacing), or the wait an idle or
// retried step asks for. False once the strategy finished the loop.
static bool after_step(worker_state& st, const step_result& res, const std::optional<nn::batch>& b,
                       std::uint64_t epoch, clock::time_point until) {
  if (res.dropped) st.dropped += 1;
  const bool paced = std::exchange(st.paced_in_step, false);
  const bool restarted = std::exchange(st.ctx->offered_batch_stale, false);  // offered again at once
  switch (res.what) {
    case step_result::kind::trained:
      if (b) st.task->cursor += b->size();
      count_step(st, res);
      maybe_checkpoint(st);
      if (!paced) pace(st, res.samples);
      break;
    case step_result::kind::idle:
      // No batch and none on its way: wait for the loop's next deadline (asking for a lease again
      // after the dispenser had none) or a ring change. An exhausted worker waits for nothing of its
      // own: its rounds with the partners that still train are paced by them; nor does one whose
      // finished tasks wait for the strategy's next round (rows_settle_in_rounds): that round, with
      // the partners, paces it (waiting at each idle step held the job's tail by sync_every of them).
      if (!st.task && !st.leases->exhausted() && st.unsettled.empty())
        st.node->wait_ring_change(epoch, st.leases->next_due(until));
      break;
    case step_result::kind::retry:
      // A dropped collective (the ring may be rebuilt already, or this worker go on alone) or a stale
      // batch is retried at once; otherwise wait for the next ring epoch (or the loop's next deadline).
      if (!res.dropped && !restarted) st.node->wait_ring_change(epoch, st.leases->next_due(until));
      break;
    case step_result::kind::finished:
      finish_loop(st);
      return false;
  }
  return true;
}

// The task's last batch trained: pushes settled, the strategy's end of the task, the report (with
// the step that applied its last rows: TaskReport.step); the task leased ahead takes its place.
static void end_task_if_done(worker_state& st) {
  report_settled(st);  // a strategy's round that averaged the tasks trained to their end before it
  if (!st.task || st.task->cursor < st.task->order.size()) return;
  settle_pushes(st);
  auto& t = *st.task;
  auto out = st.strat->task_done(*st.ctx, t.id, t.first, t.order.size());
  if (!out) spdlog::error("task {}: {}", t.id, out.err().to_string());
  if (out && st.strat->rows_settle_in_rounds() && t.settled < t.order.size()) {
    // Its rows are this replica's alone until the strategy's next round: reported then
    // (report_settled), given back should this replica lose them first.
    st.unsettled.push_back(t);
    st.task = std::exchange(st.next, std::nullopt);
    return;
  }
  st.leases->report(t, out ? "" : out.err().to_string(), 0, st.strat->checkpointed_step(*st.ctx));
  st.task = std::exchange(st.next, std::nullopt);
  st.leases->pump_reports();
}

bool train_some(worker_state& st, clock::time_point until) {
  if (st.done) return false;
  // Leaving (SIGTERM): no further step; the task it trains goes back with its trained rows
  // (hand_back_on_leave) before the master re-queues the rest, and its ring is given up
  // (node_view::leave). The actor waits for the supervisor's shutdown.
  if (st.node->leaving()) {
    if (!st.left) {
      spdlog::info("{}: leaving: no further step", st.node->self().to_string());
      hand_back_on_leave(st, checkpoint_on_leave(st));
    }
    st.left = true;
    return false;
  }
  st.leases->pump_reports();
  if (!st.task && st.next) st.task = std::exchange(st.next, std::nullopt);
  pump_lease(st);
  st.leases->pump_renew(held(st));
  if (st.task && !records_in(st)) {
    // The task's served records are on their way (or it failed: the next one is tried at once).
    if (st.task && st.task->ticket) st.feed->wait(*st.task->ticket, st.leases->next_due(until));
    return true;
  }
  if (!st.task && st.leases->asking()) {
    // No batch yet but one on its way: wait for it rather than step without one (a strategy
    // waits out a ring change then, far longer than the dispenser's answer takes).
    st.leases->wait_for_lease(st.leases->next_due(until));
    return true;
  }
  // A ring change during the step ends the wait that follows it at once.
  const auto epoch = st.node->ring_epoch().load(std::memory_order_acquire);
  auto b = current_batch(st);
  st.leases->step_begins(held(st));  // renewed while the step runs past a third of the lease
  auto stepped = run_step(st, b ? &*b : nullptr);
  st.leases->step_ends();
  if (!stepped) return true;
  if (!after_step(st, *stepped, b, epoch, until)) return false;
  end_task_if_done(st);
  report_progress(st, false);
  return true;
}

}  // namespace troupe::actors
