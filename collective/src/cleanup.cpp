#include "troupe/collective/cleanup.hpp"

#include "shm/leftovers.hpp"
#include "troupe/collective/shm/liveness.hpp"

namespace troupe::collective {

std::string instance_key(const std::string& job_id, const std::string& instance) {
  if (instance.empty()) return job_id;
  std::string key = job_id;
  key += '@';
  key += instance;
  return key;
}

std::size_t remove_job_leftovers(const std::string& job) {
  return remove_shm_leftovers(job, shm_leftovers::all);
}

void remove_node_leftovers(const std::string& job, const std::string& node) {
  liveness_beacon::remove(liveness_beacon::name_for(job, node));
}

}  // namespace troupe::collective
