// Host faults of `troupe chaos` without hosts: their text form, the checks against a job's
// [cluster] before anything starts, the command line built from host_fault_command, a real run
// of such a command, and the host nodes.json records for each node.
#include <gtest/gtest.h>

#include "troupe/cluster/config.hpp"
#include "troupe/cluster/host_faults.hpp"
#include "troupe/cluster/job_dir.hpp"
#include "troupe/control/chaos.hpp"

namespace troupe::control {
namespace {

cluster::cluster_config hosts_cfg() {
  cluster::cluster_config c;
  c.hosts = {"h1:2", "h2:2", "h3"};
  c.host_command = "/repo/scripts/hosts.sh exec {host}";
  return c;
}

std::vector<fault_spec> faults(std::initializer_list<const char*> texts) {
  std::vector<fault_spec> out;
  for (const char* t : texts) {
    auto f = parse_fault(t);
    EXPECT_TRUE(f) << t << ": " << f.err().to_string();
    if (f) out.push_back(*f);
  }
  return out;
}

TEST(host_faults, parse_each_host_fault) {
  auto k = parse_fault("5 kill host:h3");
  ASSERT_TRUE(k);
  EXPECT_EQ(k->kind, fault_kind::kill);
  EXPECT_EQ(fault_host(*k), "h3");
  auto p = parse_fault("8 partition host:h2 hold=5");
  ASSERT_TRUE(p);
  EXPECT_EQ(p->kind, fault_kind::partition);
  EXPECT_DOUBLE_EQ(p->hold_s, 5);
  auto t = parse_fault("2 throttle host rate=1gbit hold=10");
  ASSERT_TRUE(t);
  EXPECT_EQ(t->rate, "1gbit");
  EXPECT_EQ(fault_host(*t), "");  // any host
  auto d = parse_fault("3 delay host:h1 us=5000 hold=2");
  ASSERT_TRUE(d);
  EXPECT_EQ(d->delay_us, 5000u);
  EXPECT_FALSE(fault_host(*parse_fault("1 kill worker")));
}

TEST(host_faults, bad_host_faults_name_the_problem) {
  struct bad {
    const char* text;
    const char* says;
  };
  for (auto [text, says] :
       {bad{"1 stop host:h1", "not a host fault"}, bad{"1 drop host p=0.5", "not a host fault"},
        bad{"1 partition worker hold=2", "hits a host"}, bad{"1 throttle ps-0", "hits a host"},
        bad{"1 throttle host:h1", "rate="}, bad{"1 throttle host:h1 rate=fast", "rate="},
        bad{"1 throttle host:h1 rate=10", "rate="}, bad{"1 kill host:", "unknown target"}}) {
    auto f = parse_fault(text);
    ASSERT_FALSE(f) << text;
    EXPECT_NE(f.err().to_string().find(says), std::string::npos) << f.err().to_string();
  }
}

TEST(host_faults, checked_against_the_jobs_hosts_before_the_job_starts) {
  auto cfg = hosts_cfg();
  EXPECT_TRUE(check_host_faults(faults({"5 kill host:h3", "8 partition host hold=5", "1 kill worker"}), cfg));
  auto unknown = check_host_faults(faults({"5 kill host:h9"}), cfg);
  ASSERT_FALSE(unknown);
  EXPECT_NE(unknown.err().to_string().find("unknown host 'h9' (cluster.hosts: h1, h2, h3)"),
            std::string::npos)
      << unknown.err().to_string();
  cluster::cluster_config alone;
  auto none = check_host_faults(faults({"5 partition host:h1 hold=1"}), alone);
  ASSERT_FALSE(none);
  EXPECT_NE(none.err().to_string().find("cluster.hosts is empty"), std::string::npos)
      << none.err().to_string();
  auto no_delay_hosts = check_host_faults(faults({"5 delay host"}), alone);
  ASSERT_FALSE(no_delay_hosts);
  EXPECT_NE(no_delay_hosts.err().to_string().find("cluster.hosts"), std::string::npos);
  cfg.host_command = "ssh {host}";  // not hosts.sh: the command must be given
  auto ssh = check_host_faults(faults({"5 kill host:h1"}), cfg);
  ASSERT_FALSE(ssh);
  EXPECT_NE(ssh.err().to_string().find("cluster.host_fault_command"), std::string::npos)
      << ssh.err().to_string();
  EXPECT_TRUE(check_host_faults(faults({"5 delay host:h1"}), cfg));  // the nodes' own knob: no command
  cfg.host_fault_command = "ssh {host} sudo troupe-host-fault {action} {arg}";
  EXPECT_TRUE(check_host_faults(faults({"5 kill host:h1"}), cfg));
}

TEST(host_faults, command_lines_from_the_template) {
  auto t = cluster::host_fault_template(hosts_cfg());
  ASSERT_TRUE(t) << t.err().to_string();
  EXPECT_EQ(*t, "/repo/scripts/hosts.sh {action} {host} {arg}");
  using v = std::vector<std::string>;
  EXPECT_EQ(cluster::host_fault_argv(*t, "cut", "h2", "", "/j"), (v{"/repo/scripts/hosts.sh", "cut", "h2"}));
  EXPECT_EQ(cluster::host_fault_argv(*t, "limit", "h2", "1gbit", "/j"),
            (v{"/repo/scripts/hosts.sh", "limit", "h2", "1gbit"}));
  EXPECT_EQ(cluster::host_fault_argv("ssh {host} pkill -{arg} -f {job_dir}", "kill", "n7", "KILL", "/jobs/a"),
            (v{"ssh", "n7", "pkill", "-KILL", "-f", "/jobs/a"}));
}

TEST(host_faults, a_failing_command_is_named_with_its_output) {
  auto cfg = hosts_cfg();
  cfg.host_fault_command = "/bin/echo {action} {host}";
  EXPECT_TRUE(cluster::run_host_fault(cfg, "cut", "h1", "", "/j"));
  cfg.host_fault_command = "/bin/ls /nonexistent-{host}";
  auto r = cluster::run_host_fault(cfg, "cut", "h1", "", "/j");
  ASSERT_FALSE(r);
  EXPECT_NE(r.err().to_string().find("/bin/ls /nonexistent-h1: exit code 2"), std::string::npos)
      << r.err().to_string();
  EXPECT_NE(r.err().to_string().find("No such file"), std::string::npos) << r.err().to_string();
}

TEST(host_faults, nodes_json_keeps_each_nodes_host) {
  cluster::nodes_file f;
  f.job_id = "j";
  cluster::node_record a, b;
  a.id = {"worker-0", 1};
  a.host = "h2";
  b.id = {"master", 0};
  b.role = cluster::node_role::master;
  f.nodes = {a, b};
  auto back = cluster::parse_nodes_json(cluster::to_json(f), "nodes.json");
  ASSERT_TRUE(back) << back.err().to_string();
  EXPECT_EQ(back->nodes[0].host, "h2");
  EXPECT_EQ(back->nodes[1].host, "");
  EXPECT_EQ(cluster::to_json(f).find("\"host\": \"\""), std::string::npos);  // absent, not empty
}

}  // namespace
}  // namespace troupe::control
