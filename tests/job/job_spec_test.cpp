#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "troupe/actors/strategy.hpp"
#include "troupe/job/job_file.hpp"
#include "troupe/job/job_spec.hpp"

namespace troupe::actors {
namespace {

expected<job::job_spec> parse(const std::string& text) {
  auto doc = config_doc::from_string(text, "job.toml");
  EXPECT_TRUE(doc) << doc.err().to_string();
  return job::job_spec::read(*doc);
}

TEST(job_spec, defaults_and_values) {
  auto s = parse("[job]\nstrategy = 'allreduce'\nworkers = 3\n[ps]\nshards = 4\n[train]\nepochs = 2\n");
  ASSERT_TRUE(s) << s.err().to_string();
  EXPECT_EQ(s->job.strategy, "allreduce");
  EXPECT_EQ(s->job.workers, 3u);
  EXPECT_EQ(s->ps.shards, 4u);
  EXPECT_EQ(s->ps.checkpoint_dir, "");
  EXPECT_EQ(s->nn.train.epochs, 2u);
  EXPECT_FALSE(s->uses_ps());
  EXPECT_EQ(s->job.dataset_cache, "jobs/datasets");
  EXPECT_EQ(s->job.device, "cpu");
  EXPECT_FALSE(s->uses_gpu());
  EXPECT_EQ(s->job.ring_lanes, 0u);  // by the host's CPUs
  auto gb = parse(
      "[job]\nstrategy = 'allreduce'\nworkers = 4\nrecords_per_task = 256\n[train]\nbatch = 'global'\n"
      "batch_size = 64\n");
  ASSERT_TRUE(gb) << gb.err().to_string();
  EXPECT_EQ(gb->nn.train.batch, "global");
  auto l = parse("[job]\nring_lanes = 3\n");
  ASSERT_TRUE(l) << l.err().to_string();
  EXPECT_EQ(l->job.ring_lanes, 3u);
  auto g = parse("[job]\nstrategy = 'allreduce'\ndevice = 'gpu'\n");
  ASSERT_TRUE(g) << g.err().to_string();
  EXPECT_TRUE(g->uses_gpu());
  // [train] device is troupe train --local's switch: an async_ps job file may carry it.
  auto t = parse("[job]\nstrategy = 'async_ps'\n[train]\ndevice = 'gpu'\n");
  ASSERT_TRUE(t) << t.err().to_string();
  EXPECT_FALSE(t->uses_gpu());
}

// Issue 44: `troupe run mlp.toml` from the model's own folder left [model] path relative, and the
// nodes looked for the module inside the job directory. Every path a job file writes is relative to
// the file's folder, however the file is named; one given by --set is relative to where it is given.
TEST(job_file, every_path_is_relative_to_the_job_files_folder_however_it_is_named) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("troupe-job-file-" + std::to_string(::getpid()));
  fs::create_directories(dir / "sub");
  std::ofstream(dir / "sub" / "mlp.toml") << "[job]\nroot = 'runs'\ndataset_cache = '../cache'\n"
                                          << "[model]\ntype = 'torchscript'\npath = 'mlp.pt'\n"
                                          << "[data]\nsource = 'fashion-mnist'\n"
                                          << "dir = 'fm'\nspill_dir = '/abs/spill'\n";
  const auto cwd = fs::current_path();
  const fs::path sub = fs::canonical(dir / "sub");
  for (const auto& [from, name] :
       {std::pair{sub, std::string("mlp.toml")}, std::pair{sub, std::string("./mlp.toml")},
        std::pair{sub.parent_path(), std::string("sub/mlp.toml")}}) {
    fs::current_path(from);
    auto doc = job::read_job_file(name);
    ASSERT_TRUE(doc) << doc.err().to_string();
    config_reader r(*doc);
    EXPECT_EQ(r.section("model").get_string("path", ""), (sub / "mlp.pt").string()) << name;
    EXPECT_EQ(r.section("job").get_string("root", ""), (sub / "runs").string()) << name;
    EXPECT_EQ(r.section("job").get_string("dataset_cache", ""), (sub.parent_path() / "cache").string())
        << name;
    EXPECT_EQ(r.section("data").get_string("dir", ""), (sub / "fm").string()) << name;
    EXPECT_EQ(r.section("data").get_string("spill_dir", ""), "/abs/spill") << name;
    auto spec = job::job_spec::read(*doc);
    ASSERT_TRUE(spec) << spec.err().to_string();
    EXPECT_EQ(spec->nn.model.path, (sub / "mlp.pt").string()) << name;
    // A --set path is the caller's: relative to the working directory.
    ASSERT_TRUE(doc->apply_override("model.path=\"other.pt\""));
    auto over = job::job_spec::read(*doc);
    ASSERT_TRUE(over) << over.err().to_string();
    EXPECT_EQ(over->nn.model.path, (from / "other.pt").string()) << name;
    // Every path key alike, ps.checkpoint_dir too (it was refused: "not an absolute path").
    auto set = job::read_job_file(name, {"ps.checkpoint_dir=\"ckpts\"", "job.root=\"elsewhere\""});
    ASSERT_TRUE(set) << set.err().to_string();
    auto with_set = job::job_spec::read(*set);
    ASSERT_TRUE(with_set) << with_set.err().to_string();
    EXPECT_EQ(with_set->ps.checkpoint_dir, (from / "ckpts").string()) << name;
    EXPECT_EQ(with_set->job.root, (from / "elsewhere").string()) << name;
    EXPECT_EQ(with_set->nn.model.path, (sub / "mlp.pt").string()) << name;
  }
  fs::current_path(cwd);
  fs::remove_all(dir);
}

// max_local_batch unset: 1024, or batch_size when that is larger (a bound below batch_size is refused
// when set, and the default must not refuse a job that never set it).
TEST(job_spec, an_unset_max_local_batch_is_at_least_the_batch_size) {
  auto big = parse(
      "[job]\nstrategy = 'allreduce'\nrecords_per_task = 4096\n[train]\nbatch = 'auto'\nlr_scaling = "
      "'adascale'\nbatch_size = 2048\n");
  ASSERT_TRUE(big) << big.err().to_string();
  EXPECT_EQ(big->nn.train.max_local_batch, 2048u);
  auto small = parse("[job]\nstrategy = 'allreduce'\n[train]\nbatch = 'auto'\nlr_scaling = 'adascale'\n");
  ASSERT_TRUE(small) << small.err().to_string();
  EXPECT_EQ(small->nn.train.max_local_batch, 1024u);
}

TEST(job_spec, errors_name_the_key) {
  struct bad_case {
    const char* text;
    const char* key;
  } cases[] = {
      {"[job]\nstrategy = 'gossip'\n", "job.strategy"},
      {"[job]\nname = \"a\\u0000b\"\n", "job.name': a control character"},
      {"[job]\nname = \"a\\nb\"\n", "job.name': a control character"},
      {"[job]\nmin_workers = 5\nmax_workers = 2\n", "job.min_workers"},
      {"[job]\nworkers = 9\nmax_workers = 4\n", "job.workers"},
      {"[job]\nworkers = 0\n", "job.workers"},
      {"[job]\nworkers = 2\nmin_workers = 3\n", "job.min_workers"},
      {"[job]\ndisk_full_timeout_ms = 5\n", "job.disk_full_timeout_ms"},
      {"[transport]\nlisten_port = 4000\n", "transport.listen_port"},
      {"[ps]\nshards = 0\n", "ps.shards"},
      {"[ps]\ncheckpoint_dir = 'ckpt'\n", "ps.checkpoint_dir"},
      {"[job]\nrecords_per_task = 'many'\n", "job.records_per_task"},
      {"[job]\nworkres = 2\n", "job.workres"},
      {"[transport]\nheartbeat_ms = 900\nheartbeat_timeout_ms = 100\n", "heartbeat"},
      {"[job]\ndevice = 'tpu'\n", "job.device"},
      {"[job]\nring_lanes = 17\n", "job.ring_lanes"},
      {"[job]\ndevice = 'gpu'\nstrategy = 'async_ps'\n[model]\ntype = 'deepfm'\n",
       "trains under async_ps only: use device \"cpu\""},
      {"[job]\ndevice = 'gpu'\nstrategy = 'allreduce'\n[train]\nbatch = 'auto'\nlr_scaling = 'adascale'\n",
       "train.batch"},
      {"[job]\ndevice = 'gpu'\nstrategy = 'allreduce'\n[train]\nbatch = 'global'\n", "train.batch"},
      {"[job]\nstrategy = 'allreduce'\nworkers = 4\nrecords_per_task = 100\n[train]\nbatch = 'global'\n"
       "batch_size = 64\n",
       "job.records_per_task (100) must be at least"},
      // A ring's steps are cut from one task: a task smaller than a batch made every step short (the
      // learning rate halved for the whole job, no noise-scale estimate ever).
      {"[job]\nstrategy = 'allreduce'\nrecords_per_task = 32\n[train]\nbatch_size = 64\n",
       ":3: key 'job.records_per_task': 32 is below train.batch_size (64)"},
      {"[train]\nbatch = 'local'\n", "train.batch"},
      // batch = "auto" starts at M0 = 2 x 32 and each worker's micro-batch at 32: bounds below them
      // were accepted and never applied.
      {"[job]\nstrategy = 'allreduce'\nworkers = 2\n[train]\nbatch = 'auto'\nlr_scaling = 'adascale'\n"
       "batch_size = 32\nmax_batch = 16\n",
       ":8: key 'train.max_batch': 16 is below"},  // its line: a check across keys said the file alone
      // Every worker of a ring trains at least a row a step: 8 workers stayed at 4 x 2 = 16 (4 x max_batch).
      {"[job]\nstrategy = 'allreduce'\nworkers = 2\nmax_workers = 8\n[train]\nbatch = 'auto'\n"
       "lr_scaling = 'adascale'\nbatch_size = 2\nmax_batch = 4\n",
       ":9: key 'train.max_batch': batch = \"auto\" keeps the global batch at most train.max_batch (4) and "
       "every "
       "worker trains at least one row a step: job.max_workers (8) is more than that"},
      {"[job]\nstrategy = 'allreduce'\n[train]\nbatch = 'auto'\nlr_scaling = 'adascale'\n"
       "batch_size = 32\nmax_local_batch = 8\n",
       "train.max_local_batch': 8 is below train.batch_size (32)"},
      {"[job]\nstrategy = 'async_ps'\n[train]\nbatch = 'global'\n", "strategy \"async_ps\""},
      {"[job]\nstrategy = 'local_sgd'\n[train]\nbatch = 'auto'\nlr_scaling = 'adascale'\n", "train.batch"},
      {"[job]\nstrategy = 'async_ps'\n[train]\nlr_scaling = 'adascale'\n", "train.lr_scaling"},
      {"[job]\nstrategy = 'local_sgd'\n[train]\nlr_scaling = 'sqrt'\n", "strategy \"local_sgd\""},
      // The strategy's word first: local_sgd with batch = "auto" was asked for noise_scale, then for
      // lr_scaling = "adascale", and only then told that it takes neither.
      {"[job]\nstrategy = 'local_sgd'\n[train]\nbatch = 'auto'\n",
       "'train.batch': \"auto\" sizes an allreduce ring's step; job.strategy \"local_sgd\""},
      // A prediction job runs an exported model and trains nothing; an exported model is not trained.
      {"[job]\nstrategy = 'predict'\n[model]\ntype = 'mlp'\n", "trains nothing: to train, use one of "},
      {"[job]\nstrategy = 'predict'\n[model]\ntype = 'mlp'\n", "async_ps"},  // from the registry
      {"[job]\nstrategy = 'allreduce'\n[model]\ntype = 'exported'\npath = '/m'\n", "[model] init = \"/m\""},
  };
  for (const auto& c : cases) {
    auto s = parse(c.text);
    ASSERT_FALSE(s) << c.text;
    EXPECT_NE(s.err().to_string().find(c.key), std::string::npos) << s.err().to_string();
  }
}

TEST(strategies, registry_knows_the_builtins_and_names_them_on_error) {
  auto names = strategy_names();
  for (const char* n : {"async_ps", "allreduce", "local_sgd"})
    EXPECT_NE(std::find(names.begin(), names.end(), n), names.end()) << n;
  job::job_spec spec;
  auto s = make_strategy("allreduce", spec);
  ASSERT_TRUE(s);
  EXPECT_EQ((*s)->name(), "allreduce");
  auto bad = make_strategy("nope", spec);
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.err().context().find("local_sgd"), std::string::npos);
}

