// Runs real `troupe run` jobs for tests: writes a job file, starts the runner as a child process,
// polls `troupe status --json`, finds node pids in nodes.json, waits for the final JSON line.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace troupe::testing {

struct job_run {
  std::string name, dir, job_dir, out_file, err_file;
  std::string binary = TROUPE_BIN;  // the troupe the runner is started from
  pid_t pid = 0;
  std::optional<int> exit_code;  // once the runner has been reaped
};

// Reaps the runner if it has exited (without blocking); true once it has.
bool exited(job_run& r);

// A fresh directory for this test's jobs; datasets are cached across tests in a shared directory.
std::string test_root(const std::string& test_name);
std::string dataset_cache();

// The job files the job and chaos tests share (the [job] section's body onwards, without root and
// dataset_cache). An MLP on Fashion-MNIST (784-64-10, Adam):
struct mlp_options {
  std::string strategy = "allreduce";
  int workers = 2, epochs = 2, batch_size = 64;
  int max_train_rows = 0;  // 0: all 60000
  int max_test_rows = 2000;
};
std::string mlp_job(const mlp_options& o);
// DeepFM on synthetic CTR data with async PS over 2 shards; `job_extra` goes into [job].
std::string ctr_job(int workers, int rows, int epochs, int checkpoint_every_ms = 300,
                    const std::string& job_extra = "");

// Where a job's directory and its dataset cache go (empty: the test's root, the shared cache), and
// its job id (empty: the test name).
struct job_place {
  std::string root, dataset_cache, job_id;
  // Run as a user in the job file's folder does: `troupe run job.toml` from there.
  bool from_file_folder = false;
  std::string binary = TROUPE_BIN;  // another copy of troupe to start the runner from
};
// Writes `toml` (with [job] root/dataset_cache filled in by the caller's text) and starts the runner.
job_run start_job(const std::string& test_name, const std::string& toml, const job_place& place = {});
// Starts `troupe run --resume` on r's job directory (output into <dir>/stdout.resumed, stderr.resumed).
void resume_job(job_run& r);
// Waits for the runner to exit; its exit code (or -signal).
int wait_job(job_run& r, std::chrono::seconds timeout);
// The runner's final JSON line (empty object when there is none).
nlohmann::json result(const job_run& r);
// `troupe status --json` of the running job; nullopt while it does not answer.
std::optional<nlohmann::json> status(const job_run& r);
// Polls status until pred(status), the runner exits, or timeout.
std::optional<nlohmann::json> wait_status(job_run& r, const std::function<bool(const nlohmann::json&)>& pred,
                                          std::chrono::seconds timeout);
// The pid of node `name` from nodes.json (0 when not running).
pid_t node_pid(const job_run& r, const std::string& name);
// Runs `troupe ARGS`, returns the exit code; output into `out`.
int troupe(const std::string& args, std::string* out = nullptr);
std::string read_file(const std::string& path);
// True if no process whose command line mentions the job directory is alive (no orphans).
bool no_processes_of(const job_run& r);
// Test assertions (gtest): the job's journal has every task DONE, and at least one.
void expect_all_done(const job_run& r);
// Task id -> lease attempt of every DONE task in the job's journal.
std::map<std::uint64_t, std::uint32_t> done_attempts(const job_run& r);
// Polls `pred` every 10 ms until it holds (true) or `timeout` has passed (false).
bool poll_until(const std::function<bool()>& pred, std::chrono::seconds timeout);

// A ring job's durability (docs/job.md, "A ring that lost every replica"): the DONE tasks of its
// journal, each with the replica step its rows were applied at (0: not known); the step of the
// ring's latest checkpoint (its state.json's: what a restored replica starts again from; 0: none);
// how many of `done` are of a later step than `step`.
std::map<std::uint64_t, std::uint64_t> done_steps(const job_run& r);
std::uint64_t ring_checkpoint_step(const job_run& r);
std::size_t done_after(const std::map<std::uint64_t, std::uint64_t>& done, std::uint64_t step);
// The tasks DONE at a kill (`before`: their attempts; `steps`: the step that applied their rows) are
// trained again (a later attempt DONE now) exactly when their step is after the checkpoint's that the
// replicas started again from; the logs say the ring started from it. Returns the job's logs.
std::string expect_trained_again_after(const job_run& r, const std::map<std::uint64_t, std::uint32_t>& before,
                                       const std::map<std::uint64_t, std::uint64_t>& steps,
                                       std::uint64_t kept_step);
// Every worker of the allreduce job `r` (worker-0 and worker-1) SIGKILLed at once while its runner
// lives, once 12 tasks are done (`checkpointed`: and the ring's first checkpoint written) and 5 after
// the latest checkpoint; then the job runs to its end. The runner's new workers find no trained
// replica and the ring starts again from its checkpoint (its initial weights without one): the DONE
// tasks of a later step are trained again, no other (each task reported a step), every record of
// the job (`records`, in `tasks` tasks) is counted once, and the console says it once. Returns the
// job's logs. Before 2026-12-06 those tasks stayed done while the runner lived (on the GPU path until
// 2026-12-07): their rows were in no model.
std::string kill_the_whole_ring(job_run& r, bool checkpointed, std::size_t tasks, std::uint64_t records);

}  // namespace troupe::testing
