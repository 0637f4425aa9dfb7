// The end of a job whose model lives on PS shards (async_ps): every shard's final checkpoint. Until a
// checkpoint holds them, the rows the job trained live only in the shards' memory (a shard
// checkpoints every [ps] checkpoint_every_ms, and once more when it is stopped: a stop that finds the
// disk full lost them, after the job had said "finished, ok"). So once every task is over the master
// asks each shard for a checkpoint of every push it applied (FinalCheckpoint), and the job ends only
// once every shard said one holds them.
//
// A shard that does not answer within `timeout` is asked again (a restarted shard restores its
// latest checkpoint and writes it again). An error answer is asked again `retry` after the ask; a
// disk fault does not count (the job's end pauses as training does; the runner fails the job after
// job.disk_full_timeout_ms), any other error counts, and past `max_failures` the job fails with it.
//
// A plain class: the master drives it (master_status.cpp) with its clock's time; unit tests drive it
// by hand. Not thread-safe.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "troupe/core/clock.hpp"

namespace troupe::actors {

class final_checkpoints {
 public:
  final_checkpoints(std::uint32_t shards, std::uint32_t max_failures, troupe::clock::duration timeout,
                    troupe::clock::duration retry);

  // The shards to ask now ("ps-0", ...): of those in `alive`, the ones without an answer whose last
  // ask is older than the timeout (`retry` after an error answer), or never asked.
  std::vector<std::string> due(const std::set<std::string>& alive, troupe::clock::time_point now);
  // `shard`'s answer: `error` empty, a checkpoint holds every push it applied.
  void answer(const std::string& shard, const std::string& error, bool disk_fault);
  // Every shard's checkpoint holds its pushes.
  bool done() const;
  bool failed() const { return failures_ >= max_failures_; }
  std::uint32_t failures() const { return failures_; }
  const std::string& last_error() const { return last_error_; }
  // The shards whose checkpoint is still to come ("ps-0, ps-1"), for the log.
  std::string waiting() const;

 private:
  struct shard {
    std::string name;
    bool written = false, erred = false;
    bool asked = false;
    troupe::clock::time_point sent{};
  };
  std::vector<shard> shards_;
  std::uint32_t max_failures_;
  troupe::clock::duration timeout_, retry_;
  std::uint32_t failures_ = 0;
  std::string last_error_;
};

}  // namespace troupe::actors
