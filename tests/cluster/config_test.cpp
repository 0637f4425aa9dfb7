#include <gtest/gtest.h>

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
  auto bad = read("[cluster]\nlauncher = \"slurm\"\n");
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
