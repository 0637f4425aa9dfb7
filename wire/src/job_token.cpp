#include "troupe/wire/job_token.hpp"

#include "troupe/transport/config.hpp"

namespace troupe::wire {

expected<std::string> read_job_token(const std::string& job_dir) {
  return load_token(job_dir + "/token", "", "");
}

}  // namespace troupe::wire
