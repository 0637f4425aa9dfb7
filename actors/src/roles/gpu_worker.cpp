// The GPU worker actor: worker.cpp's actor with a device replica (see gpu_worker.hpp).
#include "gpu_worker.hpp"

#include <spdlog/spdlog.h>
#include <unistd.h>
#include <caf/all.hpp>

#include "../gpu_comm_client.hpp"
#include "roles.hpp"
#include "worker_actor.hpp"

namespace troupe::actors {

void gpu_replica_deleter::operator()(gpu_replica* g) const noexcept {
  delete g;
}

grad_ops device_grad_ops() {
  grad_ops o;
  o.to_host = [](float* host, const float* dev, std::size_t n, gpu::cuda_stream s) {
    return gpu::detail::copy_to_host(host, dev, n * sizeof(float), s);
  };
  o.to_device = [](float* dev, const float* host, std::size_t n, gpu::cuda_stream s) {
    return gpu::detail::copy_to_device(dev, host, n * sizeof(float), s);
  };
  o.zero = [](float* dev, std::size_t n, gpu::cuda_stream s) {
    return gpu::detail::memset_device(dev, 0, n * sizeof(float), s);
  };
  return o;
}

namespace {

// The rendezvous through the master, bounded by the job's rpc timeout and cut short by a newer
// ring epoch.
class master_rendezvous final : public gpu_rendezvous_port {
 public:
  master_rendezvous(node_runtime& rt, wire::rpc_client& rpc) : rt_(rt), rpc_(rpc) {}
  expected<gpu_rendezvous::snapshot> exchange(const gpu_rendezvous::post& mine,
                                              bool need_unique_id) override {
    gpu_exchange_options o;
    o.timeout = rt_.spec().job.rpc_timeout;
    o.current_epoch = &rt_.ring_epoch();
    o.need_unique_id = need_unique_id;
    return gpu_comm_exchange(rpc_, mine, o);
  }

 private:
  node_runtime& rt_;
  wire::rpc_client& rpc_;
};

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
  g->ordinal = device_ordinal(st.rt->who().slot, *count);
  if (auto s = gpu::set_device(g->ordinal); !s) return s.err();
  auto info = gpu::describe(g->ordinal);
  if (!info) return info.err();
  g->device = std::move(*info);
  g->host = host_name();
  auto tr = gpu::device_trainer::create(g->ordinal, *st.model, spec.nn.train);
  if (!tr) return std::move(tr).err().wrap("[job] device = \"gpu\": model '" + st.model->type() + "'");
  g->trainer = std::move(*tr);
  auto pinned = gpu::pinned_buffer<float>::alloc(g->trainer->dense_count());
  if (!pinned) return pinned.err();
  g->pinned = std::move(*pinned);
  g->staging = g->pinned.span();
  g->comms = gpu::comm_manager(gpu::nccl_options{spec.job.rpc_timeout, spec.job.rpc_timeout});
  spdlog::info("{}: GPU {} ({}, {}, {} MiB) on {}, {} dense parameters", st.rt->self().to_string(),
               g->ordinal, g->device.name, g->device.uuid, g->device.total_memory >> 20, g->host,
               g->trainer->dense_count());
  st.gpu = std::move(g);
  return make_gpu_allreduce(*st.gpu, st.rt->self().name,
                            std::make_unique<master_rendezvous>(*st.rt, *st.rpc));
}

caf::actor spawn_gpu_worker(caf::actor_system& sys, node_runtime* rt, data_paths data) {
  return sys.spawn<caf::detached>(run_worker, rt, std::move(data), strategy_maker(make_gpu_worker_strategy));
}

}  // namespace troupe::actors
