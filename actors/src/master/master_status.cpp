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

bool all_tasks_over(const master_state& st) {
  return st.counts && st.counts->all_over();
}

// A worker to evaluate: one that finished its training loop (ring strategies: it holds the final
// model), else for async PS any alive worker (the model lives on the shards).
std::string pick_eval_worker(const master_state& st) {
  for (const auto& m : st.view.members())
    if (m.role == cluster::node_role::worker && m.state == cluster::member_state::alive &&
        st.done_workers.count(m.id.name))
      return m.id.name;
  if (st.ctx->spec().uses_ps())
    for (const auto& m : st.view.members())
      if (m.role == cluster::node_role::worker && m.state == cluster::member_state::alive) return m.id.name;
  return {};
}

void request_eval(master_actor* self) {
  auto& st = self->state;
  std::string w = pick_eval_worker(st);
  if (w.empty()) return;
  st.eval_worker = w;
  st.eval_request += 1;
  st.eval_sent = st.ctx->clock().now();
  auto o = wire::job();
  o.body.initEvaluate();
  o.out.set_correlation_id(st.eval_request);
  if (auto s = st.ctx->send(w, "worker", std::move(o.out), "master"); !s)
    st.eval_worker.clear();
  else
    spdlog::info("all tasks over: {} evaluates the model", w);
}

void roll_window(master_state& st) {
  auto now = st.ctx->clock().now();
  double secs = std::chrono::duration<double>(now - st.window_start).count();
  if (secs < 1.0) return;
  st.samples_per_sec = static_cast<double>(st.window_samples) / secs;
  if (st.window_steps > 0) st.loss = st.window_loss / static_cast<double>(st.window_steps);
  st.window_samples = st.window_steps = 0;
  st.window_loss = 0;
  st.window_start = now;
}

// Counts from durable state: the journal's (requeues, records of DONE tasks) and counters.json's.
void add_durable_counts(const master_state& st, nlohmann::json& j) {
  std::uint64_t records_done = st.counts ? st.counts->records_done : 0;
  j["samples_trained"] = std::max(st.samples_total, records_done);
  j["records_done"] = records_done;
  j["dropped_steps"] = st.dropped_steps;
  j["master_starts"] = st.master_starts;
  if (st.first_step_wall_ms != 0) j["first_step_wall_ms"] = st.first_step_wall_ms;
  if (st.counts) {
    j["tasks_done"] = st.counts->done;
    j["tasks_failed"] = st.counts->failed;
    j["tasks_requeued"] = st.counts->requeued;
  }
}

// result.json: the job's metrics (`j`, e.g. the test set's) with the durable counts; `error` names
// why a job that trained nothing or could not be evaluated failed (empty: it did not).
void finish(master_actor* self, nlohmann::json j, const std::string& error);

void send_finished(master_state& st) {
  auto o = wire::job();
  auto f = o.body.initJobFinished();
  f.setResultJson(st.result_json);
  f.setOk(st.result_ok);
  if (auto s = st.ctx->send("runner", "runner", std::move(o.out), "master"); !s)
    spdlog::warn("job finished, but the runner is not reachable: {}", s.err().to_string());
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
  if (now - st.started < std::chrono::seconds(3) || now - st.last_reconcile < std::chrono::seconds(2)) return;
  st.last_reconcile = now;
  std::set<std::string> holders;
  for (const auto& m : st.view.members())
    if (m.role == cluster::node_role::worker) holders.insert(m.id.to_string());
  for (const auto& p : st.ctx->peers()) holders.insert(p.to_string());
  std::vector<std::string> alive(holders.begin(), holders.end());
  if (auto d = st.names->get("dispenser")) self->send(d, requeue_atom::value, alive);
}

// Gives free heap pages back to the system a second after the last broadcast of a burst (or ten
// seconds into a longer one), once its messages are written and freed: a join storm's views, frames
// and mailbox entries are otherwise kept resident by malloc. A few ms per trim at 1,000 workers.
void trim_heap(master_state& st) {
  const auto now = st.ctx->clock().now();
  if (!st.trim_at || (now < st.trim_at->second && now - st.trim_at->first < std::chrono::seconds(10))) return;
  st.trim_at.reset();
  ::malloc_trim(0);
  spdlog::debug("heap trimmed in {:.1f} ms",
                std::chrono::duration<double, std::milli>(st.ctx->clock().now() - now).count());
}

