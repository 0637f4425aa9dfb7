// `troupe chaos`: inject faults into a running job (SIGKILL, SIGSTOP/SIGCONT, message drop and
// delay) by a schedule or at random, and record how the job responded: when the master noticed
// (detection), when a replacement was alive and training moved again (recovery), how many tasks
// were re-queued and how many nodes the runner relaunched. Docs: docs/chaos.md.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "troupe/core/clock.hpp"
#include "troupe/core/error.hpp"

namespace troupe::cluster {
struct cluster_config;
}

namespace troupe::control {

// preempt: Slurm jobs only: a high-priority job takes the node's host for `hold` seconds.
// partition, throttle: host faults only (TARGET host:NAME or host), as are kill and delay of a host.
enum class fault_kind { kill, stop, drop, delay, preempt, partition, throttle };
const char* to_string(fault_kind k);

// One fault: at `at_s` seconds after the start, do `kind` to `target` (a role: worker, ps, master,
// dispenser — which lives in the master process —, a node name such as worker-1, or a host of the
// job's [cluster] hosts: "host:h3", or "host" for one of them at random).
struct fault_spec {
  double at_s = 0;
  fault_kind kind = fault_kind::kill;
  std::string target = "worker";
  double hold_s = 1.0;          // stop: SIGCONT after this; drop/delay: how long the knob stays on;
                                // preempt: how long the preempting job runs
  double drop_probability = 0;  // drop
  std::uint64_t delay_us = 0;   // delay
  std::string rate;             // throttle: the link's rate, "1gbit" (tc's units: kbit, mbit, gbit)
};

// The host a host fault names ("h3" for "host:h3", "" for "host": any); nullopt for a node fault.
std::optional<std::string> fault_host(const fault_spec& f);

// Parses "T KIND TARGET [hold=S] [p=P] [us=N] [rate=R]", e.g. "2.5 kill worker", "4 stop worker-1
// hold=3", "3 drop ps-0 p=0.3 hold=2", "3 delay worker us=20000 hold=2", "5 kill host:h3",
// "8 partition host:h2 hold=5", "2 throttle host rate=1gbit hold=10". Errors name the text and the part.
expected<fault_spec> parse_fault(const std::string& text);
// One word of a fault: its kind ("kill" ...; "unknown fault kind 'x' (kill, stop, ...)") and its
// target ("worker", "ps-1", "host:h2" ...; "unknown target 'x' (...)"), for flags that give them apart.
expected<fault_kind> parse_fault_kind(const std::string& s);
expected<void> check_fault_target(const std::string& t);
// A schedule file: TOML with `[chaos] faults = ["<fault>", ...]`.
expected<std::vector<fault_spec>> read_schedule(const std::string& path);

struct random_faults {
  std::uint64_t seed = 1;
  double rate = 0.5;       // faults per second (Poisson arrivals)
  double duration_s = 10;  // from the start
  double start_s = 1;      // no fault before this
  std::vector<fault_kind> kinds{fault_kind::kill};
  std::vector<std::string> targets{"worker", "ps", "master"};
  double hold_s = 1.0;
};
// The faults random mode injects; the same seed gives the same schedule.
std::vector<fault_spec> random_schedule(const random_faults& r);

// What one fault did. Times are seconds since the fault; negative: never observed.
struct fault_record {
  fault_spec spec;
  double t_s = 0;    // since the start of the chaos run
  std::string node;  // the node it hit (name#incarnation); a host fault: the one whose recovery is timed
  std::string host;  // a host fault: the host it hit
  std::vector<std::string> nodes;  // a host fault: every node of the job that was on the host
  pid_t pid = 0;
  long slurm_job = 0;          // the Slurm job it hit (Slurm launcher; pid is 0 then)
  double detected_s = -1;      // the master's view shows the node gone (or the node was replaced)
  double recovered_s = -1;     // a new incarnation is alive and the job trained again
  std::uint64_t requeued = 0;  // tasks re-queued between the fault and its recovery
  std::uint64_t restarts = 0;  // runner relaunches over the same span
  double resumed_s = -1;       // stop: when SIGCONT reached the stopped process; -1: it never did
                               // (the runner fenced it first, or the job ended with it gone)
  std::string note;            // why it was skipped, or what else was seen
};

struct chaos_options {
  std::string job_dir;
  std::vector<fault_spec> faults;  // sorted by at_s by run_chaos
  double settle_s = 30;            // after the last fault, wait up to this for its recovery
  // True while the job is running (e.g. the runner child process has not exited). Default: the
  // runner answers status or result.json is missing.
  std::function<bool()> job_running;
  bool verbose = false;  // one stderr line per fault as it is injected
  // What the harness times faults and holds on (troupe chaos: the real one).
  std::reference_wrapper<troupe::clock> clock{troupe::clock::system()};
};

struct chaos_report {
  std::string job_dir;
  std::vector<fault_record> faults;
  std::optional<int> job_exit_code;
  std::string job_result;  // result.json, when the job wrote one
  std::string to_json() const;
  std::string summary_table() const;
};

// Injects the faults and observes the job until they are all resolved (or the job ends). Never
// leaves a process stopped: every SIGSTOP is followed by a SIGCONT unless the node is gone (the
// runner fences a node the master declared dead, so a hold longer than the heartbeat timeout
// usually ends with the process killed, not resumed).
expected<chaos_report> run_chaos(const chaos_options& opt);

// Host faults in `faults` against the job's [cluster] hosts, before anything is injected: errors
// (invalid_argument) name the fault and the problem (no hosts listed, a host not in the list, no
// command that acts on the hosts).
expected<void> check_host_faults(const std::vector<fault_spec>& faults, const cluster::cluster_config& cfg);

// Sets a node's fault-injection knob for `duration_ms` (sends JobMessage.inject to its "node" name).
expected<void> inject_messages(const std::string& job_dir, const std::string& node, double drop_probability,
                               std::uint64_t delay_us, std::uint64_t duration_ms);

}  // namespace troupe::control
