// A dead worker's leases back to TODO, its task with the rows a surviving model holds
// (surviving_rows.hpp).
#include "caf_types.hpp"
#include "master_state.hpp"

namespace troupe::actors {

namespace {
void send_requeue(master_actor* self, const surviving_rows::decision& d) {
  std::vector<std::uint64_t> kept;  // {task, attempt, trained, step}; empty: none
  if (d.rows) kept = {d.rows->id, d.rows->attempt, d.rows->trained, d.rows->step};
  if (auto dispenser = self->state.names->get("dispenser"))
    self->send(dispenser, requeue_atom::value, d.holder, std::move(kept));
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

}  // namespace troupe::actors
