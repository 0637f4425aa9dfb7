// The worker's side of durable replicas: the ring checkpoint it writes when it is the ring's
// writer (an async_ps worker: its buffers alone), and the final state after the job's evaluation
// (docs/job.md, "Ring checkpoints" and "The job's model").
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdlib>
#include <limits>

#include "replica_state.hpp"
#include "strategies/replicas.hpp"
#include "troupe/wire/messages.hpp"
#include "worker_state.hpp"

namespace troupe::actors {

namespace {

// The alive worker of the lowest index in `view` writes: exactly one whatever the membership.
bool writes_checkpoints(const worker_state& st, const cluster::membership_view& view) {
  std::size_t lowest = std::numeric_limits<std::size_t>::max();
  for (const auto& m : view.members()) {
    if (m.role != cluster::node_role::worker || m.state != cluster::member_state::alive) continue;
    if (m.id.name.rfind("worker-", 0) != 0) continue;
    lowest = std::min<std::size_t>(lowest, std::strtoull(m.id.name.c_str() + 7, nullptr, 10));
  }
  return lowest == st.node->who().index;
}

model::state_meta meta_of(worker_state& st, const char* from) {
  model::state_meta m;
  // The strategy's replica step where it knows one (the GPU path's host trainer takes no steps),
  // else the host trainer's optimizer steps (the same for allreduce on the host).
  const std::uint64_t known = st.strat && st.ctx ? st.strat->checkpointed_step(*st.ctx) : 0;
  m.step = known > 0 ? known : replicas::optimizer_steps(*st.backend);
  m.from = from;
  // A checkpoint's: the epoch of the task the writer trains. The job's end: its last epoch (the final
  // evaluation comes once every task of every epoch is done, whichever worker writes it).
  const auto epochs = st.node->spec().nn.train.epochs;
  if (m.from == "final" && epochs > 0)
    m.data_epoch = static_cast<std::uint32_t>(epochs - 1);
  else if (st.ctx)
    m.data_epoch = st.ctx->data_epoch;
  m.writer = st.node->self().to_string();
  m.written_unix_ms = st.node->clock().wall_ms();
  return m;
}

// A copy of the replica, with the strategy's own state of the same moment (between two steps),
// handed to the ring's checkpoint writer; under async_ps the buffers alone (the shards checkpoint the
// parameters). False when none could be made or the writer was busy.
bool offer_checkpoint(worker_state& st) {
  auto s = st.node->spec().uses_ps() ? snapshot_buffers(*st.backend) : snapshot(*st.backend);
  if (!s) {
    spdlog::warn("replica checkpoint: {}", s.err().to_string());
    return false;
  }
  if (auto kept = st.strat->durable_state(); !kept.empty())
    s->dense_slots.emplace_back(ring_checkpoints::strategy_key, std::move(kept));
  auto meta = meta_of(st, "checkpoint");
  model::keep_meta_in(*s, meta);  // in the version itself too (read back without its state.json)
  if (!st.checkpoints->writer().offer(std::move(*s), std::move(meta))) return false;
  st.steps_at_checkpoint = st.steps_total;
  return true;
}

}  // namespace

std::chrono::milliseconds checkpoint_every(const job::job_spec& spec) {
  return spec.uses_ps() ? spec.ps.checkpoint_every : spec.job.checkpoint_every;
}

void maybe_checkpoint(worker_state& st) {
  if (!st.checkpoints || checkpoint_every(st.node->spec()).count() == 0) return;
  const auto now = st.node->clock().now();
  if (now < st.next_checkpoint) return;
  st.next_checkpoint = now + checkpoint_every(st.node->spec());
  if (st.checkpoints->writer().busy() || !writes_checkpoints(st, st.node->view())) return;
  offer_checkpoint(st);
}

bool checkpoint_on_leave(worker_state& st) {
  if (!st.checkpoints || checkpoint_every(st.node->spec()).count() == 0) return true;
  if (st.steps_total == st.steps_at_checkpoint) return true;  // nothing trained since the last one
  if (!writes_checkpoints(st, st.node->view_at_leave())) return true;
  // The periodic one still being written is finished first (the writer keeps one at a time), and
  // this one before the worker hands its task back (leave_job waits for that).
  auto& clk = st.node->clock();
  auto& writer = st.checkpoints->writer();
  const auto until = clk.now() + leave_checkpoint_bound;
  auto finish = [&] {
    while (writer.busy() && clk.now() < until) clk.sleep_for(std::chrono::milliseconds(5));
  };
  finish();
  const auto before = writer.written();
  if (!offer_checkpoint(st)) return false;
  spdlog::info("{}: leaving: the replica's state after {} steps goes to a last checkpoint",
               st.node->self().to_string(), st.steps_total);
  finish();
  return writer.written() > before;
}

expected<void> write_final_state(worker_state& st) {
  auto s = snapshot(*st.backend);
  const std::string dir = st.node->who().job_dir + "/checkpoints/final";
  if (!s) return std::move(s).err().wrap("the job's final state");
  auto v = model::write_state(dir, *s, meta_of(st, "final"));
  if (!v) return std::move(v).err().wrap("the job's final state could not be written to " + dir);
  spdlog::info("the job's final state: {} (version {})", dir, *v);
  return {};
}

void tell_ring_restored(worker_state& st, std::uint64_t step) {
  if (!st.rpc) return;
  const auto self = st.node->self().to_string();
  auto o = wire::job();
  o.body.initRingRestored().setStep(step);
  auto reply = st.rpc->call({"master", "master", std::move(o.out)}, std::chrono::seconds(10));
  std::string error = reply ? "the master's answer is no RingRestoredReply" : reply.err().to_string();
  if (reply)
    wire::guarded("ring restored", [&] {
      auto j = reply->body().getJob();
      if (j.which() != schema::JobMessage::RING_RESTORED_REPLY) return;
      auto r = j.getRingRestoredReply();
      error = r.getError().cStr();
      if (error.empty() && (step > 0 || r.getReopened() + r.getForgotten() > 0))
        spdlog::info(
            "{}: the master trains again what the steps after {} applied: {} DONE task(s), {} partly "
            "trained task(s) from their first row",
            self, step, r.getReopened(), r.getForgotten());
    });
  if (!error.empty())
    spdlog::warn(
        "{}: what the steps after {} applied is in no model now, and the master could not put it back "
        "to TODO: {}",
        self, step, error);
}

}  // namespace troupe::actors
