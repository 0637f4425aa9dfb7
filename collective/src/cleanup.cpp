#include "troupe/collective/cleanup.hpp"

#include "shm/leftovers.hpp"

namespace troupe::collective {

void remove_job_leftovers(const std::string& job) {
  remove_shm_leftovers(job, shm_leftovers::all);
}

}  // namespace troupe::collective
