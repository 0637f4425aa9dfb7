#include <gtest/gtest.h>

#include "troupe/cluster/addresses.hpp"
#include "troupe/cluster/config.hpp"
#include "troupe/cluster/errc.hpp"

namespace troupe::cluster {
namespace {

expected<cluster_config> read(const std::string& toml) {
  auto doc = config_doc::from_string(toml, "job.toml");
  if (!doc) return doc.err();
  config_reader r(*doc);
  auto c = cluster_config::read(r.section("cluster"));
  if (auto ok = r.finish(); !ok) return ok.err();
  return c;
}

TEST(cluster_config, defaults_and_values) {
  auto d = read("");
  ASSERT_TRUE(d) << d.err().to_string();
  EXPECT_EQ(d->launcher, "local");
  auto c = read(
      "[cluster]\nlauncher = \"local\"\ncapacity_cpus = 1.5\ncapacity_memory_mb = 512\ncapacity_gpus = 0\n");
  ASSERT_TRUE(c) << c.err().to_string();
  EXPECT_EQ(c->launcher, "local");
  auto cap = configured_capacity(*c);
  ASSERT_TRUE(cap);
  EXPECT_EQ(*cap, (resources{1.5, 512ull << 20, 0}));
}

TEST(cluster_config, errors_name_the_key) {
  auto bad = read("[cluster]\nlauncher = \"mesos\"\n");
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.err().to_string().find("cluster.launcher"), std::string::npos) << bad.err().to_string();
  auto typo = read("[cluster]\nlaucher = \"local\"\n");
  ASSERT_FALSE(typo);
  EXPECT_NE(typo.err().to_string().find("cluster.laucher"), std::string::npos) << typo.err().to_string();
  auto gone = read("[cluster]\njobs_root = \"/tmp/j\"\n");  // [job] root says where jobs go
  ASSERT_FALSE(gone);
  EXPECT_NE(gone.err().to_string().find("cluster.jobs_root"), std::string::npos) << gone.err().to_string();
  auto neg = read("[cluster]\ncapacity_cpus = -1\n");
  ASSERT_FALSE(neg);
  EXPECT_NE(neg.err().to_string().find("cluster.capacity_cpus"), std::string::npos) << neg.err().to_string();
}

TEST(cluster_config, reads_the_slurm_keys) {
  auto c = read(
      "[cluster]\nlauncher = \"slurm\"\ncontrol_partition = \"high\"\nworker_partition = \"low\"\n"
      "control_host = \"h1\"\nworker_host = \"h3\"\nworker_cpus = 2\naccount = \"a\"\nqos = "
      "\"q\"\ntime_limit = \"1:00:00\"\n"
      "sbatch_args = [\"--exclusive\"]\nslurm_bin_dir = \"/opt/slurm/bin\"\n");
  ASSERT_TRUE(c) << c.err().to_string();
  EXPECT_EQ(c->launcher, "slurm");
  EXPECT_EQ(c->control_partition, "high");
  EXPECT_EQ(c->worker_partition, "low");
  EXPECT_EQ(c->control_host, "h1");
  EXPECT_EQ(c->worker_host, "h3");
  EXPECT_EQ(c->worker_cpus, 2.0);
  EXPECT_EQ(c->account, "a");
  EXPECT_EQ(c->qos, "q");
  EXPECT_EQ(c->time_limit, "1:00:00");
  EXPECT_EQ(c->sbatch_args, std::vector<std::string>{"--exclusive"});
  EXPECT_EQ(c->slurm_bin_dir, "/opt/slurm/bin");
}

// `troupe config check` catches a worker_host the local launcher cannot place workers on (before,
// only the job's start did: exit 2).
TEST(cluster_config, a_worker_host_the_local_launcher_cannot_use_is_an_error_naming_the_key) {
  auto here = read("[cluster]\nworker_host = \"h3\"\n");
  ASSERT_FALSE(here);
  auto why = here.err().to_string();
  EXPECT_NE(why.find("cluster.worker_host"), std::string::npos) << why;
  EXPECT_NE(why.find("host 'h3': this job runs every node on this machine"), std::string::npos) << why;
  auto listed =
      read("[cluster]\nhosts = [\"h1\", \"h2:2\"]\nhost_command = \"ssh {host}\"\nworker_host = \"h2\"\n");
  ASSERT_TRUE(listed) << listed.err().to_string();
  EXPECT_EQ(listed->worker_host, "h2");
  auto other =
      read("[cluster]\nhosts = [\"h1\", \"h2:2\"]\nhost_command = \"ssh {host}\"\nworker_host = \"h9\"\n");
  ASSERT_FALSE(other);
  EXPECT_NE(other.err().to_string().find("host 'h9' is not in cluster.hosts (h1, h2)"), std::string::npos)
      << other.err().to_string();
  // Slurm's nodes are Slurm's to say, when the job starts.
  EXPECT_TRUE(read("[cluster]\nlauncher = \"slurm\"\nworker_host = \"h9\"\n"));
}

TEST(cluster_config, slurm_without_its_commands_names_the_missing_one) {
  cluster_config c;
  c.launcher = "slurm";
  c.slurm_bin_dir = "/nonexistent-slurm-bin";
  auto l = make_launcher(c, nullptr);
  ASSERT_FALSE(l);
  EXPECT_NE(l.err().to_string().find("sinfo"), std::string::npos) << l.err().to_string();
  auto p = plan_control(c);
  ASSERT_FALSE(p);
  EXPECT_NE(p.err().to_string().find("sinfo"), std::string::npos) << p.err().to_string();
  EXPECT_TRUE(plan_control(cluster_config{}));  // local: loopback, nothing to ask
  // With control_host given: scontrol missing is no fault of control_host's (it was named as one).
  c.control_host = "h1";
  auto named = plan_control(c);
  ASSERT_FALSE(named);
  EXPECT_NE(named.err().to_string().find("/nonexistent-slurm-bin/scontrol"), std::string::npos)
      << named.err().to_string();
  EXPECT_EQ(named.err().to_string().find("control_host"), std::string::npos) << named.err().to_string();
}

TEST(cluster_config, reads_the_host_list) {
  // An address of this machine (the master listens there): the one its default route leaves from.
  auto mine = local_address_towards("198.51.100.1");
  ASSERT_TRUE(mine) << "this machine has no route off loopback: " << mine.err().to_string();
  auto c = read("[cluster]\nhosts = [\"h1:2\", \"h2\"]\nhost_command = \"ssh {host}\"\nadvertise = \"" +
                *mine + "\"\n");
  ASSERT_TRUE(c) << c.err().to_string();
  EXPECT_EQ(c->hosts, (std::vector<std::string>{"h1:2", "h2"}));
  auto p = plan_control(*c);
  ASSERT_TRUE(p) << p.err().to_string();
  EXPECT_EQ(p->master_host, *mine);
  EXPECT_EQ(p->runner_host, *mine);
  EXPECT_EQ(p->master_node, "localhost");
  EXPECT_EQ(p->ps_node, "");
  EXPECT_EQ(p->node_listen, "@host:0");
  auto l = make_launcher(*c, nullptr);
  ASSERT_TRUE(l) << l.err().to_string();
  for (auto [toml, key] : {std::pair{"hosts = [\"h1:0\"]\nhost_command = \"ssh {host}\"\n", "cluster.hosts"},
                           std::pair{"hosts = [\"h1\"]\nhost_command = \"ssh\"\n", "cluster.host_command"},
                           std::pair{"hosts = [\"h1\"]\n", "cluster.host_command"}}) {
    auto bad = read(std::string("[cluster]\n") + toml);
    ASSERT_FALSE(bad) << toml;
    EXPECT_NE(bad.err().to_string().find(key), std::string::npos) << bad.err().to_string();
  }
  // Loopback, which the hosts cannot reach (every node ended after its connect timeout, relaunched
  // for ever), and an address of another machine (the job failed at its start, exit 1): refused.
  for (auto [addr, why] : {std::pair{"127.0.0.1",
                                     "a loopback address, which the hosts of cluster.hosts cannot "
                                     "reach"},
                           std::pair{"203.0.113.77", "not an address of this machine"},
                           std::pair{"0.0.0.0", "not one address of this machine"},
                           std::pair{"no-such-host.invalid", "'no-such-host.invalid' does not resolve"}}) {
    auto bad = *c;
    bad.advertise = addr;
    auto refused = plan_control(bad);
    ASSERT_FALSE(refused) << addr;
    EXPECT_NE(refused.err().to_string().find(std::string("cluster.advertise '") + addr + "': " + why),
              std::string::npos)
        << refused.err().to_string();
  }
  // No advertise and a first host this machine cannot resolve: the error says what to set.
  auto unnamed = read("[cluster]\nhosts = [\"no-such-host.invalid\"]\nhost_command = \"ssh {host}\"\n");
  ASSERT_TRUE(unnamed);
  auto q = plan_control(*unnamed);
  ASSERT_FALSE(q);
  EXPECT_NE(q.err().to_string().find("cluster.advertise"), std::string::npos) << q.err().to_string();
}

TEST(cluster_config, makes_the_local_launcher) {
  cluster_config c;
  c.capacity_cpus = 3;
  auto l = make_launcher(c, nullptr);
  ASSERT_TRUE(l) << l.err().to_string();
  EXPECT_EQ((*l)->capacity().cpus, 3);
  c.launcher = "kubernetes";
  auto k = make_launcher(c, nullptr);
  ASSERT_FALSE(k);
  EXPECT_EQ(k.err(), cluster_errc::invalid_spec);
}

}  // namespace
}  // namespace troupe::cluster
