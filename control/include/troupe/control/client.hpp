// Talking to a running job from outside (`troupe status`, `troupe scale`, `troupe stop`): find its
// directory, read the runner's address and the token from it, and ask the runner.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "troupe/core/clock.hpp"
#include "troupe/core/error.hpp"

namespace troupe::control {

// `job_dir` when given, else under `root`, among the jobs whose directories this user owns, the
// running job whose runner started last, or with none running the job started last (each run and
// --resume is a start). Errors name what is missing.
// A --job-dir with no directory whose runner `troupe run --submit` recorded (<root>/<id>.runner.job)
// says so: queued (`troupe stop --job-dir` cancels it), or ended, with its output file.
expected<std::string> find_job_dir(const std::string& job_dir, const std::string& root);
// --root of a command that reads the jobs root (status, stop, scale without --job-dir; dashboard,
// jobs): a directory, else an error saying what the flag is for (invalid_argument).
expected<void> check_jobs_root(const std::string& root);

// A job whose runner `troupe run --submit` queued and that has not started: the Slurm job of that
// runner, recorded beside the directory, is still queued (or starting), and the directory is absent
// or, `resumed` (`--resume DIR --submit`), no runner runs it. nullopt: none (or no `job_dir` given).
struct queued_job {
  std::string id;
  long slurm_job = 0;
  std::string state;  // squeue's: PENDING, CONFIGURING, RUNNING (not yet started the job)
  bool resumed = false;
};
std::optional<queued_job> queued_job_at(const std::string& job_dir);
// Cancels that runner (scancel) when there is one: the job never starts; nullopt: none was queued.
// An error when Slurm refuses.
expected<std::optional<queued_job>> cancel_queued_job(const std::string& job_dir);

// How a job its runner no longer runs ended: its result.json's status as the runner wrote it
// (finished, failed, stopped, interrupted); "" when the runner wrote none (it died: no result.json,
// or the master's figures alone).
std::string ended_as(const std::string& job_dir);

// The job's status as a JSON object (membership, tasks, throughput, loss, restarts, result).
// With `from_timeline`, when the runner cannot be reached (the job finished, was stopped or
// crashed), the status its timeline (events.jsonl) tells, with "state" and "recent" events
// (client_timeline.hpp); without, that is an error (the chaos harness tells a live job by it).
expected<std::string> job_status_json(const std::string& job_dir, bool from_timeline = false);
// Sets the number of workers; returns the target the runner accepted (clamped to min/max). With a
// host, the workers this adds start there (a Slurm node of the worker partition, or one of
// cluster.hosts; a relaunch later goes where the launcher puts it); a host the job's launcher cannot
// place a worker on is refused (out_of_range naming it; so is any scale once the job is stopping) and
// nothing changes.
// `note`: why the target differs from what was asked ("clamped to [1, 8]"); empty when it does not.
struct scale_answer {
  std::uint32_t workers = 0;
  std::string note;
};
expected<scale_answer> scale_job(const std::string& job_dir, std::uint32_t workers,
                                 const std::string& host = "");
// Asks the runner to stop the job; returns once the runner has recorded the request (its StopReply,
// at most 3 s), not when the job has ended: its nodes are stopped and the runner exits next (the
// job's status says when). The dashboard's stop.
// `who` asks: the job's record says "stopped on request (<who>)".
expected<void> request_stop(const std::string& job_dir, const std::string& who = "troupe stop");
// request_stop, then waits until the runner has exited (at most 15 s on `clk`): `troupe stop`.
expected<void> stop_job(const std::string& job_dir, troupe::clock& clk = troupe::clock::system());
// stop_job's error `e` when the runner dropped the stop's connection without answering (its master
// had just finished the job): once result.json is there (up to 2 s on `clk`), "job X is ending: its
// master finished it, ..." while the runner runs, "job X is not running: it ended (finished; ...)"
// once it has written its own; else `e` ("runner went down before replying").
error stop_unanswered(const std::string& job_dir, troupe::clock& clk, error e);

}  // namespace troupe::control
