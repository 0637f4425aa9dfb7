#include "cuda_backend.hpp"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <memory>
#include <optional>

#include "node_context.hpp"
#include "worker/gpu_comm_client.hpp"

namespace troupe::actors {

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
  // One reducer for the norms, made on the device current at its first use (the trainer's: its
  // compute_gradients selected it on this thread), so a worker that never estimates allocates none.
  auto r = std::make_shared<std::optional<gpu::norm_reducer>>();
  auto reducer = [r]() -> expected<gpu::norm_reducer*> {
    if (!*r) {
      auto made = gpu::norm_reducer::create();
      if (!made) return made.err();
      r->emplace(std::move(*made));
    }
    return &**r;
  };
  // Each of sqr_norm, keep, queue_norms and precondition: the reducer's method on it, or the error
  // of making it.
  auto on_reducer = [reducer]<typename R, typename... A>(R (gpu::norm_reducer::*method)(A...)) {
    return [reducer, method](A... a) -> R {
      auto red = reducer();
      if (!red) return red.err();
      return ((*red)->*method)(a...);
    };
  };
  o.sqr_norm = on_reducer(&gpu::norm_reducer::sqr);
  o.keep = on_reducer(&gpu::norm_reducer::keep);
  o.queue_norms = on_reducer(&gpu::norm_reducer::queue);
  o.precondition = on_reducer(&gpu::norm_reducer::precondition);
  // Read only after a queue_norms that succeeded, so the reducer exists.
  o.queued_norms = [r] { return *r ? (*r)->queued() : gpu::norm_reducer::pair{}; };
  return o;
}

expected<std::unique_ptr<cuda_backend>> cuda_backend::wrap(std::unique_ptr<nn::model> host,
                                                           const nn::train_config& config,
                                                           std::unique_ptr<gpu_replica> g) {
  auto t = nn::trainer::create(*host, config);
  if (!t) return t.err();
  return std::unique_ptr<cuda_backend>(new cuda_backend(std::move(host), std::move(*t), std::move(g)));
}

cuda_backend::cuda_backend(std::unique_ptr<nn::model> m, std::unique_ptr<nn::trainer> t,
                           std::unique_ptr<gpu_replica> g)
    : native_backend(std::move(m), std::move(t)), g_(std::move(g)) {
  // The device's dense buffer is the host model's trainable parameters, in order and size.
  g_->tensors.clear();
  for (const auto& s : layout()) g_->tensors.push_back(s.size);
}

void cuda_backend::apply_gradients(double lr_scale) {
  g_->trainer->apply_gradients(lr_scale);
  device_ahead_ = true;
}

expected<float> cuda_backend::step(const nn::batch& b) {
  auto loss = compute_gradients(b);
  if (loss) apply_gradients(1.0);
  return loss;
}

// Evaluation runs the host mirror: brought over once per change of the device's parameters.
expected<float> cuda_backend::predict(const nn::batch& b) {
  if (auto h = to_host(host_copy::parameters); !h) return h.err();
  return native_backend::predict(b);
}

expected<void> cuda_backend::to_host(host_copy what) {
  auto& dev = *g_->trainer;
  if (what == host_copy::parameters) {
    if (!device_ahead_) return {};
    if (auto d = dev.download(model()); !d) return d;
    device_ahead_ = false;
    return {};
  }
  auto host = gradients();
  if (auto d = g_->ops.to_host(host.data(), dev.grads(), host.size(), dev.stream()); !d) return d;
  return dev.sync();
}

expected<void> cuda_backend::from_host(host_copy what) {
  auto& dev = *g_->trainer;
  if (what == host_copy::parameters) {
    if (auto u = dev.upload(model()); !u) return u;
    device_ahead_ = false;
    return {};
  }
  auto host = gradients();
  return g_->ops.to_device(dev.grads(), host.data(), host.size(), dev.stream());
}

namespace {

// The rendezvous through the master, bounded by the job's rpc timeout and cut short by a newer
// ring epoch.
class master_rendezvous final : public gpu_rendezvous_port {
 public:
  master_rendezvous(node_context& rt, wire::rpc_channel& rpc) : rt_(rt), rpc_(rpc) {}
  expected<wire::gpu_comm_info> exchange(const wire::gpu_comm_post& mine, bool need_unique_id) override {
    gpu_exchange_options o;
    o.timeout = rt_.spec().job.rpc_timeout;
    o.clock = &rt_.clock();
    o.current_epoch = &rt_.ring_epoch();
    o.need_unique_id = need_unique_id;
    return gpu_comm_exchange(rpc_, mine, o);
  }

 private:
  node_context& rt_;
  wire::rpc_channel& rpc_;
};

std::string host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "unknown-host";
  return buf;
}

// Under async_ps the PS shards apply sparse gradients; the device keeps its embedding gradients
// to itself (device_trainer has no sparse download).
expected<void> check_supported(const job::job_spec& spec, nn::model& host) {
  if (spec.uses_ps() && !host.embedding_tables().empty())
    return make_unexpected(
        core_errc::invalid_argument,
        "[job] device = \"gpu\" with strategy async_ps: model '" + host.type() +
            "' has embedding tables, whose gradients the GPU backend cannot push "
            "to the PS shards yet, and only async_ps keeps embedding tables: use device = \"cpu\"");
  return {};
}

}  // namespace

expected<std::unique_ptr<trainer_backend>> make_cuda_backend(node_context& rt, wire::rpc_channel& rpc,
                                                             std::unique_ptr<nn::model> host) {
  const auto& spec = rt.spec();
  if (auto c = check_supported(spec, *host); !c) return c.err();
  auto count = gpu::device_count();
  if (!count) return std::move(count).err().wrap("[job] device = \"gpu\"");
  auto g = std::make_unique<gpu_replica>();
  g->ordinal = device_ordinal(rt.who().slot, *count);
  if (auto s = gpu::set_device(g->ordinal); !s) return s.err();
  auto info = gpu::describe(g->ordinal);
  if (!info) return info.err();
  g->device = std::move(*info);
  g->host = host_name();
  g->self = rt.self().name;
  auto tr = gpu::device_trainer::create(g->ordinal, *host, spec.nn.train);
  if (!tr) return std::move(tr).err().wrap("[job] device = \"gpu\": model '" + host->type() + "'");
  g->trainer = std::move(*tr);
  auto pinned = gpu::pinned_buffer<float>::alloc(g->trainer->dense_count());
  if (!pinned) return pinned.err();
  g->pinned = std::move(*pinned);
  g->staging = g->pinned.span();
  g->comms = gpu::comm_manager(gpu::nccl_options{spec.job.rpc_timeout, spec.job.rpc_timeout});
  g->port = std::make_unique<master_rendezvous>(rt, rpc);
  spdlog::info("{}: GPU {} ({}, {}, {} MiB) on {}, {} dense parameters", rt.self().to_string(), g->ordinal,
               g->device.name, g->device.uuid, g->device.total_memory >> 20, g->host,
               g->trainer->dense_count());
  auto b = cuda_backend::wrap(std::move(host), spec.nn.train, std::move(g));
  if (!b) return b.err();
  return std::unique_ptr<trainer_backend>(std::move(*b));
}

}  // namespace troupe::actors
