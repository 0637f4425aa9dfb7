// The master: admits nodes into the membership view and publishes each new epoch, notices deaths
// (closed connection, missed heartbeats, or the runner's word that a process exited) and has the
// dead worker's tasks re-queued, aggregates progress, answers status, and once every task is done
// has a worker evaluate the model and tells the runner the job is over.
#include <spdlog/spdlog.h>
#include <caf/all.hpp>

#include <cmath>
#include <fstream>
#include <optional>

#include "caf_types.hpp"
#include "master_observer.hpp"
#include "master_state.hpp"
#include "pause_watch.hpp"
#include "roles.hpp"
#include "troupe/cluster/errc.hpp"
#include "troupe/cluster/job_dir.hpp"
#include "troupe/wire/messages.hpp"

namespace troupe::actors {

namespace {

std::uint64_t load_epoch(const std::string& path) {
  std::uint64_t e = 0;
  std::ifstream(path) >> e;
  return e;
}

// The view goes out once the changes already in the mailbox are applied: a burst of joins or deaths
// is one broadcast, not one per change (each broadcast is N messages of N members).
void publish(master_actor* self, const std::string& reason) {
  auto& st = self->state;
  st.members.publish_reasons.push_back(reason);
  if (!st.members.publish_queued) self->send(self, publish_atom::value);
  st.members.publish_queued = true;
}

// Sends member `id` a view message of the current epoch (whole, or a delta from the view it
// holds) and records a failure: after one nothing is known, the whole view next.
bool send_view(master_actor* self, const node_id& id, outbound&& o) {
  auto& st = self->state;
  if (auto s = st.ctx->send(id.name, "node", std::move(o), "master"); !s) {
    spdlog::debug("membership to {}: {}", id.name, s.err().to_string());
    st.members.unsent.insert(id.name);
    return false;
  }
  st.members.unsent.erase(id.name);
  return true;
}

// Each member gets the change since the last broadcast (a death: one NodeRef), or the whole view
// when it does not hold that broadcast's view (it joined since, its send failed, this master is
// new). The view's mark is that broadcast: the changes since are kept there, not a second copy of
// the view. Each message is encoded once; a member's copy is a deep copy, not a new encoding.
void send_views(master_actor* self, const std::string& reason) {
  auto& st = self->state;
  const auto incarnation = st.ctx->self().incarnation;
  const auto base = st.members.view.mark_epoch();
  const bool deltas = base > 0 && base < st.members.view.epoch();
  std::optional<outbound> whole, delta;
  std::size_t whole_sent = 0, delta_sent = 0;
  for (const auto& m : st.members.view.members()) {
    if (m.address.empty() || m.id.name == "master") continue;
    // Sent the last broadcast: this incarnation was a member with an address then, and reached.
    const auto* was = deltas ? st.members.view.at_mark(m) : nullptr;
    const bool as_delta =
        was && was->id == m.id && !was->address.empty() && !st.members.unsent.contains(m.id.name);
    auto& proto = as_delta ? delta : whole;
    if (!proto)
      proto = as_delta ? wire::membership_delta(st.members.view.diff_since_mark(), base, st.members.view,
                                                reason, st.members.ring_epoch, incarnation)
                       : wire::membership(st.members.view, reason, st.members.ring_epoch, incarnation);
    outbound o(static_cast<unsigned>(proto->size_bytes() / 8 + 64));
    o.body().setMembership(proto->body().getMembership().asReader());
    if (send_view(self, m.id, std::move(o))) ++(as_delta ? delta_sent : whole_sent);
  }
  std::erase_if(st.members.unsent, [&](const std::string& name) { return !st.members.view.find(name); });
  st.members.view.mark();
  spdlog::debug("epoch {}: view sent whole to {} member(s), as a delta to {}", st.members.view.epoch(),
                whole_sent, delta_sent);
}

void broadcast(master_actor* self) {
  auto& st = self->state;
  st.members.publish_queued = false;
  if (st.members.publish_reasons.empty()) return;
  // Every change keeps its own log line (tests and operators grep them); the view once.
  for (const auto& r : st.members.publish_reasons) spdlog::info("epoch {}: {}", st.members.view.epoch(), r);
  std::string reason = st.members.publish_reasons.front();
  if (st.members.publish_reasons.size() > 1)
    reason += " and " + std::to_string(st.members.publish_reasons.size() - 1) + " more change(s)";
  st.members.publish_reasons.clear();
  // The ring of the last broadcast is the view's at its mark: the changes since tell whether it
  // moved, with no copy of it kept (the first broadcast has no mark).
  const bool ring_moved = st.members.view.mark_epoch() == 0 ? !st.members.view.worker_ring().ranks.empty()
                                                            : st.members.view.ring_changed_since_mark();
  if (ring_moved) {
    st.members.ring_epoch = st.members.view.epoch();
    st.gpu.forget_before(st.members.ring_epoch);
  }
  (void)cluster::write_file_atomic(st.members.epoch_file, std::to_string(st.members.view.epoch()) + "\n");
  if (st.members.view.members().size() <= 64)
    spdlog::info("epoch {}: {}", st.members.view.epoch(), st.members.view.to_string());
  else
    spdlog::info("epoch {}: {} members", st.members.view.epoch(), st.members.view.members().size());
  send_views(self, reason);
  const auto now = st.ctx->clock().now();
  st.members.trim_at = {st.members.trim_at ? st.members.trim_at->first : now, now + std::chrono::seconds(1)};
}

void member_gone(master_actor* self, const node_id& id, const std::string& reason) {
  auto& st = self->state;
  const auto* m = st.members.view.find(id.name);
  if (!m || m->id.incarnation != id.incarnation) return;
  st.members.suspects.erase(id.name);
  bool worker = m->role == cluster::node_role::worker;
  if (auto r = st.members.view.remove(id); !r) return;
  st.ctx->forget(id);
  st.outcome.done_workers.erase(id.name);
  if (std::erase_if(st.durable.node_faults, [&](const auto& f) { return f.first.first == id.name; }) > 0)
    publish_fault(self);  // its next incarnation tells again
  if (worker) requeue(self, id);
  if (st.outcome.eval) st.outcome.eval->gone(id.name);  // its part of the evaluation goes to another worker
  st.obs->gone(id, worker, reason, st.members.view.epoch());
  publish(self, id.to_string() + " down: " + reason);
}

// How long a member that dropped its connection during the master's own pause has to re-join:
// its re-dial backs off up to reconnect_max, and its join retries come every 250 ms.
std::chrono::milliseconds pause_grace(const job::job_spec& spec) {
  return spec.transport.reconnect_max + 3 * spec.transport.heartbeat_timeout;
}

// A member's connection is gone. Normally it is dead (its process exited, or it missed its
// heartbeats). But when this master has just been paused itself (SIGSTOP shorter than the runner's
// fence, a VM freeze), the members dropped it for its own silence: they re-dial and re-join, and
// declaring them dead would make every node exit and be relaunched. Such a member stays in the
// view until it re-joins, or is declared dead once its grace is over; the runner's word that its
// process exited still removes it at once.
void peer_down(master_actor* self, const node_id& id, const std::string& reason) {
  auto& st = self->state;
  const auto* m = st.members.view.find(id.name);
  auto grace = pause_grace(st.ctx->spec());
  if (m && m->id == id && st.members.pause->paused_within(grace)) {
    if (st.members.suspects.count(id.name) == 0)
      spdlog::warn(
          "{} dropped its connection while this master was paused ({}): it stays a member if it "
          "re-joins within {} ms",
          id.to_string(), reason, grace.count());
    st.members.suspects[id.name] = {id, reason, st.ctx->clock().now() + grace};
    return;
  }
  member_gone(self, id, reason);
}

// The members that did not come back after the master's pause are dead after all.
void expire_suspects(master_actor* self) {
  auto& st = self->state;
  auto now = st.ctx->clock().now();
  std::vector<master_members::suspect> due;
  for (const auto& [name, s] : st.members.suspects)
    if (s.until <= now) due.push_back(s);
  for (const auto& s : due) {
    st.members.suspects.erase(s.id.name);
    member_gone(self, s.id, s.reason + " (not back after the master's pause)");
  }
}

// A node's own word that it leaves: removed like a dead one, and told the new view (which does not
// list it) as the answer it waits for before it exits.
void node_left(master_actor* self, const node_id& id, const std::string& reason) {
  auto& st = self->state;
  member_gone(self, id, reason);
  auto o = wire::membership(st.members.view, id.to_string() + " left", st.members.ring_epoch,
                            st.ctx->self().incarnation);
  if (auto s = st.ctx->send(id.name, "node", std::move(o), "master"); !s)
    spdlog::debug("membership to {} (leaving): {}", id.name, s.err().to_string());
}

// The member a Join asks for; none (logged) when its role is unknown or it speaks for another node.
std::optional<cluster::member> read_join(const message& m) {
  auto j = m.body().getJoin();
  auto role = cluster::parse_role(j.getRole().cStr());
  if (!role) {
    spdlog::warn("join from {} refused: {}", m.from_node().to_string(), role.err().to_string());
    return std::nullopt;
  }
  cluster::member mem;
  mem.id = wire::read_node(j.getNode());
  mem.role = *role;
  mem.address = j.getAddress().cStr();
  mem.pid = static_cast<int>(j.getPid());
  mem.ring_address = j.getRingAddress().cStr();
  if (mem.id != m.from_node()) {
    spdlog::warn("join for {} sent by {} refused", mem.id.to_string(), m.from_node().to_string());
    return std::nullopt;
  }
  return mem;
}

void on_join(master_actor* self, const message& m) {
  auto& st = self->state;
  auto joining = read_join(m);
  if (!joining) return;
  const auto& mem = *joining;
  auto r = st.members.view.join(mem);
  if (!r && !(r.err() == cluster::cluster_errc::already_exists)) {
    spdlog::warn("join of {} refused: {}", mem.id.to_string(), r.err().to_string());
    // Tell it: a node declared dead (a hung process that woke up) sees itself absent and exits,
    // so the runner replaces it with a new incarnation instead of it training unfenced.
    auto o = wire::membership(st.members.view, "join refused: " + r.err().to_string(), st.members.ring_epoch,
                              st.ctx->self().incarnation);
    (void)st.ctx->send(m.from_node().name, "node", std::move(o), "master");
    return;
  }
  if (auto s = st.members.suspects.find(mem.id.name); s != st.members.suspects.end()) {
    spdlog::info("{} is back after the master's pause", mem.id.to_string());
    st.members.suspects.erase(s);
  }
  if (!r) {
    // Already a member: it joined again (back after the master's pause, its join raced the
    // master's answer, or it missed a view and cannot take a delta). The whole view goes to it
    // alone; the view did not change, so the others need nothing.
    // (Past a broadcast still queued, the epoch it holds is not the next delta's base: it gets
    // the whole view then.)
    (void)send_view(self, mem.id,
                    wire::membership(st.members.view, mem.id.to_string() + " joined again",
                                     st.members.ring_epoch, st.ctx->self().incarnation));
    return;
  }
  st.obs->joined(mem, st.members.view);
  publish(self, mem.id.to_string() + " joined as " + std::string(cluster::to_string(mem.role)));
}

// NodeExited: from the runner (the dead node's parent) a fact; from the node itself, its leave
// (SIGTERM: node_runtime::leave); from a worker (its ring neighbour saw the node's liveness beacon
// released) a claim the master checks against liveness first.
void on_node_exited(master_actor* self, const message& m, schema::NodeExited::Reader n) {
  auto& st = self->state;
  auto id = wire::read_node(n.getNode());
  const bool from_runner = m.from_node().name == "runner";
  // The runner's report, or the node's own word that it leaves, is the cause of a departure seen
  // first as a closed connection (under load a leaving node's close can be handled before its
  // notice; without this the timeline called that a death).
  if (from_runner || m.from_node() == id) st.obs->exit_reported(id, n.getStatus().cStr());
  const auto* member = st.members.view.find(id.name);
  if (!member || member->id != id) {  // gone already (the first report removed it), or never joined
    // A worker that died while it warmed up held leases without being a member: the runner's word
    // is a fact, so they go back now, not when they expire.
    if (from_runner && id.name.rfind("worker-", 0) == 0 && !member) requeue(self, id);
    return;
  }
  if (m.from_node() == id) {
    node_left(self, id, n.getStatus().cStr());
    return;
  }
  if (!from_runner && !st.ctx->gone(id)) {
    spdlog::info("{} reports {} gone; its liveness says otherwise", m.from_node().to_string(),
                 id.to_string());
    return;
  }
  member_gone(self, id, n.getStatus().cStr());
}

// A report a worker could have sent: from a worker's name (a member, or one the view lost since:
// its last report is still its work), with counts one report can hold. A peer holding the token
// sent samples 2^64 - 1 from a node named "evil", and the job's result said "dropped_steps":
// 18446744073709551615 beside "ok": true.
bool plausible_progress(const message& m, schema::WorkerProgress::Reader p) {
  constexpr std::uint64_t most = std::uint64_t{1} << 40;
  const bool ok = m.from_node().name.rfind("worker-", 0) == 0 && p.getSamples() < most &&
                  p.getSteps() < most && p.getDroppedSteps() < most && std::isfinite(p.getLossSum()) &&
                  std::abs(p.getLossSum()) < 1e15;
  if (!ok) spdlog::debug("ignored a progress report from {}: no worker's", m.from_node().to_string());
  return ok;
}

// A worker's progress report into the job's counters and the observer; ring rank 0's goodput
// estimate (the ring's) replaces the last one.
void on_worker_progress(master_state& st, const message& m, schema::WorkerProgress::Reader p) {
  if (!plausible_progress(m, p)) return;
  st.progress.add(p.getSamples(), p.getSteps(), p.getLossSum(), p.getDroppedSteps(), p.getFirstStepWallMs());
  st.outcome.steps_by[m.from_node().to_string()] += p.getSteps();
  st.obs->progress(m.from_node(), p.getSamples(), p.getSteps());
  if (sending_member(st, m)) st.rows.note(m.from_node().to_string(), p);
  if (!p.hasGoodput()) return;
  auto g = wire::read_goodput(p.getGoodput());
  if (g.ring_rank != 0) return;
  st.goodput = std::move(g);
  st.obs->goodput(st.goodput);
}

void on_job_message(master_actor* self, const message& m) {
  auto j = m.body().getJob();
  auto& st = self->state;
  switch (j.which()) {
    case schema::JobMessage::WORKER_PROGRESS:
      on_worker_progress(st, m, j.getWorkerProgress());
      break;
    case schema::JobMessage::WORKER_DONE:
      st.outcome.done_workers.insert(m.from_node().name);
      spdlog::info("{} finished its training loop after {} steps", m.from_node().to_string(),
                   j.getWorkerDone().getSteps());
      break;
    case schema::JobMessage::EVAL_RESULT:
      on_eval_result(self, j.getEvalResult(), m.from_node(), m.correlation_id());
      break;
    case schema::JobMessage::STATUS_REQUEST:
      send_status(self, m);
      break;
    case schema::JobMessage::NODE_EXITED:
      on_node_exited(self, m, j.getNodeExited());
      break;
    case schema::JobMessage::DISK_FAULT:
      on_disk_fault(self, m);
      break;
    case schema::JobMessage::RING_RESTORED:
      on_ring_restored(self, m);
      break;
    case schema::JobMessage::FINAL_CHECKPOINT_REPLY:
      on_final_checkpoint(self, m);
      break;
    case schema::JobMessage::GPU_COMM_POST:
    case schema::JobMessage::GPU_COMM_FETCH:
      on_gpu_comm(st, m);
      break;
    default:
      break;
  }
}

// The master's state at its start: its counters and epochs continued from a previous master's
// (process or actor), its observer and pause watch, a view with itself as the only member.
void init_master(master_state& st, node_context* ctx, supervision::name_registry* names) {
  st.ctx = ctx;
  st.names = names;
  st.members.epoch_file = ctx->who().job_dir + "/master_epoch";
  st.started = ctx->clock().now();
  st.progress = job_progress(st.started);
  restore_counters(st, ctx->who().job_dir);
  st.obs = std::make_shared<master_observer>(ctx->spec(), ctx->who().job_dir, ctx->who().job_id,
                                             ctx->address(), ctx->clock());
  st.obs->set_own_restarts(ctx->who().id.incarnation);
  st.obs->set_relaunched(st.durable.master_starts > 1);
  // Peers drop a node silent for heartbeat_timeout, counted from its last heartbeat: half of it is
  // the pause of this process that may cost it its connections.
  st.members.pause = std::make_shared<pause_watch>(ctx->spec().transport.heartbeat_timeout / 2);
  const auto& job = ctx->spec().job;
  // A restarted master (process or actor) continues the epoch sequence where it stopped.
  auto v = cluster::membership_view::restore(load_epoch(st.members.epoch_file) + 1,
                                             {job.min_workers, job.max_workers}, {});
  if (!v) throw std::runtime_error(v.err().to_string());
  st.members.view = std::move(*v);
  cluster::member me;
  me.id = ctx->self();
  me.role = cluster::node_role::master;
  me.address = ctx->address();
  me.state = cluster::member_state::alive;
  me.pid = static_cast<int>(::getpid());
  (void)st.members.view.join(me);
}

caf::behavior master(master_actor* self, node_context* ctx, supervision::name_registry* names,
                     std::uint32_t restarts) {
  init_master(self->state, ctx, names);
  spdlog::info("master {} up at {} (actor restarts: {})", ctx->self().to_string(), ctx->address(), restarts);
  self->send(self, tick_atom::value);
  return {
      [=](const message& m) {
        using B = schema::Envelope::Body;
        wire::guarded("master", [&] {
          if (m.kind() == B::JOIN)
            on_join(self, m);
          else if (m.kind() == B::JOB)
            on_job_message(self, m);
        });
      },
      [=](peer_down_atom, const std::string& name, std::uint64_t incarnation, const std::string& reason) {
        peer_down(self, node_id{name, incarnation}, reason);
      },
      [=](publish_atom) { broadcast(self); },
      [=](tick_atom) {
        expire_suspects(self);
        on_tick(self);
        self->delayed_send(self, std::chrono::milliseconds(100), tick_atom::value);
      },
  };
}

}  // namespace

caf::actor spawn_master(caf::actor_system& sys, node_context& node, supervision::name_registry& names,
                        std::uint32_t restarts) {
  return sys.spawn(master, &node, &names, restarts);
}

}  // namespace troupe::actors
