// Hosts the local launcher's next nodes avoid for a while (node_spec::avoid): a node sent there
// could not reach its job (the runner's workers, serve's replicas). Kept by whoever launches; the
// launcher still sends a node to a cut-off host when no other host has a free slot.
#pragma once

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "troupe/core/clock.hpp"

namespace troupe::cluster {

class cut_off_hosts {
 public:
  static constexpr std::chrono::minutes period{2};

  // Cuts `host` off until `now` + period (again: the period starts anew). True when it was not cut
  // off at `now`: the caller says so once, not at every node that fails there.
  bool cut(const std::string& host, clock::time_point now) {
    auto& until = until_[host];
    const bool fresh = until <= now;
    until = now + period;
    return fresh;
  }

  // The hosts cut off at `now`, for node_spec::avoid.
  std::vector<std::string> at(clock::time_point now) const {
    std::vector<std::string> hosts;
    for (const auto& [host, until] : until_)
      if (until > now) hosts.push_back(host);
    return hosts;
  }

  static constexpr long period_seconds() {
    return std::chrono::duration_cast<std::chrono::seconds>(period).count();
  }

 private:
  std::map<std::string, clock::time_point> until_;
};

}  // namespace troupe::cluster
