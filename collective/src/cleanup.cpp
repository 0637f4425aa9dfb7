#include "troupe/collective/cleanup.hpp"

#include "shm/leftovers.hpp"

namespace troupe::collective {

std::string instance_key(const std::string& job_id, const std::string& instance) {
  if (instance.empty()) return job_id;
  std::string key = job_id;
  key += '@';
  key += instance;
  return key;
}

void remove_job_leftovers(const std::string& job) {
  remove_shm_leftovers(job, shm_leftovers::all);
}

}  // namespace troupe::collective
