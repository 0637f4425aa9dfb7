#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <thread>

#include "disk_faults.hpp"
#include "test_util.hpp"
#include "troupe/cluster/errc.hpp"
#include "troupe/cluster/job_dir.hpp"

namespace troupe::cluster {
namespace {

using testing::temp_dir;
namespace fs = std::filesystem;

// Field by field: g++ 12 -O3 warns (falsely, -Wmaybe-uninitialized) on nested brace initialisation.
node_record record(const char* name, std::uint64_t inc, node_role role, int pid, std::uint64_t start,
                   const char* address, const char* state) {
  node_record r;
  r.id.name = name;
  r.id.incarnation = inc;
  r.role = role;
  r.pid = pid;
  r.start_time = start;
  r.address = address;
  r.state = state;
  return r;
}

nodes_file sample() {
  nodes_file f;
  f.job_id = "0123456789abcdef";
  f.epoch = 7;
  f.updated_ms = 1'700'000'000'123;
  f.runner_address = "127.0.0.1:7000";
  f.nodes.push_back(record("master", 0, node_role::master, 100, 555, "127.0.0.1:7000", "alive"));
  f.nodes.push_back(record("worker-3", 2, node_role::worker, 103, 777, "", "launching"));
  f.nodes.push_back(record("worker-1", 0, node_role::worker, 0, 0, "", "exited"));
  f.nodes.back().exit = "killed by SIGKILL";
  f.nodes.push_back(record("worker-4", 1, node_role::worker, 0, 0, "", "alive"));
  f.nodes.back().slurm_job = 4242;  // a node the Slurm launcher runs: its job, no local pid
  return f;
}

void write(const std::string& path, const std::string& text) {
  std::ofstream(path) << text;
}

TEST(job_dir, create_lays_out_the_directory) {
  temp_dir root;
  auto d = job_dir::create(root / "jobs", "0123456789abcdef", "[job]\nname = \"t\"\n");
  ASSERT_TRUE(d) << d.err().to_string();
  EXPECT_EQ(d->path(), root / "jobs/0123456789abcdef");
  for (auto sub : {"logs", "journal", "checkpoints"})
    EXPECT_TRUE(fs::is_directory(d->path() + "/" + sub)) << sub;
  EXPECT_EQ(d->log_path("worker-3"), d->path() + "/logs/worker-3.log");
  auto toml = d->read_job_toml();
  ASSERT_TRUE(toml);
  EXPECT_EQ(*toml, "[job]\nname = \"t\"\n");
  auto again = job_dir::create(root / "jobs", "0123456789abcdef", "");
  ASSERT_FALSE(again);
  EXPECT_EQ(again.err(), cluster_errc::already_exists);
  auto bad = job_dir::create(root / "jobs", "../escape", "");
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.err(), cluster_errc::invalid_spec);
}

// Opened through its descriptor (the dashboard's /proc/self/fd/N), a job directory is named by what
// it holds: the dashboard's stop of a dead job said "job 9 is not running" and looked for its
// /dev/shm names under "9".
TEST(job_dir, one_opened_through_its_descriptor_keeps_its_id) {
  temp_dir root;
  auto d = job_dir::create(root / "jobs", "held-job", "[job]\n");
  ASSERT_TRUE(d) << d.err().to_string();
  const int fd = ::open(d->path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  auto held = job_dir::open("/proc/self/fd/" + std::to_string(fd));
  ASSERT_TRUE(held) << held.err().to_string();
  EXPECT_EQ(held->job_id(), "held-job");
  ::close(fd);
}

TEST(job_dir, nodes_round_trip) {
  temp_dir root;
  auto d = job_dir::create(root.str(), "job-1", "");
  ASSERT_TRUE(d);
  ASSERT_TRUE(d->write_nodes(sample()));
  auto opened = job_dir::open(d->path() + "/");
  ASSERT_TRUE(opened) << opened.err().to_string();
  EXPECT_EQ(opened->job_id(), "job-1");
  auto back = opened->read_nodes();
  ASSERT_TRUE(back) << back.err().to_string();
  EXPECT_EQ(*back, sample());
  // A rewrite replaces the file and leaves no temporary behind.
  auto f = sample();
  f.epoch = 8;
  ASSERT_TRUE(d->write_nodes(f));
  EXPECT_EQ(d->read_nodes()->epoch, 8u);
  std::size_t files = 0;
  for (auto& e : fs::directory_iterator(d->path())) files += e.is_regular_file() ? 1 : 0;
  EXPECT_EQ(files, 2u);  // job.toml, nodes.json
}

// nodes.json written before runner_address had its name: the runner's address under master_address.
TEST(job_dir, an_older_file_s_master_address_is_the_runner_s) {
  temp_dir root;
  auto d = job_dir::create(root.str(), "job-1", "");
  ASSERT_TRUE(d);
  auto text = to_json(sample());
  const std::string key = "\"runner_address\"";
  text.replace(text.find(key), key.size(), "\"master_address\"");
  write(d->nodes_path(), text);
  auto back = d->read_nodes();
  ASSERT_TRUE(back) << back.err().to_string();
  EXPECT_EQ(back->runner_address, "127.0.0.1:7000");
  EXPECT_EQ(*back, sample());
}

TEST(job_dir, the_instance_is_kept) {
  temp_dir root;
  auto d = job_dir::create(root.str(), "job-1", "");
  ASSERT_TRUE(d);
  EXPECT_EQ(d->read_instance(), "");
  ASSERT_TRUE(d->write_instance("5c32a19a"));
  EXPECT_EQ(job_dir::open(d->path())->read_instance(), "5c32a19a");
}

// A child process holding `d`'s runner lock (as a runner, or a prune deciding, does) until killed;
// its pid, or -1 when it could not take the lock.
pid_t lock_holder(const job_dir& d) {
  int ready[2];
  if (::pipe(ready) != 0) return -1;
  pid_t child = ::fork();
  if (child == 0) {
    char c = d.lock_runner() ? 'y' : 'n';
    (void)!::write(ready[1], &c, 1);
    ::pause();
    _exit(0);
  }
  char c = 0;
  const bool took = ::read(ready[0], &c, 1) == 1 && c == 'y';
  ::close(ready[0]);
  ::close(ready[1]);
  return took ? child : -1;
}

// One runner at a time: the lock names its holder, and the kernel releases it when the holder dies
// (SIGKILL included), so a free lock means no live runner.
TEST(job_dir, the_runner_lock_names_its_holder_and_dies_with_it) {
  temp_dir root;
  auto d = job_dir::create(root.str(), "job-1", "");
  ASSERT_TRUE(d);
  EXPECT_FALSE(d->runner_pid());
  const pid_t child = lock_holder(*d);
  ASSERT_GT(child, 0);
  EXPECT_EQ(d->runner_pid(), child);
  auto second = d->lock_runner();
  ASSERT_FALSE(second);
  EXPECT_EQ(second.err(), cluster_errc::already_exists);
  EXPECT_NE(second.err().to_string().find(std::to_string(child)), std::string::npos)
      << second.err().to_string();
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  EXPECT_FALSE(d->runner_pid());
  auto mine = d->lock_runner();
  ASSERT_TRUE(mine) << mine.err().to_string();
  ::close(*mine);
}

// jobs prune removes a job's directory only while it holds the runner lock: never under a live
// runner, and a runner waiting on the lock as the directory goes stops, naming why, rather than start
// in a directory being removed (`troupe run --resume` racing a prune lost its directory mid-start).
TEST(job_dir, a_job_is_removed_only_under_its_runner_lock_and_a_waiting_runner_stops) {
  temp_dir root;
  auto d = job_dir::create(root.str(), "job-1", "");
  ASSERT_TRUE(d);
  auto no = d->remove_unless_running([] { return false; });
  ASSERT_TRUE(no) << no.err().to_string();
  EXPECT_FALSE(*no);
  EXPECT_TRUE(fs::exists(d->job_toml_path()));
  const pid_t child = lock_holder(*d);
  ASSERT_GT(child, 0);
  bool asked = false;
  auto held = d->remove_unless_running([&] { return asked = true; });
  ASSERT_TRUE(held) << held.err().to_string();
  EXPECT_FALSE(*held);
  EXPECT_FALSE(asked);
  EXPECT_TRUE(fs::exists(d->job_toml_path()));
  // A runner waits for the lock; the holder sets the directory aside and lets go.
  std::optional<expected<int>> waited;
  std::thread runner([&] { waited = d->lock_runner(); });
  std::this_thread::sleep_for(std::chrono::milliseconds(60));
  fs::rename(d->path(), root / ".aside");
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  runner.join();
  ASSERT_FALSE(*waited);
  EXPECT_EQ(waited->err(), cluster_errc::missing_file);
  EXPECT_NE(waited->err().to_string().find("was removed as its runner started"), std::string::npos)
      << waited->err().to_string();
  fs::rename(root / ".aside", d->path());
  EXPECT_EQ(*job_dir::list(root.str()), std::vector<std::string>{"job-1"});
  auto gone = d->remove_unless_running([] { return true; });
  ASSERT_TRUE(gone) << gone.err().to_string();
  EXPECT_TRUE(*gone);
  EXPECT_TRUE(fs::is_empty(root.str())) << "the set-aside directory was left";
  EXPECT_TRUE(job_dir::left_by_dead_remover(".removing-job-1-999999999"));
  EXPECT_FALSE(job_dir::left_by_dead_remover(".removing-job-1-" + std::to_string(::getpid())));
  EXPECT_FALSE(job_dir::left_by_dead_remover("job-1-999999999"));
}

TEST(job_dir, missing_parts_are_named) {
  temp_dir root;
  auto none = job_dir::open(root / "nope");
  ASSERT_FALSE(none);
  EXPECT_EQ(none.err(), cluster_errc::missing_file);
  EXPECT_NE(none.err().to_string().find("nope"), std::string::npos);
  auto d = job_dir::create(root.str(), "job-1", "");
  ASSERT_TRUE(d);
  auto nodes = d->read_nodes();
  ASSERT_FALSE(nodes);
  EXPECT_EQ(nodes.err(), cluster_errc::missing_file);
  EXPECT_NE(nodes.err().to_string().find("nodes.json"), std::string::npos);
  fs::remove_all(d->journal_dir());
  auto o = job_dir::open(d->path());
  ASSERT_FALSE(o);
  EXPECT_NE(o.err().to_string().find("journal"), std::string::npos) << o.err().to_string();
  fs::remove(d->job_toml_path());
  o = job_dir::open(d->path());
  ASSERT_FALSE(o);
  EXPECT_NE(o.err().to_string().find("job.toml"), std::string::npos) << o.err().to_string();
}

TEST(job_dir, corrupt_nodes_files_get_clear_errors) {
  temp_dir root;
  auto d = job_dir::create(root.str(), "job-1", "");
  ASSERT_TRUE(d);
  auto good = to_json(sample());
  auto replace = [&](const std::string& from, const std::string& to) {
    auto t = good;
    auto at = t.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    return t.replace(at, from.size(), to);
  };
  struct bad_case {
    std::string text;
    std::string expect;
  };
  std::vector<bad_case> cases = {
      {"", "not valid JSON"},
      {good.substr(0, good.size() / 2), "not valid JSON"},
      {"[1, 2]", "not an object"},
      {replace("\"format\": 1", "\"format\": 9"), "format 9 is not supported"},
      {replace("\"epoch\": 7", "\"epoch\": \"seven\""), "field 'epoch' has the wrong type"},
      {replace("\"runner_address\"", "\"runner\""), "missing field 'runner_address'"},
      {replace("\"role\": \"worker\"", "\"role\": \"chief\""), "nodes[1]: role 'chief'"},
      {replace("\"name\": \"master\"", "\"name\": \"Master!\""), "nodes[0]: bad node name"},
      {replace("\"pid\": 103", "\"pid\": -5"), "nodes[1]: pid out of range"},
      {replace("\"nodes\"", "\"nodez\""), "missing array 'nodes'"},
  };
  for (const auto& c : cases) {
    write(d->nodes_path(), c.text);
    auto r = d->read_nodes();
    ASSERT_FALSE(r) << c.expect;
    EXPECT_EQ(r.err(), cluster_errc::corrupt_file) << c.expect;
    EXPECT_NE(r.err().to_string().find(c.expect), std::string::npos) << r.err().to_string();
    EXPECT_NE(r.err().to_string().find("nodes.json"), std::string::npos) << r.err().to_string();
  }
}

TEST(job_dir, list_finds_jobs_newest_first) {
  temp_dir root;
  auto empty = job_dir::list(root / "none");
  ASSERT_TRUE(empty);
  EXPECT_TRUE(empty->empty());
  auto a = job_dir::create(root.str(), "job-a", "");
  auto b = job_dir::create(root.str(), "job-b", "");
  ASSERT_TRUE(a && b);
  fs::create_directories(root / "not-a-job");
  fs::last_write_time(a->job_toml_path(), fs::file_time_type::clock::now() - std::chrono::hours(1));
  ASSERT_TRUE(a->write_nodes(sample()));  // the most recent activity
  auto ids = job_dir::list(root.str());
  ASSERT_TRUE(ids);
  EXPECT_EQ(*ids, (std::vector<std::string>{"job-a", "job-b"}));
}

TEST(job_dir, atomic_write_reports_the_path) {
  temp_dir root;
  auto r = write_file_atomic(root / "missing/file.json", "{}");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.err(), cluster_errc::io_error);
  EXPECT_NE(r.err().to_string().find("missing/file.json"), std::string::npos) << r.err().to_string();
}

// On a full disk the error names the file written, not its temporary (a disk-fault reason named
// counters.json.tmp.757.<random>, a file that never exists afterwards).
TEST(job_dir, a_full_disk_names_the_file_written_not_its_temporary) {
  temp_dir root;
  test_util::small_tmpfs full(root.str(), "1m");
  if (!full.mounted) GTEST_SKIP() << "cannot mount a tmpfs here (needs root)";
  full.fill();
  auto r = write_file_atomic(root / "counters.json", std::string(64 << 10, 'x'));
  ASSERT_FALSE(r);
  const auto text = r.err().to_string();
  EXPECT_NE(text.find("no space left on device: " + (root / "counters.json") + " (write)"), std::string::npos)
      << text;
  EXPECT_EQ(text.find(".tmp."), std::string::npos) << text;
  for (const auto& e : fs::directory_iterator(root.str()))
    EXPECT_EQ(e.path().filename().string().find(".tmp."), std::string::npos) << "left " << e.path();
}

// A secret is owner-only from its creation (the job token was written, then chmod-ed: another user
// watching the root opened it in between); a link planted where the temporary used to be (the
// path plus the pid) is never followed (root's `troupe stop` of another user's job directory
// overwrote the file it pointed at).
TEST(job_dir, atomic_writes_are_private_from_the_start_and_follow_no_link) {
  temp_dir root;
  const std::string token = root / "token", victim = root / "victim";
  ASSERT_TRUE(write_file_atomic(token, "secret\n", 0600));
  struct stat st {};
  ASSERT_EQ(::stat(token.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  std::ofstream(victim) << "precious\n";
  const std::string request = root / "stop.request";
  ASSERT_EQ(::symlink(victim.c_str(), (request + ".tmp." + std::to_string(::getpid())).c_str()), 0);
  ASSERT_TRUE(write_file_atomic(request, "troupe stop\n"));
  EXPECT_EQ(testing::read_file(victim), "precious\n");
  EXPECT_EQ(testing::read_file(request), "troupe stop\n");
}

// A directory another user made ahead under a shared root, at the id a job will take (with links
// inside where the job writes its logs): the job is refused, nothing is written into it.
TEST(job_dir, a_directory_another_user_made_is_not_taken) {
  temp_dir root;
  const std::string theirs = root / "rjob1";
  ASSERT_EQ(::mkdir(theirs.c_str(), 0777), 0);
  ASSERT_EQ(::chown(theirs.c_str(), 65534, 65534), 0);
  auto d = job_dir::create(root.str(), "rjob1", "[job]\n");
  ASSERT_FALSE(d);
  EXPECT_NE(d.err().to_string().find("another user's (uid 65534)"), std::string::npos) << d.err().to_string();
  EXPECT_FALSE(std::filesystem::exists(theirs + "/logs"));
  ASSERT_EQ(::symlink(theirs.c_str(), (root / "linked").c_str()), 0);
  d = job_dir::create(root.str(), "linked", "[job]\n");
  ASSERT_FALSE(d);
  EXPECT_NE(d.err().to_string().find("a link stands there"), std::string::npos) << d.err().to_string();
}

}  // namespace
}  // namespace troupe::cluster