// A strategy of one's own (docs/strategies.md, "Adding one"): the job file refused every name but the
// built-ins' (a hard-coded list), and PS shards, evaluation and the global batch went by the
// built-ins' names. Its registrar's traits now decide them; an unknown name lists the strategies
// that train (not `predict`, the one `troupe predict` uses).
TEST(strategies, a_registered_strategy_is_read_and_checked_by_its_traits) {
  auto unknown = parse("[job]\nstrategy = 'test_gossip'\n");
  ASSERT_FALSE(unknown);
  const auto why = unknown.err().to_string();
  EXPECT_NE(why.find("'test_gossip' is not one of: allreduce, async_ps, local_sgd"), std::string::npos)
      << why;
  EXPECT_EQ(why.find("predict"), std::string::npos) << why;
  static strategy_registrar reg(
      "test_gossip", [](const job::job_spec& spec) { return make_strategy("local_sgd", spec).value(); },
      job::strategy_traits{.replicas_agree = false});
  static strategy_registrar on_shards(
      "test_shards", [](const job::job_spec& spec) { return make_strategy("async_ps", spec).value(); },
      job::strategy_traits{.uses_ps = true});
  auto s = parse("[job]\nstrategy = 'test_gossip'\n");
  ASSERT_TRUE(s) << s.err().to_string();
  EXPECT_FALSE(s->uses_ps());
  EXPECT_FALSE(s->traits().replicas_agree);
  EXPECT_TRUE(s->traits().trains);
  auto names = strategy_names();
  EXPECT_NE(std::find(names.begin(), names.end(), "test_gossip"), names.end());
  EXPECT_TRUE(make_strategy("test_gossip", *s));
  // No global batch among its traits: lr_scaling is refused for it as for local_sgd.
  EXPECT_FALSE(parse("[job]\nstrategy = 'test_gossip'\n[train]\nlr_scaling = 'sqrt'\n"));
  auto shards = parse("[job]\nstrategy = 'test_shards'\n");
  ASSERT_TRUE(shards) << shards.err().to_string();
  EXPECT_TRUE(shards->uses_ps());
  // The built-ins keep theirs (their registrars give none).
  register_strategies();
  EXPECT_TRUE(parse("[job]\nstrategy = 'async_ps'\n")->uses_ps());
  EXPECT_TRUE(parse("[job]\nstrategy = 'allreduce'\n[train]\nlr_scaling = 'sqrt'\n"));
  EXPECT_FALSE(parse("[job]\nstrategy = 'local_sgd'\n")->traits().replicas_agree);
}

}  // namespace
}  // namespace troupe::actors
