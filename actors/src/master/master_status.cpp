#include <spdlog/spdlog.h>
#include <caf/all.hpp>
#include <nlohmann/json.hpp>

#include <malloc.h>

#include <cmath>
#include <fstream>
#include <set>

#include "caf_types.hpp"
#include "master_observer.hpp"
#include "master_state.hpp"
#include "troupe/cluster/job_dir.hpp"
#include "troupe/wire/messages.hpp"
#include "troupe/wire/rpc.hpp"
#include "troupe/wire/status_codec.hpp"

namespace troupe::actors {

namespace {

constexpr auto eval_timeout = std::chrono::seconds(120);

// The workers that may evaluate: those that finished their training loop (ring strategies: they
// hold the final model), else for async PS any alive worker (the model lives on the shards); the
// one that trained most first (a part goes to the first of the least loaded: under async_ps a batch
// norm's running statistics are the evaluating worker's own, and a replacement of 13 steps evaluated
// for the job, 0.858 for 0.93).
std::vector<std::string> eval_candidates(const master_state& st) {
  std::vector<std::pair<std::uint64_t, std::string>> done, alive;
  for (const auto& m : st.members.view.members()) {
    if (m.role != cluster::node_role::worker || m.state != cluster::member_state::alive) continue;
    const auto steps = st.outcome.steps_by.find(m.id.to_string());
    const std::pair<std::uint64_t, std::string> w{steps == st.outcome.steps_by.end() ? 0 : steps->second,
                                                  m.id.name};
    alive.push_back(w);
    if (st.outcome.done_workers.count(m.id.name)) done.push_back(w);
  }
  auto& pick = !done.empty() || !st.ctx->spec().uses_ps() ? done : alive;
  std::stable_sort(pick.begin(), pick.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<std::string> out;
  for (auto& w : pick) out.push_back(std::move(w.second));
  return out;
}

// Whether the model may keep buffers a worker updates itself (batch norm's running statistics): a
// user's TorchScript module (which troupe cannot see into here), the cnn, a sequential model with a
// batchnorm layer.
bool may_hold_buffers(const job::job_spec& spec) {
  const auto& m = spec.nn.model;
  if (m.type == "torchscript" || m.type == "cnn") return true;
  return m.type == "sequential" && std::any_of(m.layers.begin(), m.layers.end(), [](const std::string& l) {
           return l.rfind("batchnorm", 0) == 0;
         });
}

// Starts the evaluation round when every task is over, then sends what it says is due: its parts
// to the candidates (a part whose worker left or timed out to another).
void pump_eval(master_actor* self) {
  auto& st = self->state;
  const auto who = eval_candidates(st);
  if (who.empty()) return;
  if (!st.outcome.eval) {
    const auto& spec = st.ctx->spec();
    st.outcome.eval.emplace(8, std::max<std::uint32_t>(1, spec.job.max_task_failures), eval_timeout);
    // Replicas that may differ (local SGD's): one of them evaluates (and is the job's model). So do
    // workers whose model holds buffers, under async_ps and allreduce alike (batch norm's running
    // statistics live on each worker: neither the shards nor the ring's allreduce keep them one):
    // spread over them, the job's figures were no one model's, and not those of the model exported
    // from part 0's worker (allreduce: test_loss 0.16193 reported, 0.15947 the model's).
    st.outcome.eval->start(who, spec.traits().replicas_agree && !may_hold_buffers(spec));
  }
  for (const auto& r : st.outcome.eval->due(who, st.ctx->clock().now())) {
    auto o = wire::job();
    auto e = o.body.initEvaluate();
    e.setPart(r.part);
    e.setParts(r.parts);
    e.setWriteState(r.write_state);
    o.out.set_correlation_id(r.id);
    if (auto s = st.ctx->send(r.worker, "worker", std::move(o.out), "master"); !s)
      st.outcome.eval->gone(r.worker);
    else
      spdlog::info("all tasks over: {} evaluates part {} of {} of the test set", r.worker, r.part + 1,
                   r.parts);
  }
}

// A job whose model lives on PS shards: once every task is over, each shard is asked for a checkpoint
// of every push it applied (final_checkpoints.hpp); the job ends only once all of them hold theirs.
void pump_final_checkpoints(master_actor* self) {
  auto& st = self->state;
  const auto& spec = st.ctx->spec();
  if (!spec.uses_ps()) return;
  if (!st.outcome.shards)
    st.outcome.shards.emplace(spec.ps.shards, std::max<std::uint32_t>(1, spec.job.max_task_failures),
                              std::chrono::seconds(10), std::chrono::seconds(2));
  std::set<std::string> alive;
  for (const auto& m : st.members.view.members())
    if (m.role == cluster::node_role::ps && m.state == cluster::member_state::alive) alive.insert(m.id.name);
  for (const auto& shard : st.outcome.shards->due(alive, st.ctx->clock().now())) {
    auto o = wire::job();
    o.body.initFinalCheckpoint();
    if (auto s = st.ctx->send(shard, "ps", std::move(o.out), "master"); !s)
      spdlog::debug("final checkpoint request to {}: {}", shard, s.err().to_string());
  }
}

// Counts from durable state: the journal's (requeues, records of DONE tasks) and counters.json's.
void add_durable_counts(const master_state& st, nlohmann::json& j) {
  std::uint64_t records_done = st.outcome.counts ? st.outcome.counts->records_done : 0;
  j["samples_trained"] = std::max(st.progress.samples_total(), records_done);
  j["records_done"] = records_done;
  j["dropped_steps"] = st.progress.dropped_steps();
  j["master_starts"] = st.durable.master_starts;
  if (st.progress.first_step_wall_ms() != 0) j["first_step_wall_ms"] = st.progress.first_step_wall_ms();
  if (st.outcome.counts) {
    j["tasks_done"] = st.outcome.counts->done;
    j["tasks_failed"] = st.outcome.counts->failed;
    j["tasks_requeued"] = st.outcome.counts->requeued;
  }
}

// result.json: the job's metrics (`j`, e.g. the test set's) with the durable counts; `error` names
// why a job that trained nothing or could not be evaluated failed (empty: it did not).
void finish(master_actor* self, nlohmann::json j, const std::string& error);

// The evaluation's metrics are in and every PS shard's final checkpoint (if any) is written: the end.
void finish_when_saved(master_actor* self) {
  auto& st = self->state;
  if (!st.outcome.metrics || (st.outcome.shards && !st.outcome.shards->done())) return;
  finish(self, std::move(*st.outcome.metrics), "");
}

void send_finished(master_state& st) {
  auto o = wire::job();
  auto f = o.body.initJobFinished();
  f.setResultJson(st.outcome.result_json);
  f.setOk(st.outcome.ok);
  // Repeated every tick until the runner stops the job: a runner that is gone is named once (its
  // nodes end themselves once its heartbeat stops: [cluster] runner_timeout_s).
  auto s = st.ctx->send("runner", "runner", std::move(o.out), "master");
  if (!s && !st.outcome.runner_unreachable)
    spdlog::warn("job finished, but the runner is not reachable: {} (sent again until it is)",
                 s.err().to_string());
  st.outcome.runner_unreachable = !s;
}

}  // namespace

// Tasks held by nodes that are neither members nor connected (they died while this master was
// down, or their death went unseen) go back to TODO without waiting for their leases to expire. A
// worker leases its first task before it joins (it warms up on it first): while it is connected it
// is alive, and its task stays its own however long its start takes. A grace period after start
// lets the survivors re-join first.
void reconcile_holders(master_actor* self) {
  auto& st = self->state;
  auto now = st.ctx->clock().now();
  if (now - st.started < std::chrono::seconds(3) || now - st.members.last_reconcile < std::chrono::seconds(2))
    return;
  st.members.last_reconcile = now;
  std::set<std::string> holders;
  for (const auto& m : st.members.view.members())
    if (m.role == cluster::node_role::worker) holders.insert(m.id.to_string());
  for (const auto& p : st.ctx->peers()) holders.insert(p.to_string());
  for (auto& h : st.rows.deferred()) holders.insert(std::move(h));  // requeue_holder's, when decided
  std::vector<std::string> alive(holders.begin(), holders.end());
  if (auto d = st.names->get("dispenser")) self->send(d, requeue_atom::value, alive);
}

// Gives free heap pages back to the system a second after the last broadcast of a burst (or ten
// seconds into a longer one), once its messages are written and freed: a join storm's views, frames
// and mailbox entries are otherwise kept resident by malloc. A few ms per trim at 1,000 workers.
void trim_heap(master_state& st) {
  const auto now = st.ctx->clock().now();
  if (!st.members.trim_at ||
      (now < st.members.trim_at->second && now - st.members.trim_at->first < std::chrono::seconds(10)))
    return;
  st.members.trim_at.reset();
  ::malloc_trim(0);
  spdlog::debug("heap trimmed in {:.1f} ms",
                std::chrono::duration<double, std::milli>(st.ctx->clock().now() - now).count());
}

void on_tick(master_actor* self) {
  auto& st = self->state;
  trim_heap(st);
  st.progress.roll(st.ctx->clock().now());
  // Saved before the metrics event that reports them: the timeline never runs ahead of counters.json.
  // A relaunched master's event waits for the dispenser's counts (and with it the save it is due).
  const bool event = st.obs->metrics_due(st.members.view) && !st.obs->waits_for_counts(st.outcome.counts);
  persist_counters(self, event);
  st.obs->tick(st.members.view, st.progress, st.outcome.counts, st.goodput, event);
  settle_requeues(self);
  reconcile_holders(self);
  if (auto d = st.names->get("dispenser")) {
    self->request(d, std::chrono::seconds(2), counts_atom::value)
        .then([=](const wire::task_counts& c) { self->state.outcome.counts = c; }, [](caf::error&) {});
  }
  if (st.outcome.finished) {
    send_finished(st);  // repeated until the runner stops the job: a restarted runner link still learns it
    return;
  }
  if (!st.outcome.all_tasks_over()) return;
  // Every task quarantined (nothing was trained), or a prediction job (its tasks' output is the
  // result): nothing to evaluate.
  if (st.outcome.counts->done == 0 || !st.ctx->spec().traits().trains) {
    finish(self, nlohmann::json::object(), "");
    return;
  }
  pump_eval(self);
  pump_final_checkpoints(self);
}

namespace {

void finish(master_actor* self, nlohmann::json j, const std::string& error) {
  auto& st = self->state;
  persist_counters(self, true);
  double secs = std::chrono::duration<double>(st.ctx->clock().now() - st.started).count();
  j["job"] = st.ctx->who().job_id;
  j["strategy"] = st.ctx->spec().job.strategy;
  j["model"] = st.ctx->spec().nn.model.type;
  // The mean minibatch loss of the last steps: the window under way, else the last full one.
  const double last = st.progress.last_loss();
  if (std::isfinite(last)) j["train_loss"] = last;
  add_durable_counts(st, j);
  // A dispenser that gave up on the tasks left says why (its last quarantined task's error too).
  const std::string why = !error.empty() || !st.outcome.counts ? error : st.outcome.counts->gave_up;
  st.outcome.ok = why.empty() && st.outcome.counts && st.outcome.counts->failed == 0;
  j["ok"] = st.outcome.ok;
  if (!why.empty()) j["error"] = why;
  j["master_seconds"] = secs;
  st.outcome.result_json = j.dump();
  st.outcome.finished = true;
  st.obs->job_finished();
  // The job's last figures now: the runner stops this master soon after it hears, often before the
  // next tick (the timeline then ended short of result.json, or with only the first event).
  st.obs->tick(st.members.view, st.progress, st.outcome.counts, st.goodput, true);
  (void)cluster::write_file_atomic(st.ctx->who().job_dir + "/result.json", st.outcome.result_json + "\n");
  spdlog::info("job finished: {}", st.outcome.result_json);
  send_finished(st);
}

// The evaluation's figures in result.json.
nlohmann::json metrics_json(const eval_metrics& m) {
  nlohmann::json j;
  j["test_rows"] = m.rows;
  j["test_loss"] = m.loss;
  j["test_accuracy"] = m.accuracy;
  if (m.auc) j["test_auc"] = *m.auc;  // binary models only
  j["evaluated_by"] = m.by;           // always a list (one worker's name was a string, several a list)
  // Outputs that are no numbers for some test rows (training's NaN fails the job; this ended "ok" with
  // a null test_loss and not a word): said in result.json and the log.
  if (!std::isfinite(m.loss)) {
    j["warning"] =
        "the trained model's test loss is not a number: its outputs are not finite (NaN or "
        "infinite) for some test rows (troupe predict names them)";
    spdlog::warn("{}", j["warning"].get<std::string>());
  }
  return j;
}
}  // namespace

void on_eval_result(master_actor* self, schema::EvalResult::Reader r, const node_id& from,
                    std::uint64_t correlation_id) {
  auto& st = self->state;
  if (st.outcome.finished || !st.outcome.eval) return;
  eval_answer a{r.getRows(), r.getLoss(), r.getAccuracy(), {}, {}, r.getError().cStr(), r.getDiskFault()};
  for (float v : r.getScores()) a.scores.push_back(v);
  for (float v : r.getLabels()) a.labels.push_back(v);
  if (auto e = st.outcome.eval->answer(correlation_id, from.name, std::move(a))) {
    if (r.getDiskFault()) {  // the worker's DiskFault names it in the status: the job's end pauses
      spdlog::debug("evaluation on {}: {} (asked again)", from.name, *e);
      return;
    }
    // The model's own error (not a lost worker): asked again, of any worker, up to max_task_failures.
    spdlog::warn("evaluation on {} failed ({} of {}): {}", from.name, st.outcome.eval->failures(),
                 st.ctx->spec().job.max_task_failures, *e);
    if (st.outcome.eval->failed()) {
      // Tasks quarantined on the way are named too (the reason named the evaluation alone, and 10
      // quarantined tasks showed only in tasks_failed).
      std::string tasks;
      if (const auto& c = st.outcome.counts; c && c->failed > 0)
        tasks = "; " + std::to_string(c->failed) + " task(s) were quarantined before it" +
                (c->last_failure.empty() ? "" : " (the last, " + c->last_failure + ")");
      finish(self, nlohmann::json::object(),
             "the evaluation of the trained model failed " + std::to_string(st.outcome.eval->failures()) +
                 " times; the last, on " + st.outcome.eval->last_error() + tasks);
    }
    return;
  }
  auto m = st.outcome.eval->result();
  if (!m) return;
  st.outcome.metrics = metrics_json(*m);
  finish_when_saved(self);
}

void on_final_checkpoint(master_actor* self, const message& m) {
  auto& st = self->state;
  const auto* member = sending_member(st, m);
  if (!member || member->role != cluster::node_role::ps) return;
  if (st.outcome.finished || !st.outcome.shards) return;
  auto r = m.body().getJob().getFinalCheckpointReply();
  const std::string error = r.getError().cStr();
  st.outcome.shards->answer(m.from_node().name, error, r.getDiskFault());
  if (error.empty()) {
    spdlog::info("{}: final checkpoint {} written{}", m.from_node().to_string(), r.getVersion(),
                 st.outcome.shards->done() ? "" : "; waiting for " + st.outcome.shards->waiting());
    finish_when_saved(self);
    return;
  }
  if (r.getDiskFault()) {  // its DiskFault names it in the status: the job's end pauses
    spdlog::debug("{}: final checkpoint: {} (asked again)", m.from_node().to_string(), error);
    return;
  }
  spdlog::warn("{}: final checkpoint failed ({} of {}): {}", m.from_node().to_string(),
               st.outcome.shards->failures(), st.ctx->spec().job.max_task_failures, error);
  if (st.outcome.shards->failed())
    finish(self, nlohmann::json::object(),
           "the final checkpoint of the PS shards failed " + std::to_string(st.outcome.shards->failures()) +
               " times; the last: " + st.outcome.shards->last_error());
}

void send_status(master_actor* self, const message& request) {
  auto& st = self->state;
  wire::job_status s;
  s.job_id = st.ctx->who().job_id;
  s.epoch = st.members.view.epoch();
  s.master_incarnation = st.ctx->self().incarnation;
  s.workers_alive = static_cast<std::uint32_t>(
      st.members.view.count(cluster::node_role::worker, cluster::member_state::alive));
  s.ps_alive =
      static_cast<std::uint32_t>(st.members.view.count(cluster::node_role::ps, cluster::member_state::alive));
  if (st.outcome.counts) s.tasks = *st.outcome.counts;
  s.samples_per_sec = st.progress.samples_per_sec();
  s.loss = st.progress.loss();
  // Never below the records of DONE tasks (as the result's samples_trained): a stopped job's result
  // is this status, and the workers' last progress windows were lost (399,456 for 447,600 done).
  s.samples_total =
      std::max(st.progress.samples_total(), st.outcome.counts ? st.outcome.counts->records_done : 0);
  // Every fault at once: the journal's (the dispenser's), the master's files', the nodes'.
  s.fault = st.outcome.counts ? st.outcome.counts->fault : std::string();
  if (auto more = st.durable.job_fault(); !more.empty())
    s.fault.append(s.fault.empty() ? "" : "; ").append(more);
  if (st.outcome.counts) s.task_error = st.outcome.counts->last_failure;
  s.notice = st.notice;
  if (st.outcome.eval && !st.outcome.finished) s.evaluating = st.outcome.eval->evaluating();
  s.finished = st.outcome.finished;
  s.result_json = st.outcome.result_json;
  s.members = st.members.view.members();
  s.goodput = st.goodput;
  auto o = wire::job_reply(request);
  wire::write_job_status(o.body.initJobStatus(), s);
  if (auto r = st.ctx->reply(request, std::move(o.out), "master"); !r)
    spdlog::debug("status reply to {}: {}", request.from_node().name, r.err().to_string());
}

}  // namespace troupe::actors
