// What every launcher shares: the default answer of check_host (launcher.hpp).
#include "troupe/cluster/launcher.hpp"

#include "troupe/cluster/errc.hpp"

namespace troupe::cluster {

expected<void> host_here_only(const std::string& host) {
  return make_unexpected(cluster_errc::invalid_spec,
                         "host '" + host +
                             "': this job runs every node on this machine (a host is chosen with "
                             "the slurm launcher or cluster.hosts)");
}

expected<void> launcher::check_host(const std::string& host) const {
  return host_here_only(host);
}

}  // namespace troupe::cluster
