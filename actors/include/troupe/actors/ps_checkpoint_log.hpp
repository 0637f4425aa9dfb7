// What a PS shard's checkpoints cost its requests: for each checkpoint, when it began (the
// snapshot), when the shard's actor was done with it and when it was on disk, and the longest
// stretch of checkpoint work the actor did between two requests (a pull or push arriving then
// waits at most that long for the checkpoint). Kept in the process (the last 4096), read by
// ps_bench (docs/benchmarks.md), which runs the shard in its own process (testing/ps_shard_host.hpp);
// the shard also logs each one at debug level.
#pragma once

#include <cstdint>
#include <vector>

namespace troupe::actors {

struct ps_checkpoint_record {
  bool full = false;
  bool ok = false;             // persisted (false: the write failed)
  double begin_s = 0;          // ps_checkpoint_clock(), seconds: the snapshot began
  double snapshot_end_s = 0;   // the actor copied its last row
  double end_s = 0;            // the write returned
  double longest_slice_s = 0;  // the longest checkpoint work between two messages of the actor
  // The same slice's CPU time on the actor's thread: without the time the OS ran other processes
  // (on a loaded machine the wall time above includes them).
  double longest_slice_cpu_s = 0;
  std::uint64_t slices_over_1ms = 0;      // slices longer than 1 ms (wall)
  std::uint64_t slices_over_1ms_cpu = 0;  // slices that took more than 1 ms of CPU
  std::uint64_t slices = 0;               // stretches of checkpoint work on the actor
  double slices_cpu_s = 0;                // their CPU time, all together
  std::uint64_t rows = 0;                 // embedding rows in the checkpoint
  std::uint64_t bytes = 0;                // payload bytes (floats)
};

// Appends (thread-safe).
void log_ps_checkpoint(const ps_checkpoint_record& r);
// Everything logged since the last take (thread-safe).
std::vector<ps_checkpoint_record> take_ps_checkpoint_log();
// Seconds on the real monotonic clock (troupe::clock::system(): the records measure what
// checkpoints cost in real time; no deadline hangs on them). The time base of the records.
double ps_checkpoint_clock();
// CPU seconds of the calling thread.
double ps_thread_cpu_clock();

}  // namespace troupe::actors
