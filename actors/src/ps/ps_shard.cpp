// A parameter-server shard: owns the dense tensors and embedding rows that hash to it, applies
// pushed gradients with the job's optimizer (nn's code, the same a local trainer runs), serves
// pulls (rows created lazily and deterministically from the id), checkpoints on a timer
// (incremental, every Nth full; a snapshot copied between requests a slice at a time, written on a
// thread of its own) and restores the latest checkpoint when it starts again.
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>

#include <spdlog/spdlog.h>
#include <caf/all.hpp>

#include "caf_types.hpp"
#include "ps_state.hpp"
#include "push_checks.hpp"
#include "roles.hpp"
#include "troupe/job/data_model.hpp"
#include "troupe/wire/messages.hpp"
#include "troupe/wire/ps_layout.hpp"
#include "troupe/wire/raw.hpp"
#include "troupe/wire/rpc.hpp"

namespace troupe::actors {

namespace {

// Why `ids` may not be read or written here (nullopt: they may): an id past the data's id space.
std::optional<std::string> outside_id_space(const ps_state& st, std::span<const std::uint64_t> ids) {
  if (st.id_limit == 0 || largest_id(ids) < st.id_limit) return std::nullopt;
  for (auto id : ids)
    if (id >= st.id_limit)
      return "id " + std::to_string(id) + " is outside the data's id space [0, " +
             std::to_string(st.id_limit) + ")";
  return std::nullopt;
}

// The dense tensors a pull asks for, into its reply (none past the first this shard lacks).
void reply_dense(const ps_state& st, schema::PsPull::Reader req, schema::PsPullReply::Builder rep) {
  std::vector<const owned_dense*> dense;
  for (auto n : req.getDense()) {
    auto it = st.dense.find(n.cStr());
    if (it == st.dense.end()) {
      rep.setError(std::string("no dense tensor '") + n.cStr() + "' on this shard");
      break;
    }
    dense.push_back(&it->second);
  }
  auto dl = rep.initDense(static_cast<unsigned>(dense.size()));
  for (unsigned i = 0; i < dense.size(); ++i) {
    const auto& t = dense[i]->param->value;
    dl[i].setName(dense[i]->param->name);
    auto vals = dl[i].initValues(static_cast<unsigned>(t.size()));
    for (std::size_t k = 0; k < t.size(); ++k) vals.set(static_cast<unsigned>(k), t[k]);
  }
}

void reply_pull(ps_state& st, const message& m) {
  auto req = m.body().getPsPull();
  outbound o = reply_to(m);
  auto rep = o.body().initPsPullReply();
  reply_dense(st, req, rep);
  auto refs = req.getSparse();
  auto sl = rep.initSparse(refs.size());
  for (unsigned i = 0; i < refs.size(); ++i) {
    auto it = st.tables.find(refs[i].getTable().cStr());
    if (it == st.tables.end()) {
      rep.setError(std::string("no embedding table '") + refs[i].getTable().cStr() + "'");
      continue;
    }
    auto* table = it->second.table;
    auto ids = wire::raw<std::uint64_t>(refs[i].getIds());  // in the request: no copy
    if (auto bad = outside_id_space(st, ids)) {
      rep.setError("embedding table '" + table->name() + "': " + *bad);
      continue;
    }
    sl[i].setTable(table->name());
    sl[i].setDim(static_cast<std::uint32_t>(table->dim()));
    sl[i].setIds(refs[i].getIds());
    // The rows go straight from the table into the reply.
    table->read_rows(
        ids, wire::raw<float>(sl[i].initValues(static_cast<unsigned>(ids.size() * table->dim()))).data());
  }
  (void)st.node->reply(m, std::move(o), "ps");
}

// The shard's noise estimate in a push's reply (push_noise.hpp), once it has one.
void reply_noise(const ps_state& st, schema::PsPushReply::Builder rep) {
  if (!st.noise) return;
  const auto r = st.noise->report();
  if (r.rounds == 0) return;
  auto n = rep.initNoise();
  n.setGradSqr(r.grad_sqr);
  n.setGradVar(r.grad_var);
  n.setRounds(r.rounds);
  n.setPreconditioned(r.preconditioned);
}

// A gradient holding NaN or an infinity would make every value it touches one: refused, whoever sent
// it (a worker whose model diverged ends itself; a peer's push must not poison the shard).
constexpr const char* not_finite = "a value is not finite (NaN or infinite): not applied";
// Why a pushed sparse gradient cannot be applied (nullopt: it can).
std::optional<std::string> sparse_problem(const ps_state& st, schema::SparseRows::Reader s,
                                          std::map<std::string, owned_table>::iterator it,
                                          std::span<const std::uint64_t> ids) {
  const std::string name = s.getTable().cStr();
  if (it == st.tables.end() || s.getDim() != it->second.table->dim() ||
      s.getValues().size() != static_cast<std::size_t>(s.getIds().size()) * s.getDim())
    return "sparse gradient of '" + name + "' unknown here or misshapen";
  if (auto bad = outside_id_space(st, ids)) return "sparse gradient of '" + name + "': " + *bad;
  if (!all_finite(wire::raw<float>(s.getValues()))) return "sparse gradient of '" + name + "': " + not_finite;
  return std::nullopt;
}

// Why a pushed dense gradient cannot be applied (nullopt: it can, its values in `buf`).
std::optional<std::string> dense_problem(const ps_state& st, schema::DenseTensor::Reader d,
                                         std::map<std::string, owned_dense>::iterator it,
                                         std::vector<float>& buf) {
  const std::string name = d.getName().cStr();
  if (it == st.dense.end() || d.getValues().size() != it->second.param->value.size())
    return "dense gradient '" + name + "' unknown here or of the wrong size";
  wire::to_vector(d.getValues(), buf);
  if (!all_finite(buf)) return "dense gradient '" + name + "': " + not_finite;
  return std::nullopt;
}

void apply_push(ps_state& st, const message& m) {
  auto req = m.body().getPsPush();
  std::string problem;
  std::vector<float> buf;
  const bool noise = st.noise && st.noise->begin(req.getRows());
  for (auto d : req.getDense()) {
    auto it = st.dense.find(d.getName().cStr());
    if (auto bad = dense_problem(st, d, it, buf)) {
      problem = std::move(*bad);
      continue;
    }
    if (noise) st.noise->tensor(it->first, buf, it->second.slots);
    auto& p = *it->second.param;
    nn::apply_dense(*st.opt, p.value, nn::tensor::view(buf.data(), p.value.dims()), it->second.slots);
  }
  for (auto s : req.getSparse()) {
    auto it = st.tables.find(s.getTable().cStr());
    // Applied from the request's own lists: nothing is copied or allocated per row.
    auto ids = wire::raw<std::uint64_t>(s.getIds());
    if (auto bad = sparse_problem(st, s, it, ids)) {
      problem = std::move(*bad);
      continue;
    }
    if (st.snapshot) st.snapshot->before_update(it->second, ids);  // rows as they were at its start
    nn::apply_sparse(*st.opt, *it->second.table, ids, wire::raw<float>(s.getValues()).data(),
                     it->second.slots, &it->second.dirty);
  }
  if (noise) st.noise->end();
  st.version += 1;
  outbound o = reply_to(m);
  auto rep = o.body().initPsPushReply();
  rep.setError(problem);
  reply_noise(st, rep);
  (void)st.node->reply(m, std::move(o), "ps");
}

// The master's FinalCheckpoint (every task is over): the rows live only in this shard's memory until
// a checkpoint holds them, and the job ends only once every shard's does. From the master only.
void reply_final_checkpoint(ps_state& st, const message& m) {
  if (m.from_node().name != "master") {
    spdlog::warn("ps-{}: ignored a final-checkpoint request from {}: only the master asks", st.index,
                 m.from_node().to_string());
    return;
  }
  const auto r = final_checkpoint(st);
  if (r.error.empty())
    spdlog::info("ps-{}: final checkpoint: version {} holds all {} pushes applied", st.index, r.version,
                 st.version);
  auto o = wire::job_reply(m);
  auto rep = o.body.initFinalCheckpointReply();
  rep.setVersion(r.version);
  rep.setError(r.error);
  rep.setDiskFault(r.disk_fault);
  (void)st.node->reply(m, std::move(o.out), "ps");
}

using ps_actor = caf::stateful_actor<ps_state>;

caf::behavior ps_shard(ps_actor* self, node_context* node, data_paths data) {
  init_shard(self->state, node, data);  // throws on a broken store or checkpoint: the supervisor restarts us
  self->delayed_send(self, node->spec().ps.checkpoint_every, tick_atom::value);
  // Asked to stop (the node's SIGTERM: a preemption, scancel, the job's end): the updates since the
  // last periodic checkpoint are written first, so the next incarnation resumes from them.
  self->set_exit_handler([=](caf::exit_msg& e) {
    checkpoint_now(self->state);
    spdlog::info("ps-{}: stopping at version {} (checkpointed)", self->state.index, self->state.version);
    self->quit(e.reason);
  });
  return {
      [=](const message& m) {
        using B = schema::Envelope::Body;
        wire::guarded("ps", [&] {
          if (m.kind() == B::PS_PULL)
            reply_pull(self->state, m);
          else if (m.kind() == B::PS_PUSH)
            apply_push(self->state, m);
          else if (m.kind() == B::JOB && m.body().getJob().isFinalCheckpoint())
            reply_final_checkpoint(self->state, m);
        });
      },
      [=](tick_atom) {
        if (begin_checkpoint(self->state)) self->send(self, ckpt_copy_atom::value);
        self->delayed_send(self, self->state.node->spec().ps.checkpoint_every, tick_atom::value);
      },
      // One slice of the snapshot, then the requests that came meanwhile (this message goes behind
      // them), then the next slice.
      [=](ckpt_copy_atom) {
        auto me = self->address();
        auto written = [me] {
          if (auto a = caf::actor_cast<caf::actor>(me)) caf::anon_send(a, ckpt_done_atom::value);
        };
        if (!copy_checkpoint_slice(self->state, checkpoint_slice, written))
          self->send(self, ckpt_copy_atom::value);
      },
      [=](ckpt_done_atom) { finish_checkpoint(self->state); },
  };
}

}  // namespace

caf::actor spawn_ps_shard(caf::actor_system& sys, node_context& node, data_paths data) {
  return sys.spawn<caf::detached>(ps_shard, &node, std::move(data));
}

}  // namespace troupe::actors
