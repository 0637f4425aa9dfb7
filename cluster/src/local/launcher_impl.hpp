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

  bool on_service_thread() const { return std::this_thread::get_id() == thread.get_id(); }
  void wake() noexcept;
  void run() noexcept;
  std::vector<struct pollfd> poll_set();
  void serve_requests();
  expected<node_handle> do_launch(const node_spec& spec);
  // Under mu: checks the spec, picks its host (hosts.hpp) and, for this machine, its capacity.
  expected<std::string> admit(const node_spec& spec);
  void reap() noexcept;
  void signal_all_locked(int sig) noexcept;
  std::size_t unreported_locked() const noexcept;
};

}  // namespace troupe::cluster::local
