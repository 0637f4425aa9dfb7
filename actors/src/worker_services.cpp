#include "worker_services.hpp"

#include <unistd.h>

#include <algorithm>

#include <spdlog/spdlog.h>

#include "ps_layout.hpp"
#include "troupe/actors/collective/liveness.hpp"
#include "wire.hpp"
#include "troupe/cluster/membership.hpp"

namespace troupe::actors {

// ---- remote_ps ----

expected<std::string> remote_ps::shard_node(std::uint32_t i) {
  std::string name = cluster::node_name(cluster::node_role::ps, i);
  auto view = rt_.view();
  const auto* m = view.find(name);
  if (!m || m->state != cluster::member_state::alive)
    return make_unexpected(core_errc::io_error, name + " is not in the membership (restarting?)");
  if (auto c = rt_.ensure_connected(name, m->address); !c) return c.err();
  return name;
}

namespace {
void set_floats(capnp::List<float>::Builder out, const float* v, std::size_t n) {
  for (std::size_t k = 0; k < n; ++k) out.set(static_cast<unsigned>(k), v[k]);
}
}  // namespace

expected<void> remote_ps::pull(nn::model& m, const nn::batch& b) {
  const std::uint32_t shards = rt_.spec().ps.shards;
  // The batch's ids, de-duplicated, split by owning shard.
  unique_.clear();
  slot_.clear();
  const std::size_t fields = b.data().info.sparse_fields;
  for (std::size_t i = 0; i < b.size(); ++i)
    for (std::size_t f = 0; f < fields; ++f) {
      auto id = b.sparse_row(i)[f];
      if (slot_.emplace(id, 0).second) unique_.push_back(id);
    }
  ids_by_shard_.assign(shards, {});
  for (auto id : unique_) ids_by_shard_[shard_of_id(id, shards)].push_back(id);
  auto tables = m.embedding_tables();
  std::vector<std::vector<nn::dense_param*>> dense_by_shard(shards);
  for (auto* p : m.parameters())
    if (p->trainable) dense_by_shard[shard_of_name(p->name, shards)].push_back(p);

  std::vector<rpc_channel::request> reqs;
  for (std::uint32_t s = 0; s < shards; ++s) {
    if (dense_by_shard[s].empty() && (ids_by_shard_[s].empty() || tables.empty())) continue;
    auto node = shard_node(s);
    if (!node) return node.err();
    rpc_channel::request r{*node, "ps", outbound()};
    auto pull = r.out.body().initPsPull();
    auto names = pull.initDense(static_cast<unsigned>(dense_by_shard[s].size()));
    for (unsigned i = 0; i < dense_by_shard[s].size(); ++i) names.set(i, dense_by_shard[s][i]->name);
    auto refs = pull.initSparse(ids_by_shard_[s].empty() ? 0 : static_cast<unsigned>(tables.size()));
    for (unsigned t = 0; t < refs.size(); ++t) {
      refs[t].setTable(tables[t]->name());
      refs[t].setIds(kj::arrayPtr(ids_by_shard_[s].data(), ids_by_shard_[s].size()));
    }
    reqs.push_back(std::move(r));
  }
  auto replies = rpc_.call_all(reqs, rt_.spec().job.rpc_timeout);
  if (!replies) return replies.err();
  std::map<std::string, nn::dense_param*> by_name;
  for (auto* p : m.parameters()) by_name[p->name] = p;
  std::map<std::string, nn::embedding_table*> table_by_name;
  for (auto* t : tables) table_by_name[t->name()] = t;
  for (const auto& rep : *replies) {
    auto r = rep.body().getPsPullReply();
    if (r.getError().size() > 0)
      return make_unexpected(core_errc::io_error, rep.from_node().name + ": " + r.getError().cStr());
    for (auto d : r.getDense()) {
      auto it = by_name.find(d.getName().cStr());
      if (it == by_name.end() || it->second->value.size() != d.getValues().size())
        return make_unexpected(core_errc::io_error, rep.from_node().name + ": dense tensor '" +
                                                        d.getName().cStr() + "' does not match the model");
      wire::copy_to(d.getValues(), it->second->value.data());
    }
    for (auto s : r.getSparse()) {
      auto it = table_by_name.find(s.getTable().cStr());
      if (it == table_by_name.end() || s.getDim() != it->second->dim() ||
          s.getValues().size() != static_cast<std::size_t>(s.getIds().size()) * s.getDim())
        return make_unexpected(core_errc::io_error, rep.from_node().name + ": rows of '" +
                                                        s.getTable().cStr() + "' do not match the model");
      std::vector<std::uint64_t> ids;
      wire::to_vector(s.getIds(), ids);
      wire::to_vector(s.getValues(), rows_);
      it->second->write_rows(ids, rows_.data());
    }
  }
  return {};
}

expected<void> remote_ps::push(nn::model& m) {
  const std::uint32_t shards = rt_.spec().ps.shards;
  std::vector<std::vector<nn::dense_param*>> dense_by_shard(shards);
  for (auto* p : m.parameters())
    if (p->trainable) dense_by_shard[shard_of_name(p->name, shards)].push_back(p);
  auto tables = m.embedding_tables();
  // Per shard, per table: positions into the table's (unique, combined) sparse gradient.
  std::vector<std::vector<std::vector<std::size_t>>> rows_by_shard(shards, std::vector<std::vector<std::size_t>>(tables.size()));
  for (std::size_t t = 0; t < tables.size(); ++t) {
    const auto& g = tables[t]->grad();
    for (std::size_t i = 0; i < g.size(); ++i) rows_by_shard[shard_of_id(g.ids[i], shards)][t].push_back(i);
  }
  std::vector<rpc_channel::request> reqs;
  for (std::uint32_t s = 0; s < shards; ++s) {
    bool any_rows = false;
    for (auto& v : rows_by_shard[s]) any_rows |= !v.empty();
    if (dense_by_shard[s].empty() && !any_rows) continue;
    auto node = shard_node(s);
    if (!node) return node.err();
    rpc_channel::request r{*node, "ps", outbound()};
    auto push = r.out.body().initPsPush();
    auto dl = push.initDense(static_cast<unsigned>(dense_by_shard[s].size()));
    for (unsigned i = 0; i < dense_by_shard[s].size(); ++i) {
      auto* p = dense_by_shard[s][i];
      dl[i].setName(p->name);
      set_floats(dl[i].initValues(static_cast<unsigned>(p->grad.size())), p->grad.data(), p->grad.size());
    }
    auto sl = push.initSparse(any_rows ? static_cast<unsigned>(tables.size()) : 0);
    for (unsigned t = 0; t < sl.size(); ++t) {
      const auto& g = tables[t]->grad();
      const auto& pos = rows_by_shard[s][t];
      sl[t].setTable(tables[t]->name());
      sl[t].setDim(static_cast<std::uint32_t>(g.dim));
      auto ids = sl[t].initIds(static_cast<unsigned>(pos.size()));
      auto vals = sl[t].initValues(static_cast<unsigned>(pos.size() * g.dim));
      for (unsigned k = 0; k < pos.size(); ++k) {
        ids.set(k, g.ids[pos[k]]);
        const float* row = g.row(pos[k]);
        for (std::size_t d = 0; d < g.dim; ++d) vals.set(static_cast<unsigned>(k * g.dim + d), row[d]);
      }
    }
    reqs.push_back(std::move(r));
  }
  auto replies = rpc_.call_all(reqs, rt_.spec().job.rpc_timeout);
  if (!replies) return replies.err();
  for (const auto& rep : *replies) {
    auto r = rep.body().getPsPushReply();
    if (r.getError().size() > 0)
      return make_unexpected(core_errc::io_error, rep.from_node().name + ": " + r.getError().cStr());
  }
  return {};
}

// ---- shm_ring_session ----

void shm_ring_session::prepare(bool at_once) {
  // "e0-...": epoch 0 is never a ring's, and the runner removes it with the job's rings if this
  // process is killed before using it.
  auto name = collective::shm_ring_link::ring_name(rt_.who().job_id, 0, 0) + "-spare-" +
              std::to_string(::getpid());
  transport::shm_ring::remove(name);
  auto r = transport::shm_ring::create(name, rt_.spec().job.ring_capacity, at_once);
  if (!r) {
    if (!spare_failed_) spdlog::warn("ring: no spare ring ({}); rings are made when needed", r.err().to_string());
    spare_failed_ = true;
    return;
  }
  spare_ = std::move(*r);
}

// Alone: the spare inbound ring for the next worker to join is made a slice per step (allocating
// all 4 MiB at once would be one long step just when the survivor of a kill should not pause).
void shm_ring_session::prepare_some() {
  if (!spare_ && !spare_failed_) prepare(false);
  if (spare_) spare_->populate_some(256 << 10);
}

expected<ring_session::info> shm_ring_session::ensure() {
  auto [view, ring_epoch] = rt_.view_and_ring_epoch();
  if (link_ && pending_.epoch == ring_epoch && ring_epoch != 0) {
    // Linked to a joining partner that is still linking: alone until it is done.
    if (!link_->prev_linked()) return info_;
    info_ = pending_;
    pending_ = {};
    return info_;
  }
  pending_ = {};
  if (info_.epoch == ring_epoch && (link_ || (info_.size == 1 && awaiting_epoch_ != ring_epoch)) && ring_epoch != 0) {
    if (info_.size == 1) prepare_some();
    info_.fresh = false;
    return info_;
  }
  // Trained alone until now (the first worker, or the survivor of a ring of two).
  bool was_alone = (info_.size == 1 && info_.epoch != 0) || solo_epoch_ != 0;
  link_.reset();
  if (solo_epoch_ != 0 && solo_epoch_ == ring_epoch) {
    prepare_some();
    info_ = {0, 1, ring_epoch, false};
    return info_;
  }
  solo_epoch_ = 0;
  auto ring = view.worker_ring();
  auto rank = ring.rank_of(rt_.self().name);
  if (!rank)
    return make_unexpected(collective::collective_errc::setup,
                           rt_.self().to_string() + " is not in the ring of epoch " + std::to_string(ring_epoch));
  info_ = {static_cast<int>(*rank), static_cast<int>(ring.size()), ring_epoch, true};
  op_ = 0;
  if (ring.size() == 1) {
    prepare_some();
    return info_;
  }
  if (ring.size() == 2 && was_alone) {
    // A worker joins this one, which trained alone: it goes on alone, a step at a time, until the
    // newcomer has made its inbound ring (it is linking); then it links, at once, and sends it the
    // replicas' state. Its steps never wait for the newcomer's start-up.
    auto theirs = collective::shm_ring_link::ring_name(rt_.who().job_id, ring_epoch, (*rank + 1) % 2);
    if (::access(("/dev/shm/" + theirs).c_str(), F_OK) != 0) {
      if (awaiting_epoch_ != ring_epoch) spdlog::debug("ring epoch {}: training alone until /{} appears", ring_epoch, theirs);
      awaiting_epoch_ = ring_epoch;
      prepare_some();
      info_ = {0, 1, ring_epoch, false};
      return info_;
    }
  }
  awaiting_epoch_ = 0;
  auto pid_of = [&](std::size_t r) {
    const auto* m = view.find(ring.ranks[r].name);
    return m ? static_cast<pid_t>(m->pid) : 0;
  };
  collective::shm_link_options o;
  o.job = rt_.who().job_id;
  o.epoch = ring_epoch;
  o.rank = info_.rank;
  o.size = info_.size;
  o.prev_pid = pid_of(ring.prev(*rank));
  o.next_pid = pid_of(ring.next(*rank));
  neighbours_ = {ring.ranks[ring.prev(*rank)], ring.ranks[ring.next(*rank)]};
  o.prev_beacon = collective::liveness_beacon::name_for(o.job, ring.ranks[ring.prev(*rank)].to_string());
  o.next_beacon = collective::liveness_beacon::name_for(o.job, ring.ranks[ring.next(*rank)].to_string());
  o.capacity = rt_.spec().job.ring_capacity;
  o.timeout = rt_.spec().job.rpc_timeout;
  o.current_epoch = &rt_.ring_epoch();
  o.spare = &spare_;
  auto connect_start = std::chrono::steady_clock::now();
  auto link = collective::shm_ring_link::connect(o);
  if (!link) {
    after_failure(link.err());
    info_.epoch = 0;
    return link.err();
  }
  link_ = std::move(*link);
  spdlog::info("ring epoch {}: rank {} of {}, linked in {:.2f} ms", ring_epoch, info_.rank, info_.size,
               std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - connect_start).count());
  if (was_alone && !link_->prev_linked()) {
    // The newcomer has yet to open this worker's ring: one more step alone rather than wait for it.
    pending_ = info_;
    info_ = {0, 1, ring_epoch, false};
  }
  return info_;
}

