// A dead worker's leases back to TODO, its task with the rows a surviving model holds
// (surviving_rows.hpp); what a ring restored from its checkpoint lost, back to TODO.
#include <spdlog/spdlog.h>

#include "caf_types.hpp"
#include "master_state.hpp"
#include "troupe/wire/messages.hpp"

namespace troupe::actors {

namespace {
void send_requeue(master_actor* self, const surviving_rows::decision& d) {
  std::vector<std::uint64_t> kept;  // {task, attempt, trained, step}; empty: none
  if (d.rows) kept = {d.rows->id, d.rows->attempt, d.rows->trained, d.rows->step};
  if (auto dispenser = self->state.names->get("dispenser"))
    self->send(dispenser, requeue_atom::value, d.holder, std::move(kept));
}
void answer_restored(master_actor* self, const message& m, const std::vector<std::uint64_t>& n,
                     const std::string& error) {
  auto o = wire::job_reply(m);
  auto r = o.body.initRingRestoredReply();
  if (n.size() == 2) {
    r.setReopened(n[0]);
    r.setForgotten(n[1]);
  }
  r.setError(error);
  if (auto s = self->state.ctx->reply(m, std::move(o.out), "master"); !s)
    spdlog::warn("ring restore reply to {}: {}", m.from_node().to_string(), s.err().to_string());
}
}  // namespace

void requeue(master_actor* self, const node_id& id) {
  auto& st = self->state;
  if (!st.members.requeued_holders.insert(id.to_string()).second) return;
  // Two progress intervals: the survivors' next reports, late ones too.
  const auto wait =
      2 * std::chrono::duration_cast<troupe::clock::duration>(st.ctx->spec().job.progress_every);
  if (auto d = st.rows.gone(id.to_string(), st.ctx->clock().now(), wait)) send_requeue(self, *d);
}

void settle_requeues(master_actor* self) {
  for (const auto& d : self->state.rows.settle(self->state.ctx->clock().now())) send_requeue(self, d);
}

// The deferred decisions first (the rows they keep capped at the checkpoint's step), then the
// journal: the dispenser takes them in that order. The worker hears once both are done.
void on_ring_restored(master_actor* self, const message& m) {
  auto& st = self->state;
  if (!sending_member(st, m)) return answer_restored(self, m, {}, "not a member of the job");
  const std::uint64_t step = m.body().getJob().getRingRestored().getStep();
  if (step > 0)
    spdlog::info("{}: the ring starts again from its checkpoint of step {} (no replica of it had trained)",
                 m.from_node().to_string(), step);
  for (const auto& d : st.rows.restored(step)) send_requeue(self, d);
  auto dispenser = st.names->get("dispenser");
  if (!dispenser) return answer_restored(self, m, {}, "the master has no dispenser now");
  self->request(dispenser, std::chrono::seconds(10), restored_atom::value, step)
      .then(
          [=](const std::vector<std::uint64_t>& n, const std::string& error, const std::string& said) {
            if (!said.empty()) self->state.notice = said;  // for the job's console (JobStatus.notice)
            answer_restored(self, m, n, error);
          },
          [=](caf::error& e) { answer_restored(self, m, {}, "the dispenser: " + caf::to_string(e)); });
}

}  // namespace troupe::actors
