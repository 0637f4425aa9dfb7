#include "troupe/actors/ps_checkpoint_log.hpp"

#include <time.h>

#include <chrono>
#include <mutex>
#include <utility>

#include "troupe/core/clock.hpp"

namespace troupe::actors {

namespace {
constexpr std::size_t kKept = 4096;
std::mutex log_mutex;
std::vector<ps_checkpoint_record> log_records;
}  // namespace

void log_ps_checkpoint(const ps_checkpoint_record& r) {
  std::lock_guard lock(log_mutex);
  if (log_records.size() >= kKept) log_records.erase(log_records.begin());
  log_records.push_back(r);
}

std::vector<ps_checkpoint_record> take_ps_checkpoint_log() {
  std::lock_guard lock(log_mutex);
  return std::exchange(log_records, {});
}

double ps_checkpoint_clock() {
  return std::chrono::duration<double>(troupe::clock::system().now().time_since_epoch()).count();
}

}  // namespace troupe::actors

namespace troupe::actors {
double ps_thread_cpu_clock() {
  timespec ts{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}
}  // namespace troupe::actors
