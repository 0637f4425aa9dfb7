#include "troupe/cluster/config.hpp"

#include "troupe/cluster/errc.hpp"
#include "troupe/cluster/local/launcher.hpp"

namespace troupe::cluster {

cluster_config cluster_config::read(config_section s, cluster_config defaults) {
  cluster_config c = std::move(defaults);
  c.launcher = s.get_enum("launcher", c.launcher, {"local"});
  c.capacity_cpus = s.get_double("capacity_cpus", c.capacity_cpus, 0, 1e6);
  c.capacity_memory_mb = s.get_int("capacity_memory_mb", c.capacity_memory_mb, 0, std::int64_t{1} << 40);
  c.capacity_gpus = s.get_int("capacity_gpus", c.capacity_gpus, -1, 1 << 16);
  c.metrics_host = s.get_string("metrics_host", c.metrics_host);
  c.metrics_port = s.get_int("metrics_port", c.metrics_port, -1, 65535);
  return c;
}

cluster_config cluster_config::read(config_section s) {
  return read(s, cluster_config{});
}

expected<resources> configured_capacity(const cluster_config& cfg) {
  auto cap = local_capacity();
  if (!cap) return cap;
  if (cfg.capacity_cpus > 0) cap->cpus = cfg.capacity_cpus;
  if (cfg.capacity_memory_mb > 0)
    cap->memory_bytes = static_cast<std::uint64_t>(cfg.capacity_memory_mb) << 20;
  if (cfg.capacity_gpus >= 0) cap->gpus = static_cast<int>(cfg.capacity_gpus);
  return cap;
}

expected<std::unique_ptr<launcher>> make_launcher(const cluster_config& cfg, exit_callback on_exit) {
  if (cfg.launcher != "local")
    return make_unexpected(cluster_errc::invalid_spec,
                           "cluster.launcher '" + cfg.launcher + "': expected \"local\"");
  auto cap = configured_capacity(cfg);
  if (!cap) return cap.err();
  auto l = local::launcher::create({std::move(on_exit), *cap});
  if (!l) return l.err();
  return std::unique_ptr<launcher>(std::move(*l));
}

}  // namespace troupe::cluster