expected<void> shm_ring_session::allreduce(std::span<float> data) {
  if (info_.size <= 1) return {};
  if (!link_) return make_unexpected(collective::collective_errc::setup, "no ring");
  auto r = collective::ring_allreduce(*link_, info_.rank, info_.size, data, info_.epoch, ++op_);
  if (!r) {
    link_.reset();
    after_failure(r.err());
    info_.epoch = 0;
  }
  return r;
}

void shm_ring_session::after_failure(const error& e) {
  if (!(e == collective::collective_errc::peer_dead)) return;
  report_gone_neighbours();
  if (info_.size != 2) return;
  auto epoch = rt_.ring_epoch().load(std::memory_order_acquire);
  if (epoch != info_.epoch) return;  // the master's next view is already here
  solo_epoch_ = epoch;
  spdlog::info("ring of epoch {}: the other worker is gone ({}); training alone until the next view", epoch,
               e.to_string());
}

bool shm_ring_session::alone() const {
  return solo_epoch_ != 0 && solo_epoch_ == rt_.ring_epoch().load(std::memory_order_acquire);
}

// The master hears of the death from the runner or the closed connection only once the dead
// process's teardown is over (milliseconds to tens of them); the beacon tells now. The master
// checks the beacon itself before it acts.
void shm_ring_session::report_gone_neighbours() {
  for (const auto& id : neighbours_) {
    if (!collective::liveness_beacon::released(collective::liveness_beacon::name_for(rt_.who().job_id, id.to_string())))
      continue;
    auto o = wire::job();
    auto n = o.body.initNodeExited();
    wire::write_node(n.initNode(), id);
    n.setStatus("liveness beacon released (seen by " + rt_.self().to_string() + ")");
    (void)rt_.net().send("master", "master", std::move(o.out), "worker");
  }
}

expected<void> shm_ring_session::broadcast(std::span<float> data, int root) {
  if (info_.size <= 1) return {};
  if (!link_) return make_unexpected(collective::collective_errc::setup, "no ring");
  auto r = collective::ring_broadcast(*link_, info_.rank, info_.size, data, root, info_.epoch, ++op_);
  if (!r) {
    link_.reset();
    after_failure(r.err());
    info_.epoch = 0;
  }
  return r;
}

}  // namespace troupe::actors
