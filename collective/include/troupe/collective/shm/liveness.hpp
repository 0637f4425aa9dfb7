// Sub-millisecond death notice between processes on one host. A SIGKILLed process takes several
// milliseconds to tear its address space down before its pidfd, its sockets or its pid report the
// death; the kernel releases the robust futexes its threads hold before that teardown. A beacon is
// a process-shared robust mutex, held for the life of the process by a thread of its own; a peer's
// trylock sees EOWNERDEAD (or a released mutex, after a clean exit) as soon as the holder is gone.
//
// shm_liveness is the `liveness` (../liveness.hpp) of one job over these beacons; liveness_beacon
// and liveness_watch are the primitives, by beacon name.
#pragma once

#include <memory>
#include <string>

#include "troupe/collective/liveness.hpp"
#include "troupe/core/error.hpp"

namespace troupe::collective {

class liveness_beacon final : public liveness::beacon {
 public:
  // Creates /dev/shm/<name> holding a locked robust mutex. A leftover of the same name is replaced.
  static expected<std::unique_ptr<liveness_beacon>> start(const std::string& name);
  // A clean shutdown: releases the mutex (watchers see the process gone) and removes the name.
  ~liveness_beacon() override;
  liveness_beacon(const liveness_beacon&) = delete;
  liveness_beacon& operator=(const liveness_beacon&) = delete;

  // The beacon name of a node of a job (node ids include the incarnation, so names never repeat).
  static std::string name_for(const std::string& job, const std::string& node);
  // Whether the beacon exists and its holder is gone (a check anyone on the host can make).
  static bool released(const std::string& name);
  // Removes a beacon left behind by a killed process (a clean exit removes its own).
  static void remove(const std::string& name);

 private:
  struct impl;
  explicit liveness_beacon(std::unique_ptr<impl> p);
  std::unique_ptr<impl> p_;
};

class liveness_watch final : public liveness::watch {
 public:
  // Null when there is no such beacon (the peer predates beacons or has not started one).
  static std::unique_ptr<liveness_watch> open(const std::string& name);
  ~liveness_watch() override;
  liveness_watch(const liveness_watch&) = delete;
  liveness_watch& operator=(const liveness_watch&) = delete;

  // Whether the beacon's process has exited (killed or clean). Cheap: one atomic compare-exchange
  // while the holder lives. Once true, stays true. The name stays (others may check it) until
  // liveness_beacon::remove().
  bool gone() override;

 private:
  liveness_watch(std::string name, int fd, void* map);
  std::string name_;
  int fd_ = -1;
  void* map_ = nullptr;
  bool gone_ = false;
};

// The beacons of the nodes of one job, named by liveness_beacon::name_for(job, node).
class shm_liveness final : public liveness {
 public:
  explicit shm_liveness(std::string job) : job_(std::move(job)) {}
  expected<std::unique_ptr<beacon>> start(const node_id& self) override;
  bool gone(const node_id& node) override;
  std::unique_ptr<watch> watch_node(const node_id& node) override;
  void remove(const node_id& node) override;
  // Every beacon of the job in /dev/shm (not the rings: remove_job_leftovers removes both).
  void remove_all() override;

 private:
  std::string job_;
};

}  // namespace troupe::collective
