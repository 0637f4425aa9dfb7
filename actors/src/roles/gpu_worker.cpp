// The GPU worker actor: worker.cpp's actor with a device replica (see gpu_worker.hpp).
#include "gpu_worker.hpp"

#include <caf/all.hpp>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include "roles.hpp"
#include "worker_actor.hpp"

namespace troupe::actors {

void gpu_replica_deleter::operator()(gpu_replica* g) const noexcept { delete g; }

namespace {
std::string host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "unknown-host";
  return buf;
}
}  // namespace

expected<std::unique_ptr<strategy>> make_gpu_worker_strategy(worker_state& st) {
  const auto& spec = st.rt->spec();
  auto count = gpu::device_count();
  if (!count) return std::move(count).err().wrap("[job] device = \"gpu\"");
  std::unique_ptr<gpu_replica, gpu_replica_deleter> g(new gpu_replica);
  g->ordinal = device_ordinal(st.rt->who().index, *count);
  if (auto s = gpu::set_device(g->ordinal); !s) return s.err();
  auto info = gpu::describe(g->ordinal);
  if (!info) return info.err();
  g->device = std::move(*info);
  g->host = host_name();
  auto tr = gpu::device_trainer::create(g->ordinal, *st.model, spec.nn.train);
  if (!tr) return std::move(tr).err().wrap("[job] device = \"gpu\": model '" + st.model->type() + "'");
  g->trainer = std::move(*tr);
  auto staging = gpu::pinned_buffer<float>::alloc(g->trainer->dense_count());
  if (!staging) return staging.err();
  g->staging = std::move(*staging);
  g->comms = gpu::comm_manager(gpu::nccl_options{spec.job.rpc_timeout, spec.job.rpc_timeout});
  spdlog::info("{}: GPU {} ({}, {}, {} MiB) on {}, {} dense parameters", st.rt->self().to_string(), g->ordinal,
               g->device.name, g->device.uuid, g->device.total_memory >> 20, g->host, g->trainer->dense_count());
  st.gpu = std::move(g);
  return make_gpu_allreduce(st);
}

caf::actor spawn_gpu_worker(caf::actor_system& sys, node_runtime* rt, data_paths data) {
  return sys.spawn<caf::detached>(run_worker, rt, std::move(data), strategy_maker(make_gpu_worker_strategy));
}

}  // namespace troupe::actors
