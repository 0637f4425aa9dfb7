#include "core.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>

namespace troupe::serve {

serving_core::serving_core(core_options options, replica_link& link, serve_metrics& metrics,
                           troupe::clock& clk)
    : opt_(options),
      link_(link),
      metrics_(metrics),
      clock_(clk),
      queue_(options.limits),
      replicas_(options.pipeline, options.replica_timeout) {}

failure serving_core::submit(request_ptr r) {
  effects fx;
  {
    std::lock_guard lk(mu_);
    if (stopped_) return failure::shutting_down;
    if (!queue_.admit(std::move(r))) return failure::queue_full;
    pump(fx);
    update_gauges();
  }
  apply(std::move(fx));
  return failure::none;
}

void serving_core::add_replica(const std::string& node, std::uint64_t incarnation, std::uint32_t generation,
                               std::size_t slot) {
  std::lock_guard lk(mu_);
  replicas_.add(node, incarnation, generation, slot);
}

bool serving_core::replica_ready(const std::string& node, std::uint64_t incarnation,
                                 const std::string& version, const std::string& placement, int pid) {
  effects fx;
  bool known;
  {
    std::lock_guard lk(mu_);
    known = replicas_.set_ready(node, incarnation, version, placement, pid);
    if (known) pump(fx);
    update_gauges();
  }
  apply(std::move(fx));
  return known;
}

void serving_core::replica_gone(const std::string& node, std::optional<std::uint64_t> incarnation) {
  effects fx;
  {
    std::lock_guard lk(mu_);
    auto lost = replicas_.remove(node, incarnation);
    for (auto& b : lost) requeue(std::move(b), node + " is gone", fx);
    pump(fx);
    update_gauges();
  }
  apply(std::move(fx));
}

void serving_core::requeue(batch&& b, const std::string& why, effects& fx) {
  metrics_.retried_batches.inc();
  std::vector<request_ptr> again;
  for (auto& r : b.requests) {
    if (r->attempts >= opt_.max_attempts) {
      outcome o;
      o.why = failure::replicas_failed;
      o.message =
          "sent to " + std::to_string(r->attempts) + " replicas, none answered (the last: " + why + ")";
      fx.answers.emplace_back(std::move(r), std::move(o));
    } else {
      again.push_back(std::move(r));
    }
  }
  queue_.requeue_front(std::move(again));
}

void serving_core::result(std::uint64_t batch_id, const float* logits, std::size_t rows, std::size_t width,
                          const std::string& error, const std::string& version, std::uint32_t forward_us) {
  effects fx;
  {
    std::lock_guard lk(mu_);
    auto b = replicas_.finish(batch_id);
    if (!b) return;  // answered already, or sent again elsewhere
    auto now = clock_.now();
    metrics_.batch_seconds.observe(std::chrono::duration<double>(now - b->sent).count());
    metrics_.forward_seconds.observe(forward_us * 1e-6);
    const bool ok = error.empty() && rows == b->rows;
    if (!error.empty() && b->requests.size() > 1) retry_alone(b->requests);
    std::size_t at = 0;
    for (auto& r : b->requests) {
      outcome o;
      o.version = version;
      o.generation = b->generation;
      if (ok) {
        o.width = width;
        o.logits.assign(logits + at * width, logits + (at + r->rows) * width);
        at += r->rows;
      } else {
        o.why = failure::model_failed;
        o.message = !error.empty() ? error
                                   : "the replica answered " + std::to_string(rows) +
                                         " rows for a batch of " + std::to_string(b->rows);
      }
      fx.answers.emplace_back(std::move(r), std::move(o));
    }
    if (ok) metrics_.count_rows(version, rows);
    pump(fx);
    update_gauges();
  }
  apply(std::move(fx));
}

void serving_core::retry_alone(std::vector<request_ptr>& requests) {
  // The model failed on the batch: one request may be to blame (a value the model raises on), and
  // none of the others should fail with it. Each goes again in a batch of its own.
  for (auto& r : requests) r->alone = true;
  metrics_.retried_batches.inc();
  queue_.requeue_front(std::move(requests));
  requests.clear();
}

void serving_core::activate(std::uint32_t generation) {
  effects fx;
  {
    std::lock_guard lk(mu_);
    for (std::uint32_t g = 0; g < generation; ++g) replicas_.drain(g);
    active_ = generation;
    pump(fx);
    update_gauges();
  }
  apply(std::move(fx));
}

serving_core::tick_result serving_core::tick() {
  tick_result t;
  effects fx;
  {
    std::lock_guard lk(mu_);
    auto now = clock_.now();
    for (auto& r : queue_.expire(now)) {
      outcome o;
      o.why = failure::timed_out;
      o.message =
          "no replica answered within request_timeout_ms (" +
          std::to_string(
              std::chrono::duration_cast<std::chrono::milliseconds>(r->deadline - r->arrived).count()) +
          " ms)";
      fx.answers.emplace_back(std::move(r), std::move(o));
    }
    t.fence = std::move(unreachable_);
    unreachable_.clear();
    for (auto& b : replicas_.overdue(now)) {
      replica_ref who{b.node, b.incarnation};
      if (std::find(t.fence.begin(), t.fence.end(), who) == t.fence.end()) t.fence.push_back(who);
      requeue(std::move(b), b.node + " did not answer within replica_timeout_ms", fx);
    }
    pump(fx);
    t.stop = replicas_.drained();
    update_gauges();
    t.next = queue_.next_due(now);
    if (auto o = replicas_.next_overdue(); o && (!t.next || *o < *t.next)) t.next = o;
  }
  apply(std::move(fx));
  return t;
}

void serving_core::stop_accepting() {
  std::lock_guard lk(mu_);
  stopped_ = true;
}

bool serving_core::wait_idle(clock::time_point deadline) {
  std::unique_lock lk(mu_);
  return troupe::wait_until(clock_, idle_cv_, lk, deadline, [this] { return idle_locked(); });
}

void serving_core::shutdown() {
  effects fx;
  {
    std::lock_guard lk(mu_);
    stopped_ = true;
    auto fail = [&](request_ptr r) {
      outcome o;
      o.why = failure::shutting_down;
      o.message = "the server is stopping";
      fx.answers.emplace_back(std::move(r), std::move(o));
    };
    for (auto& r : queue_.drain()) fail(std::move(r));
    for (auto& b : replicas_.abandon())
      for (auto& r : b.requests) fail(std::move(r));
    update_gauges();
  }
  apply(std::move(fx));
}

core_stats serving_core::stats() const {
  std::lock_guard lk(mu_);
  core_stats s;
  s.active = active_;
  s.queued_requests = queue_.size();
  s.queued_rows = queue_.rows();
  s.inflight_batches = replicas_.inflight_batches();
  s.ready = replicas_.count(active_, replica_phase::ready);
  for (const auto& [name, r] : replicas_.replicas()) s.replicas.push_back(r);
  return s;
}

void serving_core::pump(effects& fx) {
  auto now = clock_.now();
  while (queue_.due(now)) {
    const replica_info* r = replicas_.pick(active_);
    if (!r) return;
    auto requests = encoded_for(queue_.take(), r->generation, fx);
    if (requests.empty()) continue;
    for (auto& q : requests) ++q->attempts;
    const batch& b = replicas_.start(r->node, std::move(requests), now);
    metrics_.batch_rows.observe(static_cast<double>(b.rows));
    fx.sends.push_back({b.node, b.incarnation, b.id, b.requests, b.rows});
  }
}

// A request whose raw rows another generation's encoder encoded (a swap between its parse and its
// batch: the old version's standardization fed the new model, a 200 with a wrong answer) is encoded
// again by `gen`'s, into a copy (the old one may still be read by a send on another thread); one
// gen's encoder refuses is answered 400.
std::vector<request_ptr> serving_core::encoded_for(std::vector<request_ptr> requests, std::uint32_t gen,
                                                   effects& fx) {
  std::vector<request_ptr> out;
  out.reserve(requests.size());
  for (auto& q : requests) {
    if (q->generation == 0 || q->generation == gen || !q->reencode) {
      out.push_back(std::move(q));
      continue;
    }
    auto again = std::make_shared<request>(*q);
    if (auto why = q->reencode(*again, gen); !why.empty()) {
      outcome o;
      o.why = failure::bad_rows;
      o.message = why;
      fx.answers.emplace_back(std::move(again), std::move(o));
      continue;
    }
    out.push_back(std::move(again));
  }
  return out;
}

void serving_core::update_gauges() {
  metrics_.queue_rows.set(static_cast<double>(queue_.rows()));
  metrics_.queue_requests.set(static_cast<double>(queue_.size()));
  metrics_.inflight_batches.set(static_cast<double>(replicas_.inflight_batches()));
  metrics_.replicas_ready.set(static_cast<double>(replicas_.count(active_, replica_phase::ready)));
  if (idle_locked()) idle_cv_.notify_all();
}

void serving_core::apply(effects&& fx) {
  while (!fx.sends.empty() || !fx.answers.empty()) {
    effects more;
    for (auto& s : fx.sends) {
      if (link_.send_batch(s.node, s.batch_id, s.requests, s.rows)) continue;
      // Not sent (the replica just went away, or its send queue is full): the replica is counted
      // out with every batch it holds, and fenced at the next tick (a live one is relaunched), so
      // that the batch does not go straight back to it.
      std::lock_guard lk(mu_);
      auto lost = replicas_.remove(s.node, s.incarnation);
      if (!lost.empty()) unreachable_.push_back({s.node, s.incarnation});
      for (auto& b : lost) requeue(std::move(b), "cannot send to " + s.node, more);
      pump(more);
      if (idle_locked()) idle_cv_.notify_all();  // its requests may all have failed
    }
    for (auto& [r, o] : fx.answers) {
      if (r->done) r->done(std::move(o));
    }
    fx = std::move(more);
  }
}

}  // namespace troupe::serve
