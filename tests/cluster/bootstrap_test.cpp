#include <gtest/gtest.h>
#include <unistd.h>

#include "test_util.hpp"
#include "troupe/cluster/bootstrap.hpp"
#include "troupe/cluster/errc.hpp"
#include "troupe/cluster/local/launcher.hpp"
#include "troupe/cluster/process.hpp"

namespace troupe::cluster {
namespace {

using namespace std::chrono_literals;

member alive(const char* name, node_role role, const char* address) {
  member m;
  m.id.name = name;
  m.role = role;
  m.address = address;
  m.state = member_state::alive;
  return m;
}

node_args worker3() {
  return node_args{"127.0.0.1:7000", node_role::worker, {"worker-3", 2}, "/tmp/job", {"--set", "a=1"}};
}

TEST(node_bootstrap, argv_of_troupe_node) {
  EXPECT_EQ(
      node_argv(worker3()),
      (std::vector<std::string>{"troupe", "node", "--join", "127.0.0.1:7000", "--role", "worker", "--name",
                                "worker-3", "--incarnation", "2", "--job-dir", "/tmp/job", "--set", "a=1"}));
}

TEST(node_bootstrap, args_are_validated_with_the_flag_named) {
  EXPECT_TRUE(validate_node_args(worker3()));
  auto a = worker3();
  a.join = "localhost";
  EXPECT_NE(validate_node_args(a).err().to_string().find("--join"), std::string::npos);
  a = worker3();
  a.id.name = "ps-3";
  auto r = validate_node_args(a);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.err(), cluster_errc::invalid_spec);
  EXPECT_NE(r.err().to_string().find("does not fit role worker"), std::string::npos) << r.err().to_string();
  a = worker3();
  a.id.name = "worker-x";
  EXPECT_FALSE(validate_node_args(a));
  a = worker3();
  a.role = node_role::master;
  a.id.name = "master";
  EXPECT_TRUE(validate_node_args(a));
  a.job_dir.clear();
  EXPECT_NE(validate_node_args(a).err().to_string().find("--job-dir"), std::string::npos);
}

TEST(node_bootstrap, launch_spec_logs_into_the_job_dir) {
  testing::temp_dir root;
  auto dir = job_dir::create(root.str(), "job-1", "");
  ASSERT_TRUE(dir);
  auto spec = node_launch_spec(worker3(), *dir, resources{1, 0, 0});
  EXPECT_TRUE(spec.program.empty());
  EXPECT_EQ(spec.log_file, dir->path() + "/logs/worker-3.log");
  EXPECT_EQ(spec.working_dir, dir->path());
  EXPECT_EQ(spec.id, (node_id{"worker-3", 2}));
  EXPECT_EQ(spec.need.cpus, 1);
  ASSERT_EQ(spec.env.size(), 1u);
  EXPECT_EQ(spec.env[0].second, "worker-3#2");
}

TEST(node_bootstrap, nodes_file_from_a_view_and_running_nodes) {
  auto v = membership_view::make({0, 4});
  ASSERT_TRUE(v);
  ASSERT_TRUE(v->join(alive("master", node_role::master, "127.0.0.1:7000")));
  ASSERT_TRUE(v->add_launching({"worker-0", 1}, node_role::worker));
  ASSERT_TRUE(v->join(alive("worker-1", node_role::worker, "127.0.0.1:7001")));
  auto l = local_launcher::create({nullptr, resources{4, 1ull << 30, 0}});
  ASSERT_TRUE(l);
  node_spec s;
  s.id = {"worker-0", 1};
  s.program = "/bin/sleep";
  s.argv = {"sleep", "1000"};
  auto h = (*l)->launch(s);
  ASSERT_TRUE(h);
  auto f = make_nodes_file("job-1", *v, (*l)->running(), 123);
  EXPECT_EQ(f.epoch, v->epoch());
  EXPECT_EQ(f.master_address, "127.0.0.1:7000");
  ASSERT_EQ(f.nodes.size(), 3u);
  EXPECT_EQ(f.nodes[0].pid, ::getpid());
  EXPECT_EQ(f.nodes[1].id, (node_id{"worker-0", 1}));
  EXPECT_EQ(f.nodes[1].pid, h->pid);
  EXPECT_EQ(f.nodes[1].state, "launching");
  EXPECT_TRUE(process_alive(f.nodes[1].pid, f.nodes[1].start_time));
  EXPECT_EQ(f.nodes[2].pid, 0);  // joined from elsewhere
  auto back = parse_nodes_json(to_json(f), "nodes.json");
  ASSERT_TRUE(back);
  EXPECT_EQ(*back, f);
}

}  // namespace
}  // namespace troupe::cluster
