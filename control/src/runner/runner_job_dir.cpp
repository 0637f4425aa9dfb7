// The job directory: a new one, or a resumed one after its runner died, with what that runner
// left cleaned up (orphan nodes, shared memory, Slurm jobs); the lock that keeps a second runner
// out; the runner's own log.
#include <signal.h>

#include <filesystem>
#include <fstream>

#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include "model_copy.hpp"
#include "runner.hpp"
#include "troupe/cluster/errc.hpp"
#include "troupe/cluster/own_path.hpp"
#include "troupe/cluster/process.hpp"
#include "troupe/collective/cleanup.hpp"
#include "troupe/core/log.hpp"
#include "troupe/job/job_check.hpp"
#include "troupe/model/state.hpp"
#include "troupe/storage/task_journal.hpp"

namespace troupe::control {

// What the launcher knows of the job: a batch backend records the jobs it submits in the job dir.
cluster::launch_site launch_site_of(const cluster::job_dir& dir) {
  return {dir.job_id(), dir.path() + "/slurm_jobs"};
}

namespace {

// SIGKILLs the process group of a node a dead runner left running (PR_SET_PDEATHSIG normally
// takes them down with it; a node between fork and prctl, or one whose parent was not the runner,
// can survive) and waits (up to 5 s on `clk`) until it is gone. The pid counts only with its recorded
// start time (an unknown one may be another process's pid by now).
void kill_orphan(const cluster::node_record& n, troupe::clock& clk) {
  if (cluster::liveness_of(n) != cluster::node_liveness::runs) return;
  auto st = cluster::read_process_stat(n.pid);
  spdlog::warn("{} (pid {}) outlived its runner: killing it", n.id.to_string(), n.pid);
  ::kill(st && st->pgid == n.pid ? -n.pid : n.pid, SIGKILL);
  // Not a child of this process (its parent, the dead runner, is gone): no exit report comes, so
  // its /proc entry is polled, every 10 ms through the clock, for 5 s at most.
  auto deadline = clk.now() + std::chrono::seconds(5);
  while (cluster::process_alive(n.pid, n.start_time) && clk.now() < deadline)
    clk.sleep_for(std::chrono::milliseconds(10));
}

// A job id whose directory would be (or hold) the dataset cache, or one of the cache's default
// names (datasets, datasets-<uid>): the job's files would land among the cached datasets (and a
// cache cleanup would take the job); or the servers' state directory's (serve, serve-<uid>).
expected<void> check_job_id(const std::string& id, const job::job_spec& spec) {
  namespace fs = std::filesystem;
  auto norm = [](const fs::path& p) {
    std::error_code ec;
    auto n = fs::weakly_canonical(fs::absolute(p, ec), ec).lexically_normal();
    return n.has_filename() ? n : n.parent_path();
  };
  const auto job = norm(fs::path(spec.job.root) / id), cache = norm(spec.job.dataset_cache);
  const auto [c, j] = std::mismatch(cache.begin(), cache.end(), job.begin(), job.end());
  if (cluster::is_own_subdir_name(id, "datasets") || c == cache.end() || j == job.end())
    return make_unexpected(core_errc::invalid_argument,
                           "job id '" + id + "': reserved (" + (fs::path(spec.job.root) / id).string() +
                               " is, holds or lies in the dataset cache " + spec.job.dataset_cache + ")");
  if (cluster::is_own_subdir_name(id, "serve"))
    return make_unexpected(core_errc::invalid_argument,
                           "job id '" + id + "': reserved (" + (fs::path(spec.job.root) / id).string() +
                               " is where `troupe serve` keeps its servers' state)");
  return {};
}
}  // namespace

// Holds runner.lock for the runner's life: a held lock means a live runner, a free one a job that
// may be resumed.
int runner::lock_job_dir() {
  auto fd = dir_->lock_runner();
  if (!fd && fd.err() == cluster::cluster_errc::already_exists)
    return usage_refusal(fd.err().describe() + " (stop it first: troupe stop --job-dir " + dir_->path() + ")",
                         1);
  if (!fd) return usage_refusal(fd.err().describe(), 1);  // removed as it started (jobs prune), unreadable
  lock_fd_ = *fd;
  return 0;
}

// What a runner that died (SIGKILL, OOM, power) left of this job: nodes that outlived it and its
// instance's shared memory (rings, liveness beacons).
void runner::clean_dead_runner(const cluster::job_dir& dir) {
  auto old = dir.read_nodes();
  std::error_code ec;
  // Damaged (it went on silently: the dead runner's nodes unchecked, worker names from worker-0).
  if (!old && std::filesystem::exists(dir.nodes_path(), ec))
    spdlog::warn(
        "{}: cannot be read ({}): the dead runner's nodes cannot be checked (stop any that run: their pids "
        "are in its logs/runner.log) and the workers' names start again from worker-0",
        dir.nodes_path(), old.err().to_string());
  if (old) {
    for (const auto& n : old->nodes) kill_orphan(n, clock_);
    slots_.resume_after(*old);  // new ids: incarnations and worker indices after the dead runner's
    // A job scaled while it ran (troupe scale) resumes at that size, not at its job file's, unless
    // --workers says otherwise.
    if (old->workers > 0 && !opt_.workers && old->workers != slots_.target()) {
      spdlog::info(
          "the job was scaled to {} workers (its job file says {}): it resumes with {} (--workers to choose)",
          old->workers, spec_.job.workers, old->workers);
      slots_.set_target(old->workers);
    }
  }
  if (auto old = dir.read_instance(); !old.empty()) {
    if (const auto n = collective::remove_job_leftovers(collective::instance_key(dir.job_id(), old)); n > 0)
      spdlog::info("removed what instance {} of job {} left in shared memory ({} names in /dev/shm)", old,
                   dir.job_id(), n);
  }
  // Nodes on a batch cluster outlive their runner (no death signal reaches them): cancel them.
  auto n = cluster::cancel_leftovers(spec_.cluster, launch_site_of(dir));
  if (!n)
    spdlog::warn("could not cancel the Slurm jobs the dead runner left: {}", n.err().to_string());
  else if (*n > 0)
    spdlog::info("cancelled {} Slurm job(s) the dead runner left", *n);
}

namespace {
// How the run a --resume continues ended: its result.json's status; "dead" where it left none (or
// only its master's, without the runner's status): its runner died.
std::string earlier_run_end(const cluster::job_dir& dir) {
  std::ifstream in(dir.result_path());
  auto j = nlohmann::json::parse(in, nullptr, false);
  if (j.is_object() && j.contains("status") && j["status"].is_string()) return j["status"].get<std::string>();
  return "dead";
}
}  // namespace

bool finished_job(const std::string& path) {
  std::ifstream in(path);
  auto j = nlohmann::json::parse(in, nullptr, false);
  return j.is_object() && j.value("status", "") == "finished";
}

namespace {

// A job that ended before it launched any node (refused by the launcher: a partition Slurm lacks,
// the controller down): result.json written, no nodes.json, no task journal. Nothing in it can be
// resumed (--resume would read the same refused job file again), so a new run of its id replaces it.
bool never_started(const std::string& path) {
  std::error_code ec;
  return std::filesystem::exists(path + "/result.json", ec) &&
         !std::filesystem::exists(path + "/nodes.json", ec) &&
         !std::filesystem::exists(path + "/journal/data.mdb", ec);
}
}  // namespace

// A resumed job's directory, unless the job finished.
int runner::open_resumed_dir() {
  std::string path = opt_.resume;
  make_absolute(path);
  auto dir = cluster::job_dir::open(path);
  if (!dir) return usage_refusal("--resume " + dir.err().context());
  if (finished_job(dir->result_path()))
    return usage_refusal("--resume " + dir->path() + ": the job finished (see " + dir->result_path() +
                         "): nothing to resume");
  dir_.emplace(std::move(*dir));
  return 0;
}

// The job directory's copy of the job file. The nodes read it: a module path relative to the job
// file would be relative to that copy, so the resolved (absolute) path goes in. A token written in
// the file is no job's (each makes its own, <dir>/token, owner-only): the copy, which every user may
// read, does not keep it.
expected<config_doc> runner::stored_copy(const config_doc& doc) const {
  config_doc stored = doc;
  for (const auto& [key, value] :
       {std::pair{"model.path", &spec_.nn.model.path}, std::pair{"model.init", &spec_.nn.model.init}})
    if (!value->empty())
      if (auto o = stored.apply_override(std::string(key) + "=\"" + *value + "\""); !o) return o.err();
  if (config_reader(doc).section("transport").get_string("token", "").empty()) return stored;
  spdlog::warn(
      "[transport] token: not used by a job (each job makes its own, owner-only: <job dir>/token); "
      "left out of the job directory's copy of the file");
  if (auto o = stored.apply_override("transport.token=\"\""); !o) return o.err();
  return stored;
}

// Why a new job's directory could not be made. A bad or taken --job-id is bad usage (exit 2), a
// directory that cannot be made is not; a finished job has nothing to continue (another id then),
// a running one is running.
int runner::dir_refusal(const error& err, const std::string& path) {
  const bool taken = err == cluster::cluster_errc::already_exists;
  const bool finished = finished_job(path + "/result.json");
  auto other = taken ? cluster::job_dir::open(path) : expected<cluster::job_dir>(err);
  const auto running = other ? other->runner_pid() : std::nullopt;
  return usage_refusal(
      err.describe() + (!taken    ? std::string()
                        : running ? " (it is running, runner pid " + std::to_string(*running) +
                                        ": troupe status --job-dir " + path + ")"
                        : finished ? " (that job finished: give another --job-id)"
                                   : " (continue it with: troupe run --resume " + path + ")"),
      taken || err == cluster::cluster_errc::invalid_spec ? 2 : 1);
}

// A new job's directory, with the job file as it was resolved (and a TorchScript job's module).
int runner::create_job_dir(const config_doc& doc) {
  {
    if (auto why = job::name_problem(spec_.job.name); opt_.job_id.empty() && !why.empty())
      return refuse("job.name '" + spec_.job.name + "': " + why + " (or give --job-id)");
    std::string id = opt_.job_id.empty() ? default_job_id(spec_.job.name) : opt_.job_id;
    if (auto c = check_job_id(id, spec_); !c) return usage_refusal(c.err().describe());
    const std::string path = spec_.job.root + "/" + id;
    const std::string user_model = spec_.nn.model.path, copy_name = model_copy_name(spec_);
    if (!copy_name.empty())
      spec_.nn.model.path = std::filesystem::absolute(path + "/" + copy_name).lexically_normal().string();
    auto stored = stored_copy(doc);
    if (!stored) return usage_refusal(stored.err().describe());
    if (auto c = ps_checkpoints_free(path); !c.empty()) return refuse(c);
    if (never_started(path)) {
      spdlog::warn("{}: replacing the directory of a job of this id that never started a node", path);
      std::error_code ec;
      std::filesystem::remove_all(path, ec);
    }
    auto dir = cluster::job_dir::create(spec_.job.root, id, stored->to_toml());
    if (!dir) return dir_refusal(dir.err(), path);
    dir_.emplace(std::move(*dir));
    if (!copy_name.empty())
      if (auto c = copy_model(spec_, user_model, spec_.nn.model.path); !c) {
        dir_.reset();
        std::error_code ec;
        std::filesystem::remove_all(path, ec);  // nothing of the job's yet
        return setup_failed(c.err(), 1);
      }
  }
  // The new job's own: its shards write there, not to an earlier layout's <checkpoint_dir>/ps-<i>.
  std::error_code ec;
  if (spec_.uses_ps() && !spec_.ps.checkpoint_dir.empty())
    std::filesystem::create_directories(spec_.ps.own_checkpoints(dir_->path()), ec);
  return 0;
}

// A new job's checkpoints under [ps] checkpoint_dir (<dir>/<job id>) must be its own: a directory of
// this id holding an earlier job's (its job directory removed, the id given again) would be restored
// as if the new job had written it. "" when free; else why not.
std::string runner::ps_checkpoints_free(const std::string& job_path) const {
  if (!spec_.uses_ps() || spec_.ps.checkpoint_dir.empty()) return "";
  std::error_code ec;
  if (std::filesystem::exists(job_path, ec)) return "";  // the id is taken: said as such
  const auto mine = spec_.ps.own_checkpoints(job_path);
  if (!std::filesystem::is_directory(mine, ec) || std::filesystem::is_empty(mine, ec)) return "";
  return "ps.checkpoint_dir: " + mine +
         " holds the checkpoints of an earlier job of this id (its job directory is "
         "gone): remove them, or give another --job-id";
}

int runner::open_job_dir(const config_doc& doc) {
  if (int rc = opt_.resume.empty() ? create_job_dir(doc) : open_resumed_dir(); rc != 0) return rc;
  if (int rc = lock_job_dir(); rc != 0) return rc;
  start_log();
  say_setup_warnings();
  timeline_.open(dir_->path());
  if (!opt_.resume.empty()) {
    resumed_from_ = earlier_run_end(*dir_);
    spdlog::info("resuming job {} in {} (its earlier run: {})", dir_->job_id(), dir_->path(),
                 resumed_from_ == "dead" ? "its runner died" : resumed_from_);
    clean_dead_runner(*dir_);
  }
  std::error_code ec;
  std::filesystem::remove(cluster::stop_request_path(dir_->path()), ec);  // an earlier run's
  instance_ = random_hex(4);
  if (auto w = dir_->write_instance(instance_); !w) return spdlog::error("{}", w.err().to_string()), 1;
  shm_sweep_ = std::jthread(sweep_killed_jobs_shm);
  return 0;
}

// Jobs killed whole (the runner too: SIGKILL, the OOM killer, a machine's test timeout) leave their
// rings and beacons in /dev/shm, nothing cleans them, and they add up: 11,740 names, 17 GB, after
// two killed jobs of many workers, and the next job's workers died of SIGBUS, /dev/shm full. Swept
// as a run begins, a killed instance of 256 MB or more (any when /dev/shm is 3/4 full), off the
// runner's path (a walk of /proc); only instances no process on this host holds, unchanged for 2
// minutes (collective::sweep_orphaned_shm; `troupe jobs prune` sweeps whatever their size).
void runner::sweep_killed_jobs_shm() {
  const auto swept =
      collective::sweep_orphaned_shm(std::chrono::minutes(2), false, std::uintmax_t{256} << 20);
  if (swept.instances.empty()) return;
  std::string which;
  for (const auto& k : swept.instances) which += (which.empty() ? "" : ", ") + k;
  spdlog::info("removed {} /dev/shm names ({:.1f} MB) of {} killed job instance(s) no process holds: {}",
               swept.names, static_cast<double>(swept.bytes) / 1e6, swept.instances.size(), which);
}

int runner::begin_resumed_run() {
  if (opt_.resume.empty()) return 0;
  resume_begun_ = true;
  std::error_code ec;
  std::filesystem::remove(dir_->result_path(), ec);  // the resumed run writes its own
  return reopen_tasks();
}

int runner::reopen_tasks() {
  auto journal = storage::task_journal::open(dir_->journal_dir());
  if (!journal) {
    if (journal.err() == storage::storage_errc::not_found)
      return 0;  // the master never made it: nothing done
    return spdlog::error("--resume {}: the task journal: {}", dir_->path(), journal.err().to_string()), 1;
  }
  auto failed = journal->reopen(storage::task_state::failed);
  if (!failed) return spdlog::error("--resume {}: {}", dir_->path(), failed.err().to_string()), 1;
  reopened_failed_ = *failed;
  if (reopened_failed_ > 0)
    spdlog::warn("--resume {}: {} quarantined task(s) are tried again, with {} attempts each", dir_->path(),
                 reopened_failed_, spec_.job.max_task_failures);
  // Ring strategies resume from the ring's latest checkpoint (the first ring of the resumed job finds
  // no trained replica and starts from it: replicas::restore_if_untrained). Without one, what the
  // DONE tasks taught lived only in the replicas: they are trained again.
  std::error_code ec;
  if (spec_.uses_ps() || !spec_.traits().trains) return 0;
  if (std::filesystem::exists(dir_->path() + "/checkpoints/ring/state.json", ec))
    return reopen_after_checkpoint(*journal);
  auto done = journal->reopen(storage::task_state::done);
  if (!done) return spdlog::error("--resume {}: {}", dir_->path(), done.err().to_string()), 1;
  // Likewise the rows of partly trained tasks that workers handed back as they left.
  if (auto f = journal->forget_trained(); !f)
    return spdlog::error("--resume {}: {}", dir_->path(), f.err().to_string()), 1;
  reopened_done_ = *done;
  if (reopened_done_ > 0)
    spdlog::warn(
        "--resume {}: no ring checkpoint was written (job.checkpoint_every_ms = {}): what the {} DONE "
        "task(s) taught was lost with the replicas, so they are trained again",
        dir_->path(), spec_.job.checkpoint_every.count(), reopened_done_);
  return 0;
}

// What a ring job's replicas applied after its latest checkpoint was lost with them: the tasks whose
// workers reported their rows applied at a later step (TaskReport.step, allreduce's) are trained
// again, done ones and the rows kept of partly trained ones; those of an unknown step stay.
int runner::reopen_after_checkpoint(storage::task_journal& journal) {
  const std::string dir = dir_->path() + "/checkpoints/ring";
  auto s = model::read_state_or_older(dir);
  if (!s)
    return spdlog::error("--resume {}: the ring's checkpoint: {}", dir_->path(), s.err().to_string()), 1;
  if (!*s) return 0;
  const std::uint64_t step = model::held_steps(**s);
  auto r = journal.reopen_after(step);
  if (!r) return spdlog::error("--resume {}: {}", dir_->path(), r.err().to_string()), 1;
  reopened_done_ = r->done;
  if (r->done + r->trained > 0)
    spdlog::warn(
        "--resume {}: the ring's latest checkpoint holds the replicas' first {} steps; what later steps "
        "applied was lost with the replicas: {} DONE task(s) are trained again, and {} partly trained "
        "task(s) from their first row",
        dir_->path(), step, r->done, r->trained);
  else
    spdlog::info("--resume {}: the ring's latest checkpoint (step {}) holds every task done", dir_->path(),
                 step);
  return 0;
}

// The runner's log goes to logs/runner.log as well as stderr (unless [log] stderr = false), at the
// level the CLI set. With quiet_log (`predict --quiet`, which set warn for its own lines before it)
// the file keeps info and stderr has only warnings and errors.
void runner::start_log() {
  log_config lc;
  const auto level = spdlog::get_level();
  lc.level = level == spdlog::level::warn ? "warn" : std::string(spdlog::level::to_string_view(level).data());
  lc.to_stderr = spec_.log.to_stderr;
  if (opt_.quiet_log && level == spdlog::level::warn) lc.level = "info", lc.stderr_level = "warn";
  lc.file = dir_->logs_dir() + "/runner.log";
  lc.name = "runner";
  if (auto r = init_logging(lc); !r) spdlog::warn("{}", r.err().to_string());
}

void runner::say_setup_warnings() {
  for (const auto& w : setup_warnings_) spdlog::warn("{}", w);
  setup_warnings_.clear();
}

// A resumed job whose job.toml was edited since its task journal was made (epochs, the data, the
// task size): its master would refuse the journal and die over and over (the job failed after 11
// deaths, naming a supervisor's giving up); said here, before any node starts.
int runner::check_journal_matches() {
  if (opt_.resume.empty()) return 0;
  std::error_code ec;
  if (!std::filesystem::exists(dir_->journal_dir() + "/data.mdb", ec)) return 0;  // the master never made it
  // Damaged (a disk fault, a truncated file): said now, not after its master died 11 times.
  auto journal = storage::task_journal::open(dir_->journal_dir());
  auto counts = journal ? journal->counts() : expected<storage::task_counts>(journal.err());
  if (!counts)
    return setup_failed(
        error(counts.err().code(), "--resume " + dir_->path() +
                                       ": the task journal cannot be read: " + counts.err().to_string() +
                                       " (the job's progress is in it: restore it, or run a new job)"),
        1);
  auto store = storage::record_store::open(data_.train_dir);
  if (!store) return 0;  // the master names it
  const auto why = job::journal_mismatch(journal->options(),
                                         job::journal_options_of(spec_, data_.train_dir, store->count()));
  if (why.empty()) return 0;
  return refuse("--resume " + dir_->path() + ": its job.toml no longer matches the job's task journal: " +
                why + " (put job.toml back as it was, or run a new job)");
}

}  // namespace troupe::control
