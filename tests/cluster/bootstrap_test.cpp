#include <gtest/gtest.h>

#include <cstdlib>

#include "test_util.hpp"
#include "troupe/cluster/bootstrap.hpp"
#include "troupe/cluster/errc.hpp"
#include "troupe/cluster/local/launcher.hpp"
#include "troupe/cluster/process.hpp"

namespace troupe::cluster {
namespace {

using namespace std::chrono_literals;

node_args worker3() {
  node_args a;
  a.master = "127.0.0.1:7000";
  a.role = node_role::worker;
  a.index = 3;
  a.incarnation = 2;
  a.job_dir = "/tmp/job";
  a.train_dir = "/tmp/train";
  a.test_dir = "/tmp/test";
  a.extra = {"--set", "a=1"};
  return a;
}

TEST(node_bootstrap, argv_of_troupe_node) {
  EXPECT_EQ(node_argv(worker3()),
            (std::vector<std::string>{"troupe", "node", "--job-dir", "/tmp/job", "--role", "worker",
                                      "--index", "3", "--incarnation", "2", "--train", "/tmp/train", "--test",
                                      "/tmp/test", "--join", "127.0.0.1:7000", "--set", "a=1"}));
  EXPECT_EQ(worker3().id(), (node_id{"worker-3", 2}));
  auto m = worker3();
  m.role = node_role::master;
  m.index = 0;
  m.extra.clear();
  auto argv = node_argv(m);
  EXPECT_EQ(argv[argv.size() - 2], "--listen");  // the master listens at the job's fixed address
  EXPECT_EQ(m.id(), (node_id{"master", 2}));
}

TEST(node_bootstrap, args_are_validated_with_the_flag_named) {
  EXPECT_TRUE(validate_node_args(worker3()));
  auto a = worker3();
  a.master = "localhost";
  auto r = validate_node_args(a);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.err(), cluster_errc::invalid_spec);
  EXPECT_NE(r.err().to_string().find("--join"), std::string::npos) << r.err().to_string();
  a.role = node_role::master;
  EXPECT_NE(validate_node_args(a).err().to_string().find("--listen"), std::string::npos);
  a = worker3();
  a.role = node_role::dispenser;
  EXPECT_NE(validate_node_args(a).err().to_string().find("--role"), std::string::npos);
  a = worker3();
  a.job_dir.clear();
  EXPECT_NE(validate_node_args(a).err().to_string().find("--job-dir"), std::string::npos);
  a = worker3();
  a.test_dir.clear();
  EXPECT_NE(validate_node_args(a).err().to_string().find("--test"), std::string::npos);
}

TEST(node_bootstrap, launch_spec_logs_into_the_job_dir) {
  testing::temp_dir root;
  auto dir = job_dir::create(root.str(), "job-1", "");
  ASSERT_TRUE(dir);
  auto spec = node_launch_spec(worker3(), *dir, resources{1, 0, 0});
  EXPECT_TRUE(spec.program.empty());
  EXPECT_EQ(spec.argv, node_argv(worker3()));
  EXPECT_EQ(spec.log_file, dir->path() + "/logs/worker-3.log");
  EXPECT_TRUE(spec.working_dir.empty());  // relative paths of the job file mean the same to every node
  EXPECT_EQ(spec.id, (node_id{"worker-3", 2}));
  EXPECT_EQ(spec.need.cpus, 1);
  ASSERT_EQ(spec.env.size(), 1u);
  EXPECT_EQ(spec.env[0].second, "worker-3#2");
}

TEST(node_bootstrap, the_master_starts_without_per_thread_malloc_caches) {
  testing::temp_dir root;
  auto dir = job_dir::create(root.str(), "job-1", "");
  ASSERT_TRUE(dir);
  auto m = worker3();
  m.role = node_role::master;
  m.index = 0;
  auto spec = node_launch_spec(m, *dir);
  const std::pair<std::string, std::string> tunables{"GLIBC_TUNABLES", "glibc.malloc.tcache_count=0"};
  if (const char* own = std::getenv("GLIBC_TUNABLES"); own && *own)
    EXPECT_EQ(spec.env.back().second, std::string(own) + ":glibc.malloc.tcache_count=0");
  else
    EXPECT_EQ(spec.env.back(), tunables);
  EXPECT_EQ(spec.env.front().first, "TROUPE_NODE");
  // What the runner's own GLIBC_TUNABLES sets is kept, ours comes after it (the last setting of a
  // tunable wins).
  EXPECT_EQ(node_environment(node_role::master, "glibc.malloc.check=3"),
            (std::vector<std::pair<std::string, std::string>>{
                {"GLIBC_TUNABLES", "glibc.malloc.check=3:glibc.malloc.tcache_count=0"}}));
  EXPECT_EQ(node_environment(node_role::master, ""), (std::vector{tunables}));
  EXPECT_TRUE(node_environment(node_role::worker, nullptr).empty());
  EXPECT_TRUE(node_environment(node_role::ps, "glibc.malloc.check=3").empty());
}

TEST(node_bootstrap, nodes_file_from_the_launched_nodes) {
  auto l = local_launcher::create({nullptr, resources{4, 1ull << 30, 0}});
  ASSERT_TRUE(l);
  node_spec s;
  s.id = {"worker-0", 1};
  s.program = "/bin/sleep";
  s.argv = {"sleep", "1000"};
  auto h = (*l)->launch(s);
  ASSERT_TRUE(h);
  std::vector<node_entry> nodes(3);
  nodes[0].id = {"master", 0};
  nodes[0].role = node_role::master;
  nodes[0].address = "127.0.0.1:7000";
  nodes[0].ended = "killed by SIGKILL";
  nodes[1].id = {"worker-0", 1};
  nodes[1].handle = *h;
  nodes[2].id = {"worker-1", 0};
  nodes[2].handle = *h;
  nodes[2].leaving = true;
  auto f = make_nodes_file("job-1", 7, "127.0.0.1:7100", nodes, 123);
  EXPECT_EQ(f.epoch, 7u);
  EXPECT_EQ(f.updated_ms, 123);
  EXPECT_EQ(f.runner_address, "127.0.0.1:7100");  // where status/scale/stop reach the job
  ASSERT_EQ(f.nodes.size(), 3u);
  EXPECT_EQ(f.nodes[0].pid, 0);
  EXPECT_EQ(f.nodes[0].state, "exited");
  EXPECT_EQ(f.nodes[0].exit, "killed by SIGKILL");  // how it ended
  EXPECT_EQ(f.nodes[0].address, "127.0.0.1:7000");
  EXPECT_EQ(f.nodes[1].id, (node_id{"worker-0", 1}));
  EXPECT_EQ(f.nodes[1].pid, h->pid);
  EXPECT_EQ(f.nodes[1].state, "running");
  EXPECT_TRUE(process_alive(f.nodes[1].pid, f.nodes[1].start_time));
  EXPECT_EQ(f.nodes[2].state, "leaving");
  auto back = parse_nodes_json(to_json(f), "nodes.json");
  ASSERT_TRUE(back);
  EXPECT_EQ(*back, f);
}

}  // namespace
}  // namespace troupe::cluster
