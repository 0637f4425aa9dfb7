// A node whose process ended before it ever joined the job, and the words for it. The common
// causes are outside troupe: a Slurm job that failed to launch because its node does not see the
// job directory (JobLaunchFailure: Slurm cannot open the log there), a troupe binary missing on the
// node, a host command (ssh) that never reached its host. Relaunching such a node only fails the
// same way again, so the runner gives up after a few such ends in a row and says what happened
// and what to check, instead of "master died 11 times in a minute".
#pragma once

#include <cstddef>
#include <string>

#include "troupe/cluster/launcher.hpp"
#include "troupe/core/ids.hpp"

namespace troupe::cluster {

// A node's exit code when it could not join the master (`troupe node`: no answer at --join within
// --connect-timeout, or the join refused; EX_UNAVAILABLE). It ran as troupe, yet never joined: such
// ends count as start failures (a job whose nodes could not reach the master at a wrong
// [cluster] advertise, or on a host cut off for good, relaunched them every 30 s for ever).
constexpr int exit_join_failed = 69;
// A worker's exit code when the master refused its join for want of a worker slot (membership.hpp's
// no_worker_slot; EX_TEMPFAIL): not a death. The runner does not relaunch it (its workers go down by
// one) where it relaunched it into the same refusal until the job failed ("died 11 times in a minute").
constexpr int exit_no_worker_slot = 75;
// A worker's exit code when the job's model failed its check as the worker started (the start-up
// probe's forward: logits of another shape, an error raised inside the module; EX_DATAERR): every
// worker would fail the same way, so the runner fails the job at once, naming the worker's error
// (the workers crash-looped for ~40 s, "died 11 times in a minute", before).
constexpr int exit_model_refused = 65;
// The process ended with that code (not by a signal).
inline bool could_not_join(const exit_status& s) {
  return s.code == exit_join_failed && s.signal == 0;
}

// True when the exit report shows troupe ran as node `id`: its output holds a line the node
// logged under its own name ("[worker-0#3]": the logger of a `troupe node` is named after its
// id, core/log.hpp). A shell's "exec: ...: not found", ssh's or Slurm's own errors are not.
bool ran_as_node(const exit_status& s, const node_id& id);

// An end that counts towards giving up on a node that never started: not fenced, not preempted
// or cancelled by Slurm, not a SIGKILL/SIGTERM from someone else, and nothing of troupe's in its
// output, or troupe's own "could not join" (exit_join_failed). Whether it joined is the caller's to
// know.
bool start_failure(const exit_status& s, const node_id& id, bool fenced);

// What the runner knows of a node that ended `times` times in a row before it joined the job.
struct start_failure_report {
  node_id id;
  exit_status status;   // the last end
  std::string backend;  // "slurm" or "local"
  long slurm_job = 0;   // the last Slurm job (slurm)
  std::string host;     // where it ran ("": this machine; Slurm: trace.host when it is set)
  std::string log_path;
  std::string program;  // the troupe binary the node runs
  std::size_t times = 0;
};

// One line naming the node and that it never joined the master ("master never came up"), how it
// ended (the Slurm job's state, reason, exit code and host; a process's exit status), its log
// (never written here or empty: "before troupe started in it"; else the last lines of its output)
// and, for a Slurm job or a node on another host, what to check: "is the job directory on a
// filesystem the nodes share? is the troupe binary at <program> on the node?".
std::string describe(const start_failure_report& r);

// The last error (or critical) line a node logged in its output (`s.trace.output`, the node's log
// pattern "<date> <time> E [<node>] <message>"): its message, without the level letter and the node's
// tag (the callers name the node); empty when there is none.
// A supervisor's giving up (or the root supervisor's exit) is passed over for the error before it,
// the cause, when there is one.
std::string last_logged_error(const exit_status& s);

}  // namespace troupe::cluster
