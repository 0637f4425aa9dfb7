// The Slurm commands the launcher runs, and the pure pieces around them (argv building, output
// parsing) kept apart so they are unit-tested without a cluster.
#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "troupe/cluster/launcher.hpp"
#include "troupe/cluster/run_tool.hpp"
#include "troupe/cluster/slurm/launcher.hpp"

namespace troupe::cluster::slurm {

// POSIX shell quoting of one word.
std::string shell_quote(const std::string& s);

// The first line of `s`, without trailing blanks.
std::string first_line(const std::string& s);
// What a failed Slurm command said, for an error message: the last (at most 3) lines of its stderr,
// where the cause comes last ("... res_nsearch error: Unknown host", then "Could not establish a
// configuration source"), "; "-joined, else its stdout's first ("Node hx not found").
std::string said(const tool_result& r);

// The sbatch argv for a node: options, resources, job name, log, and --wrap running
// `exec [env [-i] K=V...] program args...` in the working directory.
std::vector<std::string> sbatch_argv(const node_spec& spec, const std::string& program, const options& so);

// A job as squeue lists it: its state and, with `-o '%i|%T|%N'`, the nodes it runs on ("" while
// it waits, or without the field).
struct squeue_job {
  std::string state, nodes, reason;
};
// `squeue -h -t all -o '%i|%T'`, `'%i|%T|%N'` or `'%i|%T|%N|%r'` output -> job id -> its state (and
// nodes, and the reason it waits: "Resources", "ReqNodeNotAvail, UnavailableNodes:h1"; "None" while it
// runs). Lines that do not parse are skipped.
std::map<long, squeue_job> parse_squeue(const std::string& text);

// `scontrol show job -o ID` output -> the exit status (JobState, ExitCode=code:signal; state
// PREEMPTED whenever PreemptTime is set; trace.reason from Reason, trace.host from BatchHost);
// nullopt when it names no job.
std::optional<exit_status> parse_scontrol_job(const std::string& text);

// `sacct -n -P -X -j ID -o State,ExitCode,Reason,NodeList` output -> the exit status, for a job
// slurmctld has forgotten (MinJobAge); nullopt when accounting has no line for it.
std::optional<exit_status> parse_sacct_job(const std::string& text);

// The value of `key` in `scontrol show ... -o` output (empty when absent).
std::string scontrol_field(const std::string& text, const std::string& key);

// The address Slurm has for node `name` (`scontrol show node`: NodeAddr). Errors: launch_failed
// with scontrol's message (an unknown node, the controller down).
expected<std::string> node_addr(const std::string& name, const options& so);
// The first node of `partition` (`sinfo -N`), where the master goes when none is named.
expected<std::string> first_node(const std::string& partition, const options& so);
// A host a worker may be placed on: a node of the worker partition (the partition when none is
// set). Errors: invalid_spec naming the host (unknown, or not in that partition), launch_failed
// when sinfo fails.
expected<void> worker_host(const std::string& host, const options& so);
// The CPUs of `partition` (the default one when empty), from `sinfo -o %C`. Errors: invalid_spec
// "Slurm has no partition 'P'", launch_failed when sinfo does not run or answer.
expected<double> partition_cpus(const std::string& partition, const options& so,
                                troupe::clock& clk = troupe::clock::system());
// Every partition `so` names exists (control, worker, spare; errors as partition_cpus', wrapped in
// the key that names the partition): the control partition's CPUs.
expected<double> check_partitions(const options& so, troupe::clock& clk = troupe::clock::system());

// `sbatch` of one node (sbatch_argv); returns the Slurm job id. Errors: launch_failed carrying
// sbatch's own message. so.command_timeout is measured on `clk`.
expected<long> submit(const node_spec& spec, const std::string& program, const options& so,
                      troupe::clock& clk = troupe::clock::system());

// troupe chaos on nodes that are Slurm jobs (faults.cpp): `scancel --full --signal=SIG JOB`
// (errors: no_such_node with scancel's message). SIGKILL is `scancel --batch --signal=9`: to the
// batch step alone (the node, which the batch script execs), as Slurm delivers it as is; with --full
// Slurm turns a KILL into a cancel (SIGCONT and SIGTERM, SIGKILL only after KillWait), which a node
// survives as a clean leave (exit 0: a chaos kill tested the stop path, a fenced node ran on). One
// signal, so a stopped node dies stopped (SIGUSR2 then SIGCONT, two requests before 2026-12-04,
// could arrive CONT first: the node ran on for a moment). And a job of
// `partition` taking the host of the running job JOB whole (--exclusive) for `seconds`, which preempts what
// runs there in a preemptible partition; returns its id (recorded in so.jobs_file).
expected<void> signal_job(long job, int sig, const options& so);
// `squeue -h -t all -j JOB -o %T`: its state, "" when Slurm no longer lists it.
expected<std::string> job_state(long job, const options& so);
// One try at fencing job JOB (the launcher's fence): killed (signal_job SIGKILL), never cancelled
// while it runs; cancelled (`scancel JOB`) when Slurm says it has not started; nothing to do when
// Slurm says it is over or no longer lists it. Errors: the refused kill (scancel's message; under
// load Slurm refuses a running job too) or the failed squeue, for the caller to try again.
expected<void> fence_job(long job, const options& so);
expected<long> preempt_job(long job, const std::string& partition, double seconds, const options& so);

// True for the states after which a job never runs again (with --no-requeue).
bool terminal_state(const std::string& state);

}  // namespace troupe::cluster::slurm
