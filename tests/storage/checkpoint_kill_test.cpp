// SIGKILLs a process that writes checkpoints, at random moments, many times over: after every
// kill the latest checkpoint is complete, loads to exactly the expected state, and no version the
// writer reported as committed is lost. The seed is printed; TROUPE_TEST_SEED=N repeats a run.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <set>
#include <thread>

#include "ckpt_gen.hpp"
#include "test_dir.hpp"

namespace troupe::storage {
namespace {

struct child {
  pid_t pid = -1;
  int out = -1;
};

child spawn(const std::string& dir, const char* max = nullptr) {
  int fds[2];
  if (::pipe(fds) != 0) return {};
  pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(fds[1], 1);
    ::close(fds[0]);
    ::close(fds[1]);
    ::execl(CKPT_WRITER, CKPT_WRITER, dir.c_str(), max, static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::close(fds[1]);
  return {pid, fds[0]};
}

// Reads everything the (dead) child printed; returns the highest committed version.
std::uint64_t drain(int fd) {
  std::string text;
  char buf[4096];
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) text.append(buf, static_cast<std::size_t>(n));
  ::close(fd);
  std::uint64_t max = 0;
  for (std::size_t at = 0; (at = text.find("committed ", at)) != std::string::npos; at += 10) {
    auto end = text.find('\n', at);
    if (end == std::string::npos) break;  // a line cut by the kill: not acknowledged
    max = std::max<std::uint64_t>(max, std::strtoull(text.c_str() + at + 10, nullptr, 10));
  }
  return max;
}

// The version of a checkpoint data file name (v<20 digits>.ckpt, or .ckpt.tmp while written), or 0.
std::uint64_t file_version(const std::string& name, bool& temporary) {
  temporary = name.size() == 30 && name.ends_with(".ckpt.tmp");
  if (name.size() < 26 || name[0] != 'v' || (name.size() != 26 && !temporary)) return 0;
  return std::strtoull(name.c_str() + 1, nullptr, 10);
}

// Whether the writer died with a version newer than latest in progress: a header (older builds), a
// data file being written or one renamed into place whose header did not commit.
bool has_version_after_latest(const std::string& dir) {
  auto env = lmdb_env::open(dir);
  if (!env) return false;
  auto versions = (*env)->open_db("ckpt_versions");
  auto meta = (*env)->open_db("ckpt_meta");
  if (!versions || !meta) return false;
  auto txn = (*env)->begin_read();
  auto latest = txn->get(*meta, "latest");
  std::uint64_t l = latest && *latest ? from_be64(**latest) : 0;
  auto c = cursor::open(txn->raw(), *versions, dir);
  auto last = c->last();
  if (last && *last && from_be64(c->key()) > l) return true;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    bool tmp = false;
    if (file_version(e.path().filename().string(), tmp) > l) return true;
  }
  return false;
}

// After open(): the directory holds LMDB's files and one data file per complete version, nothing else.
void expect_no_leftovers(const std::string& dir, const std::vector<checkpoint_info>& versions, int k) {
  std::set<std::uint64_t> complete;
  for (auto& i : versions) complete.insert(i.version);
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    const std::string n = e.path().filename().string();
    if (n == "data.mdb" || n == "lock.mdb") continue;
    bool tmp = false;
    const std::uint64_t v = file_version(n, tmp);
    EXPECT_TRUE(v != 0 && !tmp && complete.contains(v)) << "kill " << k << ": " << n << " left behind";
  }
}

void kill_many(int kills) {
  std::uint64_t seed = std::random_device{}();
  if (const char* s = std::getenv("TROUPE_TEST_SEED")) seed = std::strtoull(s, nullptr, 10);
  std::printf("checkpoint kill test: seed %llu (TROUPE_TEST_SEED=%llu repeats it)\n",
              static_cast<unsigned long long>(seed), static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);
  // Kills land within the time a writer takes to start and write a few versions, which a loaded
  // machine stretches (thread hand-offs and fsyncs wait for the CPU and the disk): measured first.
  int longest_ms = 200;
  {
    testing::temp_dir probe;
    const auto t0 = std::chrono::steady_clock::now();
    child c = spawn(probe.str(), "4");
    ASSERT_GT(c.pid, 0);
    int status = 0;
    ::waitpid(c.pid, &status, 0);
    ASSERT_EQ(drain(c.out), 4u) << "the writer failed on its own, status " << status;
    const auto ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0);
    longest_ms = std::max(longest_ms, static_cast<int>(ms.count()));
  }
  std::printf("checkpoint kill test: kills within 1-%d ms of the start\n", longest_ms);
  std::uniform_int_distribution<int> delay_ms(1, longest_ms);
  testing::temp_dir d;
  int interrupted = 0;                // kills that caught a checkpoint half-written
  std::uint64_t acked = 0, seen = 0;  // highest acknowledged / highest found after a kill
  for (int k = 0; k < kills; ++k) {
    child c = spawn(d.str());
    ASSERT_GT(c.pid, 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms(rng)));
    ::kill(c.pid, SIGKILL);
    int status = 0;
    ::waitpid(c.pid, &status, 0);
    ASSERT_TRUE(WIFSIGNALED(status)) << "kill " << k << ": writer exited on its own, status " << status;
    acked = std::max(acked, drain(c.out));

    interrupted += has_version_after_latest(d.str()) ? 1 : 0;
    checkpoint_options o;
    o.keep_full = 0;
    auto store = checkpoint_store::open(d.str(), o);
    ASSERT_TRUE(store) << "kill " << k << ": " << store.err().to_string();
    auto latest = store->latest();
    ASSERT_TRUE(latest) << latest.err().to_string();
    std::uint64_t v = latest->value_or(0);
    ASSERT_GE(v, acked) << "kill " << k << ": committed version " << acked << " lost";
    // At most the one write the kill interrupted after its commit, before its acknowledgement.
    ASSERT_LE(v, std::max(acked, seen) + 1) << "kill " << k;
    seen = v;
    if (v == 0) continue;
    auto state = store->load(v);
    ASSERT_TRUE(state) << "kill " << k << ": " << state.err().to_string();
    ASSERT_TRUE(*state == testing::state_at(v)) << "kill " << k << ": version " << v << " differs";
    auto all = store->list();
    ASSERT_TRUE(all);
    for (auto& i : *all) EXPECT_TRUE(i.complete) << "open() leaves no incomplete version";
    expect_no_leftovers(d.str(), *all, k);
  }
  std::printf("checkpoint kill test: %d kills, %d mid-checkpoint, latest version %llu\n", kills, interrupted,
              static_cast<unsigned long long>(seen));
  EXPECT_GT(acked, 5u) << "the writer made too little progress to mean anything";
}

TEST(CheckpointKill, Fifty) {
  kill_many(50);
}

// Another process writes versions while this one holds the store open: this one reads them (the
// headers through LMDB, the data from their files).
TEST(CheckpointKill, VersionsWrittenByAnotherProcessLoadHere) {
  testing::temp_dir d;
  checkpoint_options o;
  o.keep_full = 0;
  o.env.initial_map_size = 1 << 20;
  auto store = checkpoint_store::open(d.str(), o);
  ASSERT_TRUE(store) << store.err().to_string();
  child c = spawn(d.str(), "12");
  int status = 0;
  ::waitpid(c.pid, &status, 0);
  ASSERT_EQ(drain(c.out), 12u);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  auto st = store->load_latest();
  ASSERT_TRUE(st) << st.err().to_string();
  EXPECT_TRUE(*st == testing::state_at(12));
}

}  // namespace
}  // namespace troupe::storage
