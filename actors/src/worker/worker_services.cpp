#include "worker_services.hpp"

#include <algorithm>
#include <cmath>

#include "troupe/cluster/membership.hpp"
#include "troupe/wire/messages.hpp"
#include "troupe/wire/ps_layout.hpp"

namespace troupe::actors {

// ---- remote_ps ----

expected<std::string> remote_ps::shard_node(std::uint32_t i) {
  std::string name = cluster::node_name(cluster::node_role::ps, i);
  // A worker that leaves (SIGTERM: the job stops, a scale-down) takes no new step: its shards stop
  // too, and dialling one that is going away waits out the handshake timeout, longer than the
  // supervisor gives the worker to stop.
  if (rt_.stops_waiting())
    return make_unexpected(core_errc::io_error, "the worker is leaving: no more steps");
  auto view = rt_.view();
  const auto* m = view.find(name);
  if (!m || m->state != cluster::member_state::alive)
    return make_unexpected(core_errc::io_error, name + " is not in the membership (restarting?)");
  if (auto c = rt_.connect(name, m->address); !c) return c.err();
  return name;
}

namespace {
void set_floats(capnp::List<float>::Builder out, const float* v, std::size_t n) {
  for (std::size_t k = 0; k < n; ++k) out.set(static_cast<unsigned>(k), v[k]);
}

// The dense tensors of `layout` by the shard that holds them.
std::vector<std::vector<const param_slice*>> by_shard(const std::vector<param_slice>& layout,
                                                      std::uint32_t shards) {
  std::vector<std::vector<const param_slice*>> out(shards);
  for (const auto& p : layout) out[wire::shard_of_name(p.name, shards)].push_back(&p);
  return out;
}
}  // namespace

remote_ps::remote_ps(worker_host& rt, wire::rpc_channel& rpc)
    : rt_(rt), window_(rpc, rt.spec().ps.in_flight_pushes, [&rt] { return rt.stops_waiting(); }) {
  window_.on_push_reply([this](const message& m) { read_noise(m); });
}

// A push reply's noise estimate (ps/push_noise.hpp): the shard's latest; a reply without one (a
// restarted shard has none yet), or with a value that is not finite, takes the shard's out of the
// sum until it has one again.
void remote_ps::read_noise(const message& m) {
  auto rep = m.body().getPsPushReply();
  const auto& node = m.from_node().name;
  auto n = rep.getNoise();
  if (!rep.hasNoise() || !std::isfinite(n.getGradSqr()) || !std::isfinite(n.getGradVar())) {
    noise_.erase(node);
    return;
  }
  noise_[node] = {n.getGradSqr(), n.getGradVar(), n.getRounds(), 1, n.getPreconditioned()};
}

std::optional<pushed_noise> remote_ps::noise_from_pushes() const {
  return sum_pushed_noise(noise_, dense_shards_);
}

std::optional<pushed_noise> sum_pushed_noise(const std::map<std::string, pushed_noise>& latest,
                                             const std::vector<std::string>& shards) {
  if (shards.empty()) return std::nullopt;
  pushed_noise sum;
  sum.rounds = UINT64_MAX;
  for (const auto& node : shards) {
    auto it = latest.find(node);
    if (it == latest.end()) return std::nullopt;
    if (sum.shards > 0 && it->second.preconditioned != sum.preconditioned) return std::nullopt;
    sum.preconditioned = it->second.preconditioned;
    sum.grad_sqr += it->second.grad_sqr;
    sum.grad_var += it->second.grad_var;
    sum.rounds = std::min(sum.rounds, it->second.rounds);
    ++sum.shards;
  }
  return sum;
}

void remote_ps::unique_ids(const nn::batch& b, std::vector<std::uint64_t>& out) {
  out.clear();
  const std::size_t fields = b.data().info.sparse_fields;
  slot_.reset(b.size() * fields);
  bool added = false;
  for (std::size_t i = 0; i < b.size(); ++i)
    for (std::size_t f = 0; f < fields; ++f) {
      auto id = b.sparse_row(i)[f];
      slot_.find_or_add(id, 0, added);
      if (added) out.push_back(id);
    }
}

expected<ps_window::group> remote_ps::send_pulls(trainer_backend& m, const std::vector<std::uint64_t>& ids) {
  const std::uint32_t shards = rt_.spec().ps.shards;
  ids_by_shard_.assign(shards, {});
  for (auto id : ids) ids_by_shard_[wire::shard_of_id(id, shards)].push_back(id);
  auto tables = m.embedding_tables();
  auto dense_by_shard = by_shard(m.layout(), shards);
  std::vector<wire::rpc_channel::request> reqs;
  for (std::uint32_t s = 0; s < shards; ++s) {
    if (dense_by_shard[s].empty() && (ids_by_shard_[s].empty() || tables.empty())) continue;
    auto node = shard_node(s);
    if (!node) return node.err();
    wire::rpc_channel::request r{*node, "ps", outbound()};
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
  return window_.send(reqs, rt_.spec().job.rpc_timeout);
}

void remote_ps::drop_prefetch() {
  if (ahead_) window_.abandon(ahead_->requests);
  ahead_.reset();
}

void remote_ps::prefetch(trainer_backend& m, const nn::batch& next) {
  drop_prefetch();
  if (!rt_.spec().ps.prefetch) return;
  sent_pull p;
  unique_ids(next, p.ids);
  auto g = send_pulls(m, p.ids);
  if (!g) return;  // a shard out of reach: the batch's own pull will say so
  p.requests = std::move(*g);
  ahead_ = std::move(p);
}

// The rows of the batch: the prefetched pull's replies when it was this batch's, else a pull sent
// now. A push that failed since fails the pull too (the batch is retried).
expected<void> remote_ps::pull(trainer_backend& m, const nn::batch& b) {
  if (auto c = window_.collect(); !c) {
    drop_prefetch();
    return c;
  }
  unique_ids(b, unique_);
  std::optional<sent_pull> ahead = std::exchange(ahead_, std::nullopt);
  if (ahead && ahead->ids != unique_) {
    window_.abandon(ahead->requests);
    ahead.reset();
  }
  ps_window::group g;
  ++pulls_;
  if (ahead) {
    ++prefetched_;
    g = std::move(ahead->requests);
  } else {
    auto sent = send_pulls(m, unique_);
    if (!sent) return sent.err();
    g = std::move(*sent);
  }
  auto replies = window_.await(g);
  if (!replies) return replies.err();
  return read_pull_replies(m, *replies);
}

// Copies the shards' answers into the model, checking every tensor and row block against it.
expected<void> remote_ps::read_pull_replies(trainer_backend& m, const std::vector<message>& replies) {
  std::map<std::string, const param_slice*> by_name;
  for (const auto& p : m.layout()) by_name[p.name] = &p;
  std::map<std::string, nn::embedding_table*> table_by_name;
  for (auto* t : m.embedding_tables()) table_by_name[t->name()] = t;
  for (const auto& rep : replies) {
    auto r = rep.body().getPsPullReply();
    if (r.getError().size() > 0)
      return make_unexpected(core_errc::io_error, rep.from_node().name + ": " + r.getError().cStr());
    for (auto d : r.getDense()) {
      auto it = by_name.find(d.getName().cStr());
      if (it == by_name.end() || it->second->size != d.getValues().size())
        return make_unexpected(core_errc::io_error, rep.from_node().name + ": dense tensor '" +
                                                        d.getName().cStr() + "' does not match the model");
      wire::copy_to(d.getValues(), m.parameters().data() + it->second->offset);
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

namespace {
// Per table, positions into its (unique, combined) sparse gradient; per shard, those it holds.
using table_rows = std::vector<std::vector<std::size_t>>;

std::vector<table_rows> rows_by_shard(const std::vector<nn::embedding_table*>& tables, std::uint32_t shards) {
  std::vector<table_rows> out(shards, table_rows(tables.size()));
  for (std::size_t t = 0; t < tables.size(); ++t) {
    const auto& g = tables[t]->grad();
    for (std::size_t i = 0; i < g.size(); ++i) out[wire::shard_of_id(g.ids[i], shards)][t].push_back(i);
  }
  return out;
}

bool any_rows(const table_rows& rows) {
  return std::any_of(rows.begin(), rows.end(), [](const auto& v) { return !v.empty(); });
}

// One shard's push: its dense tensors' gradients out of `grads`, and its rows of each table.
void write_push(schema::PsPush::Builder push, const std::vector<const param_slice*>& dense,
                const float* grads, const std::vector<nn::embedding_table*>& tables, const table_rows& rows) {
  auto dl = push.initDense(static_cast<unsigned>(dense.size()));
  for (unsigned i = 0; i < dense.size(); ++i) {
    dl[i].setName(dense[i]->name);
    set_floats(dl[i].initValues(static_cast<unsigned>(dense[i]->size)), grads + dense[i]->offset,
               dense[i]->size);
  }
  auto sl = push.initSparse(any_rows(rows) ? static_cast<unsigned>(tables.size()) : 0);
  for (unsigned t = 0; t < sl.size(); ++t) {
    const auto& g = tables[t]->grad();
    const auto& pos = rows[t];
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
}
}  // namespace

// Sends the gradients without waiting for their acknowledgement (ps_window: at most
// in_flight_pushes unacknowledged). A push that failed before fails this one: nothing is sent.
expected<void> remote_ps::push(trainer_backend& m, std::size_t batch_rows) {
  if (auto c = window_.collect(); !c) return c;
  const std::uint32_t shards = rt_.spec().ps.shards;
  auto dense = by_shard(m.layout(), shards);
  auto tables = m.embedding_tables();
  auto rows = rows_by_shard(tables, shards);
  std::vector<wire::rpc_channel::request> reqs;
  for (std::uint32_t s = 0; s < shards; ++s) {
    if (dense[s].empty() && !any_rows(rows[s])) continue;
    auto node = shard_node(s);
    if (!node) return node.err();
    wire::rpc_channel::request r{*node, "ps", outbound()};
    auto p = r.out.body().initPsPush();
    write_push(p, dense[s], m.gradients().data(), tables, rows[s]);
    p.setRows(static_cast<std::uint32_t>(batch_rows));
    reqs.push_back(std::move(r));
    if (!dense[s].empty() &&
        std::find(dense_shards_.begin(), dense_shards_.end(), *node) == dense_shards_.end())
      dense_shards_.push_back(*node);
  }
  auto g = window_.send(reqs, rt_.spec().job.rpc_timeout);
  if (!g) return g.err();
  return window_.add_push(std::move(*g));
}

expected<void> remote_ps::settle() {
  return window_.settle();
}

// ---- node_ring_context ----

namespace {
// "10.78.0.11:7001" -> "10.78.0.11": namespaced hosts on one machine have addresses (and
// /dev/shm) of their own; on one machine every node is 127.0.0.1 and shares one /dev/shm.
std::string host_of(const std::string& address) {
  return address.substr(0, address.rfind(':'));
}
}  // namespace

collective::ring_members node_ring_context::members() const {
  auto [view, epoch] = rt_.view_and_ring_epoch();
  collective::ring_members out;
  out.epoch = epoch;
  if (epoch == leaving_ring_epoch) return out;  // leaving: in no ring any more
  auto ring = view.worker_ring();
  out.ranks.reserve(ring.size());
  for (const auto& id : ring.ranks) {
    collective::ring_member r;
    r.id = id;
    if (const auto* m = view.find(id.name)) {
      r.pid = m->pid;
      r.host = host_of(m->address);
      r.ring_address = m->ring_address;
    }
    out.ranks.push_back(std::move(r));
  }
  return out;
}

expected<void> node_ring_context::listen() {
  auto l = rt_.ring_listener();
  if (!l) return l.err();
  listener_ = *l;
  return {};
}

void node_ring_context::report_gone(const node_id& node, const std::string& why) {
  (void)rt_.send("master", "master", wire::node_exited(node, why), "worker");
}

std::unique_ptr<collective::mixed_ring_session> make_ring_session(node_ring_context& ctx,
                                                                  const job::job_spec& spec) {
  collective::mixed_session_options o;
  o.capacity = spec.job.ring_capacity;
  o.lanes = static_cast<int>(spec.job.ring_lanes);
  o.timeout = spec.job.rpc_timeout;
  o.heartbeat_timeout = spec.transport.heartbeat_timeout;
  return std::make_unique<collective::mixed_ring_session>(ctx, o);
}

}  // namespace troupe::actors
