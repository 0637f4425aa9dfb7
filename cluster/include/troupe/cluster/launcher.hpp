// The launcher interface: how the master starts, signals and watches node processes without
// knowing where they run. One backend per subfolder with the same file names (gloo style):
// `local/launcher.hpp` (processes on this machine) now; `slurm/`, `kubernetes/` later.
//
// Contract every backend keeps:
// - launch() returns only once the node's program is really running (exec succeeded) or with an
//   error naming the node and the reason; it never returns a handle for a node that failed to start.
// - Each launched node gets exactly one exit report through the exit callback given at
//   construction: (handle, status), after the node is gone for good (reaped). Reports come on a
//   thread of the launcher, one at a time, never with a launcher lock held: the callback may call
//   any launcher method (launch() included, to start a replacement) but must not destroy the
//   launcher. A CAF actor's callback should just send itself a message. The status carries what
//   the backend saw of the run (exit_trace: its reason, where it ran, what the node wrote to its
//   log since its launch), so that a node that never started can be told apart.
// - No orphans: when the launcher is destroyed, when kill_all() is called and when the process
//   that owns the launcher dies by any means (SIGKILL included), every node it started and
//   everything those nodes started in their process group is killed. Backends that cannot
//   guarantee this for an abrupt death of the owner (a batch scheduler) document their timeout.
// - signal() reaches the node's whole process group. After a node's exit report, its handle is
//   dead: signal() and fence() answer no_such_node and poll() answers the final status.
// - fence() makes a node unable to act any more, whatever state it is in (a hung or SIGSTOPped
//   process included), without waiting for its cooperation: the control plane calls it once the
//   master has declared the node dead, then launches the replacement when the exit report comes.
// - All methods are thread-safe. Destructors never throw.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "troupe/cluster/resources.hpp"
#include "troupe/core/clock.hpp"
#include "troupe/core/error.hpp"
#include "troupe/core/ids.hpp"

namespace troupe::cluster {

// What to start. For a troupe node: program empty (this binary) and
// argv = {"troupe", "node", "--join", "127.0.0.1:7000", "--role", "worker", "--name", "worker-3", ...}.
struct node_spec {
  node_id id;                     // name (valid_node_name) and incarnation, for logs and reports
  std::string program;            // path to execute; empty: this process's own binary (self_exe())
  std::vector<std::string> argv;  // argv[0] included; must not be empty
  // Added to this process's environment, replacing variables of the same name.
  std::vector<std::pair<std::string, std::string>> env;
  bool inherit_env = true;  // false: the node sees only `env`
  std::string working_dir;  // empty: this process's working directory
  // stdout and stderr are appended here (created if absent, its directory must exist), after a
  // header line naming the node, incarnation, time and argv; a footer line records the exit.
  // Empty: the node shares this process's stdout/stderr.
  std::string log_file;
  resources need;  // reserved against the launcher's capacity while the node runs
  // Where the node must run: one of the backend's hosts (Slurm: a node name); empty: anywhere.
  // The local backend has one host, this machine, and ignores it.
  std::string host;
  // Hosts to keep the node off while another has room: those a node of the job could not reach the
  // master from (a host cut off). The local backend with cluster.hosts honours it; Slurm does not
  // (slurmctld marks a node it cannot reach down itself, and an --exclude could leave it pending).
  std::vector<std::string> avoid;
  // The node may be preempted (a worker): a backend with such a class of capacity puts it there
  // (Slurm: the worker partition; Kubernetes: a low priorityClassName). Control nodes are not.
  bool preemptible = false;
  // The node is extra, for capacity nobody else wants (a worker beyond the job's `workers`): a
  // backend with such a class puts it where any other work preempts it (Slurm: the spare
  // partition). The local backend ignores it.
  bool spare = false;
  // A standby of the launcher (keep_standby) may become this node: its program and the
  // environment it read at its own start are the standby's, its argv, log and `env` this spec's.
  bool standby_ok = false;
};

// What the backend saw of a node's run besides how it ended: enough to tell a node whose program
// never started (a Slurm job that failed to launch, a host command that could not reach its host)
// from one that failed in its work. Filled in every exit report.
struct exit_trace {
  // The backend's reason for the end where it gives one (Slurm: the job's Reason,
  // "JobLaunchFailure"; empty for "None" and for local processes).
  std::string reason;
  std::string host;  // where it ran, when the backend says (Slurm: BatchHost); else empty
  // The node's log (node_spec::log_file) does not exist where this process looks: whatever ran
  // wrote it, if at all, on a filesystem this machine does not share. False without a log file.
  bool log_missing = false;
  std::uint64_t log_bytes = 0;  // bytes the node's process added to its log since its launch
  // The last lines of those (at most output_limit bytes, cut at a line start; the launcher's own
  // header and footer lines are not in it), trailing newline removed.
  std::string output;
  static constexpr std::size_t output_limit = 2048;
  bool operator==(const exit_trace&) const = default;
};

// How a node ended.
struct exit_status {
  int code = 0;    // exit code when signal == 0; -1: unknown (the child was reaped by someone else)
  int signal = 0;  // the terminating signal, 0 when it exited
  // The backend's word for how the node ended where it has one (Slurm: COMPLETED, PREEMPTED,
  // NODE_FAIL, ...); empty for local processes.
  std::string state;
  exit_trace trace;
  bool signaled() const noexcept { return signal != 0; }
  bool success() const noexcept { return signal == 0 && code == 0; }
  // "exited with code 3", "killed by SIGKILL", "killed by SIGTERM (PREEMPTED)"
  std::string to_string() const;
  bool operator==(const exit_status&) const = default;
};

// A launched node. `serial` is unique per launcher for its whole life (handles are never reused);
// `pid` is informational for the local backend (0 where the backend has no pid).
struct node_handle {
  std::uint64_t serial = 0;
  node_id id;
  int pid = 0;
  std::string host;  // where it runs when the backend chose a host (local with cluster.hosts); else empty
  bool operator==(const node_handle&) const = default;
};

using exit_callback = std::function<void(const node_handle&, const exit_status&)>;

struct launcher_options {
  exit_callback on_exit;  // may be empty
  // What the launcher may hand out; a launch whose need, added to what running nodes reserve,
  // exceeds it is refused. nullopt: the backend finds out (local: local_capacity()).
  std::optional<resources> capacity;
  // What every timeout and deadline of the launcher reads (wait(), Slurm's kill_all() and command
  // limits, outage_info::since); the owner passes its own so that both read one clock.
  std::reference_wrapper<troupe::clock> clock{troupe::clock::system()};
};

class launcher {
 public:
  virtual ~launcher() = default;

