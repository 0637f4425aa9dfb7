#include "job_harness.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

#include "run_command.hpp"
#include "troupe/cluster/job_dir.hpp"
#include "troupe/storage/task_journal.hpp"

namespace troupe::testing {

namespace fs = std::filesystem;

std::string mlp_job(const mlp_options& o) {
  std::string s = "strategy = \"" + o.strategy + "\"\nname = \"fm\"\nworkers = " + std::to_string(o.workers) +
                  "\nrecords_per_task = 500\n[model]\ntype = \"mlp\"\nhidden = [64]\n[train]\nepochs = " +
                  std::to_string(o.epochs) + "\nbatch_size = " + std::to_string(o.batch_size) +
                  "\noptimizer = \"adam\"\nlearning_rate = 0.002\n[data]\nsource = \"fashion-mnist\"\n";
  if (o.max_train_rows > 0) s += "max_train_rows = " + std::to_string(o.max_train_rows) + "\n";
  return s + "max_test_rows = " + std::to_string(o.max_test_rows) + "\n";
}

std::string ctr_job(int workers, int rows, int epochs, int checkpoint_every_ms,
                    const std::string& job_extra) {
  return "strategy = \"async_ps\"\nname = \"ctr\"\nworkers = " + std::to_string(workers) +
         "\nrecords_per_task = 1024\nmax_workers = 6\n" + job_extra +
         "[ps]\nshards = 2\ncheckpoint_every_ms = " + std::to_string(checkpoint_every_ms) +
         "\n[model]\ntype = \"deepfm\"\nembedding_dim = 8\nhidden = [32]\n[train]\nepochs = " +
         std::to_string(epochs) +
         "\nbatch_size = 128\noptimizer = \"adam\"\nlearning_rate = 0.01\n[data]\nsource = "
         "\"synthetic-ctr\"\n"
         "rows = " +
         std::to_string(rows) + "\ntest_rows = 10000\nfields = 6\nvocab_per_field = 50\n";
}

std::string test_root(const std::string& test_name) {
  auto p = fs::temp_directory_path() / ("troupe-job-test-" + std::to_string(::getpid())) / test_name;
  fs::remove_all(p);
  fs::create_directories(p);
  return p.string();
}

std::string dataset_cache() {
  auto p = fs::temp_directory_path() / "troupe-test-datasets";
  fs::create_directories(p);
  return p.string();
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

namespace {
// Forks `troupe <args>` with stdout and stderr into r's files (truncated).
void spawn(job_run& r, const std::vector<std::string>& args, const std::string& cwd = "") {
  r.exit_code.reset();
  r.pid = ::fork();
  if (r.pid == 0) {
    if (!cwd.empty() && ::chdir(cwd.c_str()) != 0) _exit(126);
    int out = ::open(r.out_file.c_str(), O_CREAT | O_WRONLY | O_TRUNC, 0644);
    int err = ::open(r.err_file.c_str(), O_CREAT | O_WRONLY | O_TRUNC, 0644);
    ::dup2(out, 1);
    ::dup2(err, 2);
    std::vector<char*> argv;
    argv.push_back(const_cast<char*>("troupe"));
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execv(r.binary.c_str(), argv.data());
    _exit(127);
  }
}
}  // namespace

job_run start_job(const std::string& test_name, const std::string& toml, const job_place& place) {
  job_run r;
  r.binary = place.binary;
  r.name = test_name;
  r.dir = test_root(test_name);
  std::string file = r.dir + "/job.toml";
  std::string root = place.root.empty() ? r.dir + "/jobs" : place.root;
  std::string cache = place.dataset_cache.empty() ? dataset_cache() : place.dataset_cache;
  std::ofstream(file) << "[job]\nroot = \"" << root << "\"\ndataset_cache = \"" << cache << "\"\n" << toml;
  std::string id = place.job_id.empty() ? test_name : place.job_id;
  r.job_dir = root + "/" + id;
  r.out_file = r.dir + "/stdout";
  r.err_file = r.dir + "/stderr";
  if (place.from_file_folder)
    spawn(r, {"run", "job.toml", "--job-id", id, "--quiet"}, r.dir);
  else
    spawn(r, {"run", file, "--job-id", id, "--quiet"});
  return r;
}

void resume_job(job_run& r) {
  r.out_file = r.dir + "/stdout.resumed";
  r.err_file = r.dir + "/stderr.resumed";
  spawn(r, {"run", "--resume", r.job_dir, "--quiet"});
}

bool exited(job_run& r) {
  if (r.exit_code) return true;
  int st = 0;
  if (::waitpid(r.pid, &st, WNOHANG) != r.pid) return false;
  r.exit_code = WIFEXITED(st) ? WEXITSTATUS(st) : -WTERMSIG(st);
  return true;
}

int wait_job(job_run& r, std::chrono::seconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (exited(r)) return *r.exit_code;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ::kill(r.pid, SIGKILL);
  ::waitpid(r.pid, nullptr, 0);
  r.pid = 0;
  return -1000;  // timed out
}

nlohmann::json result(const job_run& r) {
  std::istringstream in(read_file(r.out_file));
  std::string line, last;
  while (std::getline(in, line))
    if (!line.empty() && line[0] == '{') last = line;
  auto j = nlohmann::json::parse(last, nullptr, false);
  return j.is_discarded() ? nlohmann::json::object() : j;
}

int troupe(const std::string& args, std::string* out) {
  // stderr joins stdout unless the caller redirected it.
  auto r =
      test_util::run_troupe(args, args.find("2>") == std::string::npos ? test_util::stderr_mode::join
                                                                       : test_util::stderr_mode::as_given);
  if (out) *out = std::move(r.out);
  return r.code;
}

std::optional<nlohmann::json> status(const job_run& r) {
  std::string out;
  if (troupe("status --json --job-dir " + r.job_dir + " 2>/dev/null", &out) != 0) return std::nullopt;
  auto j = nlohmann::json::parse(out, nullptr, false);
  // A job still preparing has no nodes and no counts yet: its status is the state alone.
  if (j.is_discarded() || j.value("state", "") == "starting") return std::nullopt;
  return j;
}

std::optional<nlohmann::json> wait_status(job_run& r, const std::function<bool(const nlohmann::json&)>& pred,
                                          std::chrono::seconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline && !exited(r)) {
    if (auto s = status(r); s && pred(*s)) return s;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return std::nullopt;
}

pid_t node_pid(const job_run& r, const std::string& name) {
  auto dir = cluster::job_dir::open(r.job_dir);
  if (!dir) return 0;
  auto nodes = dir->read_nodes();
  if (!nodes) return 0;
  for (const auto& n : nodes->nodes)
    if (n.id.name == name && n.state != "exited") return n.pid;
  return 0;
}

bool no_processes_of(const job_run& r) {
  DIR* d = ::opendir("/proc");
  bool none = true;
  while (auto* e = ::readdir(d)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    std::string cmdline = read_file(std::string("/proc/") + e->d_name + "/cmdline");
    std::replace(cmdline.begin(), cmdline.end(), '\0', ' ');
    std::string stat = read_file(std::string("/proc/") + e->d_name + "/stat");
    auto close = stat.rfind(')');
    bool zombie = close != std::string::npos && close + 2 < stat.size() && stat[close + 2] == 'Z';
    if (!zombie && cmdline.find(r.job_dir) != std::string::npos) none = false;
  }
  ::closedir(d);
  return none;
}

void expect_all_done(const job_run& r) {
  auto j = storage::task_journal::open(r.job_dir + "/journal");
  ASSERT_TRUE(j) << j.err().to_string();
  auto c = j->counts();
  ASSERT_TRUE(c);
  EXPECT_GT(c->done, 0u);
  EXPECT_EQ(c->done, c->total()) << "todo " << c->todo << " doing " << c->doing << " failed " << c->failed;
}

std::map<std::uint64_t, std::uint32_t> done_attempts(const job_run& r) {
  std::map<std::uint64_t, std::uint32_t> m;
  auto j = storage::task_journal::open(r.job_dir + "/journal");
  EXPECT_TRUE(j);
  if (!j) return m;
  auto done = j->list(storage::task_state::done);
  EXPECT_TRUE(done);
  if (done)
    for (const auto& t : *done) m[t.id] = t.attempt;
  return m;
}

std::map<std::uint64_t, std::uint64_t> done_steps(const job_run& r) {
  std::map<std::uint64_t, std::uint64_t> m;
  auto j = storage::task_journal::open(r.job_dir + "/journal");
  if (!j) return m;
  if (auto done = j->list(storage::task_state::done))
    for (const auto& t : *done) m[t.id] = t.step;
  return m;
}

std::uint64_t ring_checkpoint_step(const job_run& r) {
  auto j = nlohmann::json::parse(read_file(r.job_dir + "/checkpoints/ring/state.json"), nullptr, false);
  return j.is_object() ? j.value("step", std::uint64_t{0}) : 0;
}

std::size_t done_after(const std::map<std::uint64_t, std::uint64_t>& done, std::uint64_t step) {
  return static_cast<std::size_t>(
      std::count_if(done.begin(), done.end(), [&](const auto& d) { return d.second > step; }));
}

std::string expect_trained_again_after(const job_run& r, const std::map<std::uint64_t, std::uint32_t>& before,
                                       const std::map<std::uint64_t, std::uint64_t>& steps,
                                       std::uint64_t kept_step) {
  auto after = done_attempts(r);
  for (const auto& [id, attempt] : before) {
    if (steps.at(id) > kept_step)
      EXPECT_GT(after[id], attempt) << "task " << id << " (step " << steps.at(id)
                                    << ") was not trained again";
    else
      EXPECT_EQ(after[id], attempt) << "task " << id << " (step " << steps.at(id) << ") trained again";
  }
  std::string logs;
  for (const auto& e : std::filesystem::directory_iterator(r.job_dir + "/logs"))
    logs += read_file(e.path().string());
  if (kept_step > 0) {
    EXPECT_NE(logs.find("starts from the ring's latest checkpoint"), std::string::npos);
  }
  return logs;
}

std::string kill_the_whole_ring(job_run& r, bool checkpointed, std::size_t tasks, std::uint64_t records) {
  using namespace std::chrono_literals;
  EXPECT_TRUE(wait_status(
      r,
      [&](const nlohmann::json& j) {
        return j["tasks"]["done"].get<std::uint64_t>() >= 12 &&
               (!checkpointed || std::filesystem::exists(r.job_dir + "/checkpoints/ring/state.json"));
      },
      180s))
      << read_file(r.err_file);
  // A few tasks done after the latest checkpoint (a checkpoint written meanwhile starts the count again).
  EXPECT_TRUE(poll_until([&] { return done_after(done_steps(r), ring_checkpoint_step(r)) >= 5; }, 60s));
  const pid_t w0 = node_pid(r, "worker-0"), w1 = node_pid(r, "worker-1");
  EXPECT_GT(w0, 0);
  EXPECT_GT(w1, 0);
  EXPECT_EQ(::kill(w0, SIGKILL), 0);
  EXPECT_EQ(::kill(w1, SIGKILL), 0);
  // What the kill lost, read at once (the new workers need far longer to start and form a ring).
  const auto before = done_attempts(r);
  const auto steps = done_steps(r);
  const std::uint64_t kept_step = ring_checkpoint_step(r);
  EXPECT_EQ(kept_step > 0, checkpointed);
  EXPECT_LT(before.size(), tasks) << "the job was over before the kill";
  for (const auto& [id, step] : steps) EXPECT_GT(step, 0u) << "task " << id << ": no step reported";
  const std::size_t lost = done_after(steps, kept_step);
  EXPECT_GT(lost, 0u) << "no task was done after the checkpoint of step " << kept_step;
  EXPECT_EQ(wait_job(r, 400s), 0) << read_file(r.err_file);
  expect_all_done(r);
  const std::string logs = expect_trained_again_after(r, before, steps, kept_step);
  auto res = result(r);
  EXPECT_EQ(res.value("records_done", 0ull), records) << res.dump();
  // The console says it once (JobStatus.notice), not only master.log: the task count falls.
  const std::string console = read_file(r.out_file) + read_file(r.err_file);
  const auto said = console.find("[runner] the ring starts again from ");
  EXPECT_NE(said, std::string::npos) << console;
  EXPECT_EQ(console.find("[runner] the ring starts again from ", said + 1), std::string::npos) << console;
  EXPECT_NE(console.find("DONE task(s) are trained again"), std::string::npos) << console;
  std::printf("at the kill: %zu of %zu tasks done; the ring checkpoint at step %llu; %zu done after it\n",
              before.size(), tasks, static_cast<unsigned long long>(kept_step), lost);
  EXPECT_TRUE(no_processes_of(r));
  return logs;
}

bool poll_until(const std::function<bool()>& pred, std::chrono::seconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

}  // namespace troupe::testing
