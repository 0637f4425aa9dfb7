// State of the local launcher, shared by its public methods and its service thread.
#pragma once

#include <condition_variable>
#include <deque>
#include <future>
#include <map>
#include <mutex>
#include <thread>

#include "local/spawn.hpp"
#include "troupe/cluster/local/launcher.hpp"

namespace troupe::cluster::local {

// The launcher's own lines in a node's log (header, footer): node_output leaves them out.
inline const std::string launcher_line = "==== troupe launcher ";

// Reaps `pid` if it has exited (service.cpp): SIGKILLs its group first, so that whatever the
// process left behind in it dies too. nullopt while it runs.
std::optional<exit_status> try_reap(int pid);

struct child {
  node_handle handle;
  unique_fd pidfd;
  resources need;
  std::string log_file;
  std::uint64_t log_start = 0;        // the log's size once its header was written (exit_trace)
  std::string host;                   // "" or "localhost": this machine
  std::optional<exit_status> status;  // set when reaped
  bool reported = false;              // the exit callback has returned
};

// A standby process (keep_standby) before its adoption.
struct standby_child {
  int pid = 0;
  unique_fd pidfd;
  unique_fd channel;  // our end of the socket on its stdin
  std::string log_file;
};

struct spawn_request {
  node_spec spec;
  std::promise<expected<node_handle>> result;
};

struct launcher::impl {
  launcher_options options;
  remote_hosts hosts;
  resources capacity;
  unique_fd wake_fd;  // eventfd: new requests, kill_all, shutdown

  mutable std::mutex mu;
  std::condition_variable cv;  // a child was reaped or reported
  std::map<std::uint64_t, child> children;
  std::deque<spawn_request> requests;
  resources reserved;
  std::uint64_t next_serial = 1;
  bool stopping = false;  // no new launches
  bool stop = false;      // the service thread exits once nothing runs
  std::thread thread;
  // keep_standby(): the spec to start standbys from (unset: none kept), the one ready, when the
  // next may start, and how many died in a row unadopted.
  std::optional<node_spec> standby_spec;
  std::optional<standby_child> standby;
  bool standby_starting = false;            // tend_standby() is between its fork and recording it
  troupe::clock::time_point standby_due{};  // on options.clock
  int standby_deaths = 0;

  bool on_service_thread() const { return std::this_thread::get_id() == thread.get_id(); }
  void wake() noexcept;
  void run() noexcept;
  std::vector<struct pollfd> poll_set();
  void serve_requests();
  expected<node_handle> do_launch(const node_spec& spec);
  // A launch's place: its serial, its host ("" or "localhost": this machine) and what it reserved
  // there (nothing on another host).
  struct slot {
    std::uint64_t serial = 0;
    std::string host;
    resources need;
  };
  // Admits `spec` and reserves its slot (under mu); do_launch gives the reservation back on failure.
  expected<slot> reserve(const node_spec& spec);
  // Under mu: checks the spec, picks its host (hosts.hpp) and, for this machine, its capacity.
  expected<std::string> admit(const node_spec& spec);
  void reap() noexcept;
  void signal_all_locked(int sig) noexcept;
  // Service thread (standby.cpp): starts a standby when one is wanted and due; reaps a dead one;
  // hands `spec` to the ready one (the lock not held), or nullopt: launch a process as usual.
  void tend_standby() noexcept;
  void reap_standby() noexcept;
  std::optional<node_handle> adopt_standby(const node_spec& spec, std::uint64_t serial, const resources& need,
                                           const std::string& host);
  std::size_t unreported_locked() const noexcept;
};

}  // namespace troupe::cluster::local
