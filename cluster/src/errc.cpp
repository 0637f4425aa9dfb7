#include "troupe/cluster/errc.hpp"

#include <string>

namespace troupe::cluster {

namespace {
class cluster_category_impl final : public error_category {
 public:
  const char* name() const noexcept override { return "cluster"; }
  // Their contexts are sentences: "job id '../x': 1-64 characters of ...", "job r1 is running: its
  // runner (pid 31024) holds ...".
  bool context_says_it(int c) const noexcept override {
    return c == static_cast<int>(cluster_errc::invalid_spec) ||
           c == static_cast<int>(cluster_errc::already_exists);
  }
  std::string message(int c) const override {
    switch (static_cast<cluster_errc>(c)) {
      case cluster_errc::ok:
        return "ok";
      case cluster_errc::launch_failed:
        return "launch failed";
      case cluster_errc::no_such_node:
        return "no such node";
      case cluster_errc::insufficient_resources:
        return "insufficient resources";
      case cluster_errc::already_exists:
        return "already exists";
      case cluster_errc::invalid_spec:
        return "invalid specification";
      case cluster_errc::membership_limit:
        return "membership limit";
      case cluster_errc::stale_incarnation:
        return "stale incarnation";
      case cluster_errc::missing_file:
        return "missing file";
      case cluster_errc::corrupt_file:
        return "corrupt file";
      case cluster_errc::io_error:
        return "I/O error";
      case cluster_errc::timed_out:
        return "timed out";
    }
    return "unknown cluster error " + std::to_string(c);
  }
};
}  // namespace

const std::error_category& cluster_category() noexcept {
  static const cluster_category_impl instance;
  return instance;
}

}  // namespace troupe::cluster
