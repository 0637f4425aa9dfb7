// The local launcher's standby (keep_standby): a launch adopts it, a new one follows, a dead one
// is never used, and kill_all() leaves none behind. The standby here is a shell that saves the
// identity it is sent and then becomes "the node" by exec'ing sleep.
#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <regex>

#include "launcher_fixtures.hpp"
#include "test_util.hpp"
#include "troupe/cluster/local/launcher.hpp"
#include "troupe/cluster/standby.hpp"

namespace troupe::cluster {
namespace {

using namespace std::chrono_literals;
using testing::exit_log;
using testing::make;
using testing::pid_alive;
using testing::read_file;
using testing::shell;
using testing::temp_dir;
using testing::wait_until;

std::size_t count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// The pids in the launcher's "standby pid N <how>" lines of a standby log.
std::vector<int> standby_pids(const std::string& log, const std::string& how) {
  std::vector<int> out;
  std::regex line("standby pid ([0-9]+) " + how);
  for (std::sregex_iterator it(log.begin(), log.end(), line), end; it != end; ++it)
    out.push_back(std::stoi((*it)[1]));
  return out;
}

TEST(standby_identity, round_trips_and_refuses_malformed_bytes) {
  standby_identity id{"/jobs/j/logs/worker-1.log",
                      {{"TROUPE_NODE", "worker-1#2"}, {"EMPTY", ""}},
                      {"troupe", "node", "a b", ""}};
  auto back = decode_standby_identity(encode_standby_identity(id));
  ASSERT_TRUE(back) << back.err().to_string();
  EXPECT_EQ(*back, id);
  auto bytes = encode_standby_identity(id);
  EXPECT_FALSE(decode_standby_identity(bytes.substr(0, bytes.size() - 1)));  // no final NUL
  EXPECT_FALSE(decode_standby_identity(bytes.substr(0, bytes.size() - 3)));  // argv cut short
  EXPECT_FALSE(decode_standby_identity(std::string("troupe-standby-9\0", 17) + bytes.substr(17)));
  EXPECT_FALSE(decode_standby_identity(encode_standby_identity({"log", {}, {}})));  // empty argv
}

TEST(local_standby, a_launch_adopts_the_standby_and_a_new_one_follows) {
  temp_dir dir;
  exit_log log;
  auto l = make(log);
  const std::string sb_log = dir / "standby.log";
  ASSERT_TRUE(
      l->keep_standby(shell("standby", "cat > " + (dir / "identity-") + "$$; exec sleep 1000", sb_log)));
  ASSERT_TRUE(wait_until([&] { return count(read_file(sb_log), "start standby#0") == 1; }, 10s));
  EXPECT_TRUE(l->running().empty());  // a standby is no node

  auto spec = shell("worker-1", "exit 7", dir / "worker-1.log");
  spec.standby_ok = true;
  spec.env = {{"TROUPE_NODE", "worker-1#0"}};
  auto h = l->launch(spec);
  ASSERT_TRUE(h) << h.err().to_string();
  // The standby's process is the node: it got the spec's identity, not the spec's script.
  const std::string sent = dir / ("identity-" + std::to_string(h->pid));
  ASSERT_TRUE(wait_until([&] { return std::filesystem::exists(sent) && !read_file(sent).empty(); }, 10s));
  ASSERT_TRUE(wait_until([&] { return decode_standby_identity(read_file(sent)).has_value(); }, 10s));
  auto id = decode_standby_identity(read_file(sent));
  EXPECT_EQ(*id, (standby_identity{spec.log_file, spec.env, spec.argv}));
  auto text = read_file(spec.log_file);
  EXPECT_NE(text.find("start worker-1#0: /bin/sh -c exit 7 (standby pid " + std::to_string(h->pid) + ")"),
            std::string::npos)
      << text;
  EXPECT_EQ(l->running(), std::vector<node_handle>{*h});
  EXPECT_TRUE(pid_alive(h->pid));
  ASSERT_TRUE(l->fence(*h));
  auto st = log.wait_for(*h, 10s);
  ASSERT_TRUE(st);
  EXPECT_EQ(st->signal, SIGKILL);
  EXPECT_EQ(standby_pids(read_file(sb_log), "becomes worker-1#0"), std::vector<int>{h->pid});

  // A new standby, standby_delay after the adoption; kill_all() ends it (also while it is being
  // started: "not wanted any more") and starts no other.
  ASSERT_TRUE(wait_until([&] { return count(read_file(sb_log), "start standby#0") == 2; }, 10s));
  l->kill_all();
  const std::string killed = "(killed by SIGKILL|not wanted any more)";
  ASSERT_TRUE(wait_until([&] { return standby_pids(read_file(sb_log), killed).size() == 1; }, 10s));
  int second = standby_pids(read_file(sb_log), killed)[0];
  EXPECT_NE(second, h->pid);
  EXPECT_FALSE(pid_alive(second));
  std::this_thread::sleep_for(local_launcher::standby_delay + 300ms);
  EXPECT_EQ(count(read_file(sb_log), "start standby#0"), 2u);
  EXPECT_EQ(log.size(), 1u);  // standbys get no exit reports
}

TEST(local_standby, a_dead_standby_is_not_used_and_the_launcher_stops_restarting_it) {
  temp_dir dir;
  exit_log log;
  auto l = make(log);
  const std::string sb_log = dir / "standby.log";
  ASSERT_TRUE(l->keep_standby(shell("standby", "exit 0", sb_log)));
  ASSERT_TRUE(wait_until(
      [&] {
        return standby_pids(read_file(sb_log), "exited with code 0").size() ==
               static_cast<std::size_t>(local_launcher::max_standby_deaths);
      },
      20s));
  auto spec = shell("worker-1", "exec sleep 1000", dir / "worker-1.log");
  spec.standby_ok = true;
  auto h = l->launch(spec);
  ASSERT_TRUE(h) << h.err().to_string();
  auto text = read_file(spec.log_file);
  EXPECT_NE(text.find("start worker-1#0: /bin/sh -c exec sleep 1000"), std::string::npos) << text;
  EXPECT_EQ(text.find("(standby pid"), std::string::npos) << text;
  std::this_thread::sleep_for(local_launcher::standby_delay + 300ms);
  EXPECT_EQ(count(read_file(sb_log), "start standby#0"),
            static_cast<std::size_t>(local_launcher::max_standby_deaths));
  l->kill_all();
}

}  // namespace
}  // namespace troupe::cluster
