// The address of the master's /metrics, pinned before the job directory is written.
#include "runner.hpp"
#include "troupe/observe/http_server.hpp"

namespace troupe::control {

expected<std::string> pin_metrics_address(config_doc& doc, job::job_spec& spec) {
  auto& c = spec.cluster;
  if (c.metrics_port < 0) return std::string();
  if (c.metrics_port == 0) {
    // With no host, the master's: not known yet (a Slurm node's address comes with the control
    // plan); the port is picked here as for a local master.
    auto port = observe::pick_free_port(c.metrics_host.empty() ? "127.0.0.1" : c.metrics_host);
    if (!port) return std::move(port).err().wrap("[cluster] metrics_host");
    c.metrics_port = *port;
    if (auto r = doc.apply_override("cluster.metrics_port=" + std::to_string(*port)); !r) return r.err();
  }
  // A port the job file pins, on this machine: one another job's master serves already would be
  // that job's /metrics in this job's nodes.json (the master only warned in its log).
  if (c.launcher == "local")
    if (auto free = observe::pick_free_port(c.metrics_host.empty() ? "127.0.0.1" : c.metrics_host,
                                            static_cast<std::uint16_t>(c.metrics_port));
        !free)
      return make_unexpected(core_errc::invalid_argument,
                             "[cluster] metrics_port = " + std::to_string(c.metrics_port) + ": " +
                                 free.err().context() +
                                 " (another job's /metrics? give another port, or 0 for a free one)");
  // ":<port>" without a host, or with one meaning every interface (0.0.0.0, ::): the runner puts the
  // master's host in front, an address a reader of nodes.json can reach (0.0.0.0:<port> was recorded).
  const auto& h = c.metrics_host;
  const bool any = h == "0.0.0.0" || h == "::" || h == "[::]";
  return (any ? std::string() : h) + ":" + std::to_string(c.metrics_port);
}

}  // namespace troupe::control