void on_tick(master_actor* self) {
  auto& st = self->state;
  trim_heap(st);
  roll_window(st);
  st.obs->tick(st);
  persist_counters(self, false);
  reconcile_holders(self);
  if (auto d = st.names->get("dispenser")) {
    self->request(d, std::chrono::seconds(2), counts_atom::value)
        .then([=](const wire::task_counts& c) { self->state.counts = c; }, [](caf::error&) {});
  }
  if (st.finished) {
    send_finished(st);  // repeated until the runner stops the job: a restarted runner link still learns it
    return;
  }
  if (!all_tasks_over(st)) return;
  // Every task quarantined (nothing was trained), or a prediction job (its tasks' output is the
  // result): nothing to evaluate.
  if (st.counts->done == 0 || st.ctx->spec().job.strategy == "predict") {
    finish(self, nlohmann::json::object(), "");
    return;
  }
  bool waiting = !st.eval_worker.empty() && st.ctx->clock().now() - st.eval_sent < eval_timeout;
  if (!waiting) request_eval(self);
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
  const double last = st.window_steps > 0 ? st.window_loss / static_cast<double>(st.window_steps) : st.loss;
  if (std::isfinite(last)) j["train_loss"] = last;
  add_durable_counts(st, j);
  st.result_ok = error.empty() && st.counts && st.counts->failed == 0;
  j["ok"] = st.result_ok;
  if (!error.empty()) j["error"] = error;
  j["master_seconds"] = secs;
  st.eval_worker.clear();
  st.result_json = j.dump();
  st.finished = true;
  st.obs->job_finished();
  (void)cluster::write_file_atomic(st.ctx->who().job_dir + "/result.json", st.result_json + "\n");
  spdlog::info("job finished: {}", st.result_json);
  send_finished(st);
}

// An evaluation that failed for the model's sake (its worker answered an error): asked again, of
// any worker, until max_task_failures of them failed; then the job ends failed, naming the error.
void eval_failed(master_actor* self, const std::string& error) {
  auto& st = self->state;
  st.eval_failures += 1;
  st.eval_error = st.eval_worker + ": " + error;
  spdlog::warn("evaluation on {} failed ({} of {}): {}", st.eval_worker, st.eval_failures,
               st.ctx->spec().job.max_task_failures, error);
  st.eval_worker.clear();
  if (st.eval_failures < std::max<std::uint32_t>(1, st.ctx->spec().job.max_task_failures)) return;
  finish(self, nlohmann::json::object(),
         "the evaluation of the trained model failed " + std::to_string(st.eval_failures) +
             " times; the last, on " + st.eval_error);
}

}  // namespace

void on_eval_result(master_actor* self, schema::EvalResult::Reader r, std::uint64_t correlation_id) {
  auto& st = self->state;
  if (st.finished || correlation_id != st.eval_request) return;
  if (r.getError().size() > 0) return eval_failed(self, r.getError().cStr());
  nlohmann::json j;
  j["test_rows"] = r.getRows();
  j["test_loss"] = r.getLoss();
  j["test_accuracy"] = r.getAccuracy();
  if (std::isfinite(r.getAuc())) j["test_auc"] = r.getAuc();  // NaN: not a binary model
  j["evaluated_by"] = st.eval_worker;
  finish(self, std::move(j), "");
}

void send_status(master_actor* self, const message& request) {
  auto& st = self->state;
  wire::job_status s;
  s.job_id = st.ctx->who().job_id;
  s.epoch = st.view.epoch();
  s.master_incarnation = st.ctx->self().incarnation;
  s.workers_alive =
      static_cast<std::uint32_t>(st.view.count(cluster::node_role::worker, cluster::member_state::alive));
  s.ps_alive =
      static_cast<std::uint32_t>(st.view.count(cluster::node_role::ps, cluster::member_state::alive));
  if (st.counts) s.tasks = *st.counts;
  s.samples_per_sec = st.samples_per_sec;
  s.loss = st.loss;
  s.samples_total = st.samples_total;
  // Every fault at once: the journal's (the dispenser's), the master's files', the nodes'.
  s.fault = st.counts ? st.counts->fault : std::string();
  if (auto more = job_fault(st); !more.empty()) s.fault.append(s.fault.empty() ? "" : "; ").append(more);
  if (st.counts) s.task_error = st.counts->last_failure;
  s.evaluating = st.eval_worker;
  s.finished = st.finished;
  s.result_json = st.result_json;
  s.members = st.view.members();
  auto o = wire::job_reply(request);
  wire::write_job_status(o.body.initJobStatus(), s);
  if (auto r = st.ctx->reply(request, std::move(o.out), "master"); !r)
    spdlog::debug("status reply to {}: {}", request.from_node().name, r.err().to_string());
}

}  // namespace troupe::actors
