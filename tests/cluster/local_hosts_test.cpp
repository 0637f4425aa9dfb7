// The local launcher with other hosts ([cluster] hosts, host_command): the pure parts (host entries,
// placement by free slots, the command line through the host command), then real processes placed
// on two "hosts" whose command is `env TROUPE_ON={host}` (it runs here, and says where it was sent).
#include <gtest/gtest.h>

#include "launcher_fixtures.hpp"
#include "local/hosts.hpp"
#include "test_util.hpp"
#include "troupe/cluster/errc.hpp"
#include "troupe/cluster/local/launcher.hpp"

namespace troupe::cluster::local {
namespace {

using namespace std::chrono_literals;
using cluster::testing::exit_log;
using cluster::testing::read_file;
using cluster::testing::shell;
using cluster::testing::sleeper;
using cluster::testing::temp_dir;

TEST(local_hosts, entries_are_name_or_name_and_slots) {
  auto a = parse_host_slots("h1");
  ASSERT_TRUE(a);
  EXPECT_EQ(a->name, "h1");
  EXPECT_EQ(a->slots, 1);
  auto b = parse_host_slots("node-7.example:16");
  ASSERT_TRUE(b);
  EXPECT_EQ(b->name, "node-7.example");
  EXPECT_EQ(b->slots, 16);
  for (const char* bad : {"", ":4", "h1:0", "h1:x", "h1:4x", "localhost", "a b:2"}) {
    auto r = parse_host_slots(bad);
    ASSERT_FALSE(r) << bad;
    EXPECT_NE(r.err().to_string().find(std::string("'") + bad + "'"), std::string::npos)
        << r.err().to_string();
  }
}

// A host the job's nodes could not reach the master from is taken last: its freed slots took the
// replacements of its fenced nodes, which never joined either.
TEST(local_hosts, placement_keeps_off_hosts_to_avoid_while_another_has_room) {
  remote_hosts hs{{{"h1", 2}, {"h2", 3}}, {"ssh", "{host}"}};
  EXPECT_EQ(*pick_host(hs, {{"h1", 1}, {"h2", 1}}, "", "w", {"h1"}), "h2");
  EXPECT_EQ(*pick_host(hs, {{"h1", 1}, {"h2", 3}}, "", "w", {"h1"}), "h1") << "no other room: there";
  EXPECT_EQ(*pick_host(hs, {}, "h1", "w", {"h1"}), "h1") << "a host named for the node is taken";
  EXPECT_FALSE(pick_host(hs, {{"h1", 2}, {"h2", 3}}, "", "w", {"h1"}));
}

TEST(local_hosts, placement_fills_the_hosts_in_order) {
  remote_hosts hs{{{"h1", 2}, {"h2", 3}}, {"ssh", "{host}"}};
  EXPECT_EQ(*pick_host(hs, {}, "", "w"), "h1");
  EXPECT_EQ(*pick_host(hs, {{"h1", 1}, {"h2", 2}}, "", "w"), "h1");
  EXPECT_EQ(*pick_host(hs, {{"h1", 2}}, "", "w"), "h2");
  EXPECT_EQ(*pick_host(hs, {{"h1", 1}, {"h2", 3}}, "", "w"), "h1");  // a slot freed on h1
  EXPECT_EQ(*pick_host(hs, {{"h1", 2}, {"h2", 3}}, "localhost", "w"), "localhost");
  EXPECT_EQ(*pick_host(hs, {}, "h1", "w"), "h1");
  auto unknown = pick_host(hs, {}, "h9", "worker-1#0");
  ASSERT_FALSE(unknown);
  EXPECT_EQ(unknown.err().code(), make_error_code(cluster_errc::invalid_spec));
  EXPECT_NE(unknown.err().to_string().find("host 'h9' is not in cluster.hosts"), std::string::npos);
  auto full = pick_host(hs, {{"h1", 2}, {"h2", 3}}, "", "worker-1#0");
  ASSERT_FALSE(full);
  EXPECT_EQ(full.err().code(), make_error_code(cluster_errc::insufficient_resources));
  EXPECT_NE(full.err().to_string().find("h1 2/2, h2 3/3"), std::string::npos) << full.err().to_string();
  // A host named for the node (troupe scale --host) keeps its slots: it took a third node on h1:2.
  // Full, the node goes to the first host with a free slot; none free: refused.
  EXPECT_EQ(*pick_host(hs, {{"h1", 2}}, "h1", "worker-4#0"), "h2");
  EXPECT_EQ(*pick_host(hs, {{"h1", 2}, {"h2", 2}}, "h2", "w"), "h2");
  auto named_full = pick_host(hs, {{"h1", 2}, {"h2", 3}}, "h1", "worker-4#0");
  ASSERT_FALSE(named_full);
  EXPECT_EQ(named_full.err().code(), make_error_code(cluster_errc::insufficient_resources));
  EXPECT_NE(named_full.err().to_string().find("h1 2/2, h2 3/3"), std::string::npos)
      << named_full.err().to_string();
}

TEST(local_hosts, the_node_command_follows_the_host_command) {
  node_spec s;
  s.id = {"worker-1", 0};
  s.argv = {"troupe", "node", "--role", "worker"};
  s.env = {{"OPENBLAS_NUM_THREADS", "1"}};
  auto r = on_host(s, "h3", {"ssh", "-o", "Host={host}", "{host}"}, "/opt/troupe");
  EXPECT_EQ(r.program, "ssh");
  EXPECT_EQ(r.argv, (std::vector<std::string>{"ssh", "-o", "Host=h3", "h3", "env", "OPENBLAS_NUM_THREADS=1",
                                              "/opt/troupe", "node", "--role", "worker"}));
  EXPECT_TRUE(r.env.empty());
  EXPECT_EQ(r.host, "h3");
  s.env.clear();
  s.program = "/bin/sh";
  s.argv = {"sh", "-c", "true"};
  EXPECT_EQ(on_host(s, "h1", {"nsenter", "{host}"}, "/opt/troupe").argv,
            (std::vector<std::string>{"nsenter", "h1", "/bin/sh", "-c", "true"}));
}

std::unique_ptr<launcher> make_with_hosts(exit_log& log) {
  auto l = launcher::create({log.callback(), resources{64, 1ull << 40, 0}},
                            remote_hosts{{{"h1", 1}, {"h2", 1}}, {"/usr/bin/env", "TROUPE_ON={host}"}});
  EXPECT_TRUE(l) << l.err().to_string();
  return std::move(*l);
}

TEST(local_hosts, check_host_accepts_the_listed_hosts_and_names_the_others) {
  exit_log log;
  auto l = make_with_hosts(log);
  EXPECT_TRUE(l->check_host("h1"));
  EXPECT_TRUE(l->check_host("h2"));
  EXPECT_TRUE(l->check_host("localhost"));
  auto bad = l->check_host("h9");
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.err().code(), make_error_code(cluster_errc::invalid_spec));
  EXPECT_NE(bad.err().context().find("host 'h9' is not in cluster.hosts (h1, h2)"), std::string::npos)
      << bad.err().to_string();
  // Without other hosts every node runs here: no host to choose.
  auto here = launcher::create({log.callback(), resources{64, 1ull << 40, 0}});
  ASSERT_TRUE(here) << here.err().to_string();
  auto none = (*here)->check_host("h1");
  ASSERT_FALSE(none);
  EXPECT_NE(none.err().context().find("runs every node on this machine"), std::string::npos)
      << none.err().to_string();
}

TEST(local_hosts, nodes_run_through_the_host_command_one_per_slot) {
  temp_dir dir;
  exit_log log;
  auto l = make_with_hosts(log);
  auto a = l->launch(shell("worker-1", "echo on $TROUPE_ON; exec sleep 1000", dir / "w1.log"));
  ASSERT_TRUE(a) << a.err().to_string();
  auto b = l->launch(shell("worker-2", "echo on $TROUPE_ON; exec sleep 1000", dir / "w2.log"));
  ASSERT_TRUE(b) << b.err().to_string();
  EXPECT_EQ(a->host, "h1");
  EXPECT_EQ(b->host, "h2");
  // Every slot is taken: a third node is refused, naming the hosts; one on this machine is not.
  auto c = l->launch(sleeper("worker-3"));
  ASSERT_FALSE(c);
  EXPECT_NE(c.err().to_string().find("h1 1/1, h2 1/1"), std::string::npos) << c.err().to_string();
  auto here = sleeper("master");
  here.host = "localhost";
  auto m = l->launch(here);
  ASSERT_TRUE(m) << m.err().to_string();
  EXPECT_EQ(m->host, "");
  EXPECT_TRUE(cluster::testing::wait_until(
      [&] { return read_file(dir / "w2.log").find("on h2") != std::string::npos; }, 10s))
      << read_file(dir / "w2.log");
  // The fence reaches the node behind the command; its slot is free again.
  ASSERT_TRUE(l->fence(*a));
  auto st = log.wait_for(*a, 10s);
  ASSERT_TRUE(st);
  EXPECT_EQ(st->signal, SIGKILL);
  auto d = l->launch(shell("worker-4", "echo on $TROUPE_ON; exec sleep 1000", dir / "w4.log"));
  ASSERT_TRUE(d) << d.err().to_string();
  EXPECT_EQ(d->host, "h1");
  EXPECT_TRUE(cluster::testing::wait_until(
      [&] { return read_file(dir / "w4.log").find("on h1") != std::string::npos; }, 10s));
}

}  // namespace
}  // namespace troupe::cluster::local