  // Starts a node; blocks until the program runs (local: about 0.5 ms, see docs/benchmarks.md).
  // Errors: invalid_spec (empty argv, bad name), already_exists (a node of that name still runs),
  // insufficient_resources (names the need and what is free), launch_failed (names the cause:
  // program not found, log file not writable, ...).
  virtual expected<node_handle> launch(const node_spec& spec) = 0;
  // Sends `sig` to the node's process group. Errors: no_such_node once the node has been reaped.
  virtual expected<void> signal(const node_handle& h, int sig) = 0;
  // Fences the node (local: SIGKILL to its process group, which ends a stopped process too; Slurm:
  // a KILL to the job's batch step, sent by its watcher, so this returns at once even while the
  // controller does not answer). Its exit report follows as for any exit. Errors: no_such_node
  // once the node has been reaped.
  virtual expected<void> fence(const node_handle& h) = 0;
  // The final status once the node was reaped, nullopt while it runs. Errors: no_such_node for a
  // handle this launcher never issued.
  virtual expected<std::optional<exit_status>> poll(const node_handle& h) const = 0;
  // Blocks until the node is reaped or the timeout passes (timed_out).
  virtual expected<exit_status> wait(const node_handle& h, std::chrono::milliseconds timeout) = 0;
  // SIGKILLs every running node's process group and waits until all are reaped (their exit
  // reports are delivered before this returns). Safe to call repeatedly and from the callback.
  virtual void kill_all() noexcept = 0;
  // Nodes launched and not yet reaped, in launch order.
  virtual std::vector<node_handle> running() const = 0;
  // Capacity and what running nodes reserve now.
  virtual resources capacity() const = 0;
  virtual resources reserved() const = 0;
  // The cluster manager does not answer (Slurm: slurmctld down): why, and since when; nullopt
  // while it answers (local: always). Nodes keep running meanwhile; their exit reports come when
  // it answers again.
  struct outage_info {
    std::string why;
    troupe::clock::time_point since;  // on the launcher's clock (launcher_options::clock)
  };
  virtual std::optional<outage_info> outage() const { return std::nullopt; }
  // Whether a node may be placed on `host` (node_spec::host) for a worker: a host this backend can
  // start a worker on (Slurm: a node of the worker partition; local: one of cluster.hosts). Errors:
  // invalid_spec naming the host and why (the default: a launcher that runs every node here).
  // Thread-safe: reads no state a launch changes.
  virtual expected<void> check_host(const std::string& host) const;
  // The host the node runs on, as check_host and node_spec::host name hosts: where the backend
  // placed it (local with cluster.hosts: that entry; Slurm: the node squeue last listed it on, or
  // the one its launch asked for while it waits); "" where every node runs here or none is known.
  // Thread-safe.
  virtual std::string host_of(const node_handle& h) const { return h.host; }
  // Why a launched node has not started yet, while it waits in the backend's queue (Slurm:
  // "PENDING (Resources)", "PENDING (ReqNodeNotAvail, UnavailableNodes:h1)"); "" once it runs, or
  // where launches do not queue (the default). Thread-safe.
  virtual std::string waiting_why(const node_handle& h) const {
    (void)h;
    return {};
  }
  // Keeps one standby process started from `standby` (cluster/standby.hpp) ready from now on, and
  // hands the next launch of a spec with standby_ok to it instead of starting a process; false:
  // this backend keeps no standbys (the default) and launches as before. A standby is no node: no
  // exit report, not in running(), reserves nothing until adopted; kill_all() and the destructor
  // kill it and keep no more.
  virtual bool keep_standby(const node_spec& standby) {
    (void)standby;
    return false;
  }
};

// check_host's answer where every node runs on this machine (the local launcher without
// cluster.hosts): invalid_spec naming the host. Also `troupe config check`'s, for worker_host.
expected<void> host_here_only(const std::string& host);

}  // namespace troupe::cluster
