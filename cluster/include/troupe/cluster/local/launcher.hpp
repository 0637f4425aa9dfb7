// The local launcher: node processes on this machine, children of this process (also when they
// run on another host through a command such as ssh: see remote_hosts).
//
// Guarantees beyond the launcher contract (../launcher.hpp):
// - Each node is the leader of its own process group (setpgid before exec), so a terminal's ^C
//   does not reach it and signal()/kill_all() reach everything it started in its group.
// - Each node gets PR_SET_PDEATHSIG(SIGKILL) between fork and exec, and re-checks getppid() right
//   after to close the race with a parent that died before the prctl. The death signal follows
//   the *thread* that forked, so every fork happens on the launcher's own service thread, which
//   lives exactly as long as the launcher: a node never dies because the thread that asked for
//   it (a CAF worker thread, say) ended.
// - When a node exits, its process group is SIGKILLed before it is reaped, so whatever it
//   left behind in its group dies with it.
// - The destructor SIGKILLs every node's group and reaps them all (exit reports included).
// - Children start with default signal dispositions, an empty signal mask, stdin on /dev/null and
//   no file descriptors of this process other than 0, 1, 2.
// - launch() called from outside the exit callback hands the fork to the service thread and
//   waits for it; launches are refused (launch_failed) once destruction has begun.
// - The status of every node ever launched is kept for poll() (a few dozen bytes each).
// - Nodes are reaped by pid (pidfd + waitid), never with waitpid(-1): other code in this process
//   may have children of its own. Conversely nobody else may reap this launcher's children.
// - keep_standby(): the standby is a child like a node (its own group, PR_SET_PDEATHSIG, forked
//   on the service thread), with a socket on its stdin for its identity (cluster/standby.hpp) and
//   its output in the standby spec's log until then. Adoption writes the node's log header, sends
//   the identity, and from then on the process is that node for every method and its exit report.
//   A new standby starts standby_delay after an adoption (not while the adopted node starts on
//   the same cores) or after a standby died; after max_standby_deaths deaths in a row without an
//   adoption no more are started. Nodes on another host are never given a standby.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "troupe/cluster/launcher.hpp"

namespace troupe::cluster::local {

// Other hosts this launcher may start nodes on ([cluster] hosts, host_command; docs/hosts.md).
struct host_slots {
  std::string name;
  int slots = 1;  // nodes it runs at once
};
struct remote_hosts {
  std::vector<host_slots> hosts;     // empty: every node runs on this machine
  std::vector<std::string> command;  // words, "{host}" replaced: "ssh {host}", "hosts.sh exec {host}"
};

class launcher final : public cluster::launcher {
 public:
  // Starts the service thread. Without options.capacity, uses local_capacity(). Errors:
  // launch_failed (cannot create the thread's event fd), io_error (local_capacity()).
  static expected<std::unique_ptr<launcher>> create(launcher_options options = {});
  // With other hosts: a node whose spec names no host goes to the first listed host with a free
  // slot, one naming a listed host goes there, "localhost" stays here. A node on another host
  // runs as `hosts.command` + its command line; it is still a child of this process (the command's
  // process): signal(), fence() and the exit report reach that process's group. Through ssh that
  // is the local ssh client (the remote node ends with its connection); through nsenter
  // (scripts/hosts.sh exec) it is the node itself. Capacity is checked for this machine's nodes.
  static expected<std::unique_ptr<launcher>> create(launcher_options options, remote_hosts hosts);
  ~launcher() override;
  launcher(const launcher&) = delete;
  launcher& operator=(const launcher&) = delete;

  expected<node_handle> launch(const node_spec& spec) override;
  expected<void> signal(const node_handle& h, int sig) override;
  // SIGKILL to the node's process group.
  expected<void> fence(const node_handle& h) override;
  expected<std::optional<exit_status>> poll(const node_handle& h) const override;
  // Errors: invalid_spec when called from the exit callback (it would wait for itself).
  expected<exit_status> wait(const node_handle& h, std::chrono::milliseconds timeout) override;
  // From the exit callback this only sends the signals; the reports follow after it returns.
  void kill_all() noexcept override;
  std::vector<node_handle> running() const override;
  resources capacity() const override;
  // One of cluster.hosts ("localhost": this machine); with none listed, the default (no host).
  expected<void> check_host(const std::string& host) const override;
  resources reserved() const override;
  bool keep_standby(const node_spec& standby) override;

  static constexpr std::chrono::milliseconds standby_delay{1000};
  static constexpr int max_standby_deaths = 3;

  struct impl;

 private:
  explicit launcher(std::unique_ptr<impl> p);
  std::unique_ptr<impl> impl_;
};

}  // namespace troupe::cluster::local

namespace troupe::cluster {
using local_launcher = local::launcher;
}
