// The worker actor: a detached actor whose mailbox interleaves training (self-sent ticks, each a
// bounded slice of the loop in worker_loop.cpp) with requests from the master (evaluate).
#include <spdlog/spdlog.h>

#include <caf/all.hpp>
#include <filesystem>

#include <caf/stateful_actor.hpp>
#include "../backends/cuda_backend.hpp"
#include "../caf_types.hpp"
#include "troupe/actors/backends.hpp"
#include "troupe/job/data.hpp"
#include "troupe/job/data_model.hpp"

#include "worker_state.hpp"

namespace troupe::actors {

namespace {

// Records from the master node's record server: its rpc client and fetcher, and the training
// store's manifest (asked for until the server answers, a job's start-up being under way).
storage::manifest serve_records(worker_state& st, node_runtime* rt) {
  rt->net().unregister_name("records-rpc");  // a restarted actor registers it anew
  auto rpc = wire::rpc_client::create(rt->net(), "records-rpc", rt->clock(), rt->leave_token());
  if (!rpc) throw std::runtime_error(rpc.err().to_string());
  st.records_rpc = std::move(*rpc);
  const auto& data = rt->spec().nn.data;
  record_fetcher::options o;
  o.cache_bytes = data.cache_mb << 20;
  o.spill_bytes = data.spill_mb << 20;
  o.spill_dir = data.spill_dir.empty()
                    ? (std::filesystem::temp_directory_path() / "troupe-record-cache").string()
                    : data.spill_dir;
  o.timeout = rt->spec().job.rpc_timeout;
  st.fetch = std::make_unique<record_fetcher>(*st.records_rpc, o, rt->clock());
  auto m = st.fetch->manifest(false, std::chrono::seconds(60));
  if (!m) throw std::runtime_error(m.err().to_string());
  return *m;
}

// The training store's manifest: from the local store (opened into st.train), or served ([data]
// serve = "always", or "auto" on a host without the store).
storage::manifest open_data(worker_state& st, node_runtime* rt) {
  const auto& serve = rt->spec().nn.data.serve;
  if (serve != "always") {
    auto train = storage::record_store::open(st.data.train_dir);
    if (train) {
      st.train.emplace(std::move(*train));
      return st.train->info();
    }
    if (serve == "never" || !(train.err() == storage::storage_errc::not_found))
      throw std::runtime_error(train.err().to_string());
    spdlog::info("{}: {}: reading records from the master's record server", rt->self().to_string(),
                 train.err().to_string());
  }
  return serve_records(st, rt);
}

// The replica the job names: the CUDA backend ([job] device = "gpu" with a native model) or a
// host one (backends.hpp: native or TorchScript).
std::unique_ptr<trainer_backend> make_backend(worker_state& st, node_runtime* rt,
                                              const storage::manifest& manifest) {
  const auto& spec = rt->spec();
  auto info = job::info_of(manifest, st.train ? st.train->dir() : manifest.source);
  expected<std::unique_ptr<trainer_backend>> b = make_unexpected(core_errc::invalid_argument, "no backend");
  if (spec.uses_gpu() && spec.nn.model.type != "torchscript") {
    auto m = nn::model_registry::instance().create(spec.nn.model, info);
    if (!m) throw std::runtime_error(m.err().to_string());
    b = make_cuda_backend(*rt, *st.rpc, std::move(*m));
  } else {
    b = make_host_backend(spec, info);
  }
  if (!b) throw std::runtime_error(b.err().to_string());
  return std::move(*b);
}

}  // namespace

void setup_worker(worker_state& st, node_runtime* rt, data_paths data) {
  st.rt = rt;
  st.node = rt;
  st.data = std::move(data);
  auto manifest = open_data(st, rt);
  // Replies to this incarnation's requests; a restarted actor registers the name anew.
  rt->net().unregister_name("rpc");
  auto rpc = wire::rpc_client::create(rt->net(), "rpc", rt->clock(), rt->leave_token());
  if (!rpc) throw std::runtime_error(rpc.err().to_string());
  st.rpc = std::move(*rpc);
  st.leases = std::make_unique<task_lease_client>(*rt, *st.rpc);
  st.backend = make_backend(st, rt, manifest);
  st.ps = std::make_unique<remote_ps>(*rt, *st.rpc);
  st.ring_context = std::make_unique<node_ring_context>(*rt);
  if (auto l = st.ring_context->listen(); !l)
    spdlog::warn("{}: no ring listener, no TCP ring links to this worker: {}", rt->self().to_string(),
                 l.err().to_string());
  st.ring = make_ring_session(*st.ring_context, rt->spec());
  st.ring->prepare();
  auto s = make_strategy(rt->spec().job.strategy, rt->spec());
  if (!s) throw std::runtime_error(s.err().to_string());
  st.strat = std::move(*s);
  st.ctx.reset(new worker_context{rt->spec(), rt->self(), *st.backend, *st.ps, *st.ring});
  st.last_report = rt->clock().now();
  open_step_log(st);
  spdlog::info("{}: {} model on the {} backend, strategy {}, {} training records{}", rt->self().to_string(),
               rt->spec().nn.model.type, st.backend->name(), st.strat->name(), manifest.record_count,
               st.fetch ? " (served)" : "");
}

using worker_actor = caf::stateful_actor<worker_state>;

// Sets the worker up (throws on failure), then interleaves training ticks with the master's
// requests (evaluate). Spawned detached: training blocks.
static caf::behavior run_worker(worker_actor* self, node_runtime* rt, data_paths data) {
  setup_worker(self->state, rt, std::move(data));
  self->send(self, tick_atom::value);
  return {
      [=](tick_atom) {
        auto& clk = self->state.node->clock();
        auto until = clk.now() + tick_budget;
        bool more = true;
        while (more && clk.now() < until) more = train_some(self->state, until);
        if (more) self->send(self, tick_atom::value);
      },
      [=](const message& m) {
        wire::guarded("worker", [&] {
          if (m.kind() == schema::Envelope::Body::JOB &&
              m.body().getJob().which() == schema::JobMessage::EVALUATE)
            evaluate(self->state, m);
        });
      },
  };
}

caf::actor spawn_worker(caf::actor_system& sys, node_runtime* rt, data_paths data) {
  return sys.spawn<caf::detached>(run_worker, rt, std::move(data));
}

}  // namespace troupe::actors
