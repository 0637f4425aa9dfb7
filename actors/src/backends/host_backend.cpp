#include "native_backend.hpp"
#include "troupe/actors/backends.hpp"
#include "troupe/actors/torchscript.hpp"

namespace troupe::actors {

expected<std::unique_ptr<trainer_backend>> make_host_backend(const job::job_spec& spec,
                                                             const nn::dataset_info& info) {
  const auto& mc = spec.nn.model;
  if (mc.type == "torchscript") {
    torchscript_options o;
    o.path = mc.path;
    o.data = info;
    o.optimizer = spec.nn.train.optimizer;
    o.embedding_dim = mc.embedding_dim;
    o.embedding_scale = mc.embedding_scale;
    o.seed = mc.seed;
    o.threads = spec.nn.train.threads;
    o.device = spec.uses_gpu() ? "gpu" : "cpu";
    return load_torchscript(o);
  }
  auto m = nn::model_registry::instance().create(mc, info);
  if (!m) return m.err();
  auto b = native_backend::create(std::move(*m), spec.nn.train);
  if (!b) return b.err();
  return std::unique_ptr<trainer_backend>(std::move(*b));
}

expected<bool> check_model(const job::job_spec& spec, const nn::dataset_info& info) {
  auto b = make_host_backend(spec, info);
  if (!b) return b.err();
  return !(*b)->embedding_tables().empty();
}

}  // namespace troupe::actors
