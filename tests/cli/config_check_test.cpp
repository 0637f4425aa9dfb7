// `troupe config check` refuses what `troupe run` refuses, with the same key named, and both exit 2
// before any job starts; `troupe chaos` refuses an unknown target before it starts its job.
#include <gtest/gtest.h>
#include <sys/mount.h>

#include <filesystem>
#include <string>

#include "run_command.hpp"

namespace {

using troupe::test_util::run_troupe;
using troupe::test_util::temp_path;
using troupe::test_util::write_temp;

const char* ctr_data = "[data]\nsource = 'synthetic-ctr'\nrows = 1000\nfields = 4\nvocab_per_field = 10\n";

struct refused {
  const char* name;
  std::string toml;
  const char* key;  // named in the one error line
};

std::string job_root_line(const std::filesystem::path& root) {
  return "[job]\nroot = '" + root.string() + "'\n";
}

// check and run both exit 2 naming `key`; run makes no job directory.
void expect_refused_by_both(const refused& c, const std::string& set = "") {
  auto root = temp_path(std::string(c.name) + "-jobs");
  auto f = write_temp(std::string(c.name) + ".toml", job_root_line(root) + c.toml);
  auto check = run_troupe("config check " + f + set);
  EXPECT_EQ(check.code, 2) << c.name << ": " << check.out;
  EXPECT_NE(check.out.find(c.key), std::string::npos) << c.name << ": " << check.out;
  auto run = run_troupe("run " + f + set + " --quiet");
  EXPECT_EQ(run.code, 2) << c.name << ": " << run.out;
  EXPECT_NE(run.out.find(c.key), std::string::npos) << c.name << ": " << run.out;
  EXPECT_FALSE(std::filesystem::exists(root)) << c.name << ": a job directory was made";
  std::filesystem::remove(f);
}

TEST(config_check, refuses_what_run_refuses) {
  const refused cases[] = {
      {"deepfm-allreduce", std::string("strategy = 'allreduce'\n[model]\ntype = 'deepfm'\n") + ctr_data,
       "job.strategy"},
      {"min-above-workers", "workers = 2\nmin_workers = 3\n", "job.min_workers"},
      {"listen-port", std::string(ctr_data) + "[transport]\nlisten_port = 5555\n", "transport.listen_port"},
      {"missing-dir", "[data]\nsource = 'fashion-mnist'\ndir = '/nonexistent/fashion'\n", "data.dir"},
      {"dir-as-file", "[data]\nsource = 'criteo'\ntrain = '/tmp'\n", "data.train"},
      {"missing-store", "[data]\nsource = 'store'\ntrain = '/nonexistent/a'\ntest = '/nonexistent/b'\n",
       "data.train"},
      // Hosts without advertise, no address of this machine towards the first (broadcast: connect()
      // refuses it, nothing is sent): refused by the runner after it made the job's directory, and
      // config check said ok.
      {"hosts-no-advertise",
       std::string(ctr_data) + "[cluster]\nhosts = ['255.255.255.255:2']\nhost_command = 'ssh {host}'\n",
       "cluster.advertise: set it to this machine's address that the hosts reach"},
      // Each width allowed alone, the whole beyond any memory (it threw "config: std::bad_alloc").
      {"hidden-beyond-memory",
       std::string("[model]\ntype = 'mlp'\nhidden = [16777216, 16777216]\n") + ctr_data,
       "key 'model.hidden': the model would hold"},
  };
  for (const auto& c : cases) expect_refused_by_both(c);
  // `train --local` builds its model itself: it ended "train: std::bad_alloc", exit 1.
  auto f = write_temp("hidden-local.toml", cases[7].toml);
  auto local = run_troupe("train --local " + f);
  EXPECT_EQ(local.code, 2) << local.out;
  EXPECT_NE(local.out.find("key 'model.hidden': the model would hold"), std::string::npos) << local.out;
  std::filesystem::remove(f);
}

// A jobs root that can hold no job directory is refused naming the root: a regular file (it read
// as the dataset cache's problem), a directory on a read-only filesystem (exit 1, naming
// <root>/<job id>/logs, a path never made).
TEST(config_check, a_root_that_can_hold_no_job_is_refused_naming_it) {
  auto file = write_temp("root-is-a-file", "x\n");
  auto f = write_temp("root-file.toml", std::string(ctr_data));
  for (const std::string& cmd :
       {"config check " + f + " --set job.root=" + file, "run " + f + " --root " + file + " --quiet"}) {
    auto r = run_troupe(cmd);
    EXPECT_EQ(r.code, 2) << cmd << ": " << r.out;
    EXPECT_NE(r.out.find("job.root " + file + " (--root, or [job] root): " + file + ": not a directory"),
              std::string::npos)
        << cmd << ": " << r.out;
    EXPECT_EQ(r.out.find("dataset_cache"), std::string::npos) << cmd << ": " << r.out;
  }
  const auto ro = temp_path("ro-root");
  std::filesystem::create_directories(ro);
  if (::mount("tmpfs", ro.c_str(), "tmpfs", MS_RDONLY, "size=1m") != 0) {
    std::printf("(skipped the read-only root: cannot mount a tmpfs here, needs root)\n");
  } else {
    auto r = run_troupe("run " + f + " --root " + ro.string() + "/jobs --quiet");
    ::umount2(ro.c_str(), MNT_DETACH);
    EXPECT_EQ(r.code, 2) << r.out;
    EXPECT_NE(r.out.find(ro.string() + ": cannot create in it: Read-only file system"), std::string::npos)
        << r.out;
  }
  std::filesystem::remove_all(ro);
}

TEST(config_check, zero_workers_is_refused_not_rounded_up) {
  expect_refused_by_both({"zero-workers", ctr_data, "job.workers"}, " --set job.workers=0");
}

// run --workers beyond max_workers is named as the flag the user wrote (it read "--set
// job.workers=5000", a flag never given).
TEST(config_check, run_workers_beyond_max_workers_names_the_flag) {
  auto f =
      write_temp("many-workers.toml", job_root_line(temp_path("many-jobs")) + "max_workers = 4\n" + ctr_data);
  auto r = run_troupe("run " + f + " --workers 5000 --quiet");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("--workers 5000: key 'job.workers': 5000 is more than max_workers"), std::string::npos)
      << r.out;
  EXPECT_EQ(r.out.find("--set"), std::string::npos) << r.out;
  std::filesystem::remove(f);
}

TEST(config_check, a_directory_is_not_a_job_file) {
  auto dir = temp_path("a-dir");
  std::filesystem::create_directories(dir);
  auto r = run_troupe("config check " + dir.string());
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("is a directory"), std::string::npos) << r.out;
  std::filesystem::remove(dir);
}

// A job file that sets nothing (empty, comments alone) is refused by check and run alike: it trained
// Fashion-MNIST's MLP, every key at its default. `[job]` alone is every default, asked for.
TEST(config_check, a_job_file_that_sets_nothing_is_refused) {
  auto f = write_temp("empty.toml", "# nothing yet\n\n");
  for (const std::string cmd : {"config check ", "run --quiet "}) {
    auto r = run_troupe(cmd + f);
    EXPECT_EQ(r.code, 2) << cmd << r.out;
    EXPECT_NE(r.out.find(f + ": sets nothing (an empty job file"), std::string::npos) << cmd << r.out;
  }
  auto job = write_temp("job_only.toml", "[job]\n");
  auto r = run_troupe("config check " + job);
  EXPECT_EQ(r.code, 0) << r.out;
  std::filesystem::remove(f);
  std::filesystem::remove(job);
}

TEST(config_check, a_valid_job_passes_both_checks) {
  auto f = write_temp("ok.toml",
                      std::string("[job]\nstrategy = 'async_ps'\n[model]\ntype = 'deepfm'\n") + ctr_data);
  auto r = run_troupe("config check " + f);
  EXPECT_EQ(r.code, 0) << r.out;
  std::filesystem::remove(f);
}

// [train] device = "gpu" is `troupe train --local`'s switch: a job file with it alone is valid, and
// its workers train on the CPU, which `config check` says in a note (and `troupe run` in a warning).
TEST(config_check, a_train_device_without_a_job_device_gets_a_note) {
  auto f =
      write_temp("train-gpu.toml", std::string("[job]\nstrategy = 'async_ps'\n[train]\ndevice = 'gpu'\n") +
                                       "[model]\ntype = 'deepfm'\n" + ctr_data);
  auto r = run_troupe("config check " + f);
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("note: [train] device = \"gpu\" is troupe train --local's switch; this job's workers "
                       "train on the CPU ([job] device = \"cpu\"): set [job] device = \"gpu\""),
            std::string::npos)
      << r.out;
  auto quiet = run_troupe("config check " + f + " --set job.device=cpu --set train.device=cpu");
  EXPECT_EQ(quiet.code, 0) << quiet.out;
  EXPECT_EQ(quiet.out.find("note:"), std::string::npos) << quiet.out;
  std::filesystem::remove(f);
}

// A key the job's strategy or batch rule does not read is noted, naming what reads it (sync_every
// under allreduce, a [ps] section without PS shards, max_batch with batch "fixed" were accepted
// silently); the same keys where they apply say nothing.
TEST(config_check, keys_the_strategy_does_not_read_get_a_note) {
  auto f =
      write_temp("unread.toml",
                 "[job]\nstrategy = 'allreduce'\nsync_every = 4\n[ps]\nshards = 2\n[train]\nmax_batch = "
                 "4096\n[model]\ntype = 'mlp'\n[data]\nsource = 'fashion-mnist'\nmax_train_rows = 1000\n");
  auto r = run_troupe("config check " + f);
  EXPECT_EQ(r.code, 0) << r.out;
  for (const char* note :
       {"note: job.sync_every: read by strategies that average replicas every that many steps (local_sgd); "
        "job.strategy \"allreduce\" does not: the key has no effect",
        "note: [ps]: the parameter-server shards' settings; job.strategy \"allreduce\" launches no PS shards",
        "note: train.max_batch: bounds batch = \"auto\"; this job's train.batch is \"fixed\""})
    EXPECT_NE(r.out.find(note), std::string::npos) << note << " in:\n" << r.out;
  auto fits = run_troupe("config check " + f + " --set job.strategy=local_sgd");
  EXPECT_NE(fits.out.find("[ps]"), std::string::npos) << fits.out;  // still no shards
  EXPECT_EQ(fits.out.find("job.sync_every"), std::string::npos) << fits.out;
  // max_local_batch bounds batch = "global"'s micro-batches too: noted under "fixed" alone (it was
  // noted as having no effect under "global", which honours it).
  auto local = run_troupe("config check " + f + " --set train.max_local_batch=128");
  EXPECT_NE(local.out.find("note: train.max_local_batch: bounds batch = \"auto\" and \"global\""),
            std::string::npos)
      << local.out;
  auto global = run_troupe("config check " + f + " --set train.max_local_batch=128 --set train.batch=global");
  EXPECT_EQ(global.out.find("train.max_local_batch"), std::string::npos) << global.out;
  std::filesystem::remove(f);
}

// A [model] key its type does not read and an optimizer key its optimizer does not read are noted
// (`type = "lr"` with hidden layers trained a linear model without a word); where read, nothing.
TEST(config_check, model_and_optimizer_keys_not_read_get_a_note) {
  auto f = write_temp("unread-model.toml",
                      "[model]\ntype = 'lr'\nhidden = [64, 64]\n[train]\noptimizer = 'sgd'\nbeta1 = 0.5\n"
                      "[data]\nsource = 'fashion-mnist'\nmax_train_rows = 1000\n");
  auto r = run_troupe("config check " + f);
  EXPECT_EQ(r.code, 0) << r.out;
  for (const char* note :
       {"note: model.hidden: read by model types mlp, wide_deep and deepfm; model.type \"lr\" does not: the "
        "key has no effect",
        "note: train.beta1: read by optimizers adam; train.optimizer \"sgd\" does not: the key has no "
        "effect"})
    EXPECT_NE(r.out.find(note), std::string::npos) << note << " in:\n" << r.out;
  // Read by fashion-mnist and criteo only: a synthetic-ctr (or store) job trained every row.
  auto rows =
      run_troupe("config check " + f + " --set data.source=synthetic-ctr --set data.max_train_rows=100");
  EXPECT_NE(
      rows.out.find("note: data.max_train_rows: read for sources fashion-mnist and criteo; synthetic-ctr "
                    "makes `rows` and `test_rows`: the key has no effect"),
      std::string::npos)
      << rows.out;
  auto fits = run_troupe("config check " + f + " --set model.type=mlp --set train.optimizer=adam");
  EXPECT_EQ(fits.code, 0) << fits.out;
  EXPECT_EQ(fits.out.find("has no effect"), std::string::npos) << fits.out;
  std::filesystem::remove(f);
}

// The noise scale's keys where nothing estimates it are noted (local_sgd, or noise_scale = false,
// took noise_scale_every silently), and so is a lone worker that can never estimate it: it pairs two
// consecutive full batches of one task, none with records_per_task below 2 x batch_size.
TEST(config_check, noise_scale_keys_that_do_nothing_get_a_note) {
  auto f = write_temp("unread-noise.toml",
                      "[job]\nstrategy = 'local_sgd'\n[train]\nnoise_scale = false\nnoise_scale_every = 4\n"
                      "[model]\ntype = 'mlp'\n[data]\nsource = 'fashion-mnist'\nmax_train_rows = 1000\n");
  auto r = run_troupe("config check " + f);
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("note: train.noise_scale: allreduce and async_ps jobs estimate the noise scale; "
                       "job.strategy \"local_sgd\" with noise_scale = false does not: the key has no effect"),
            std::string::npos)
      << r.out;
  auto every = run_troupe("config check " + f + " --set job.strategy=allreduce");
  EXPECT_NE(
      every.out.find("note: train.noise_scale_every: how often the noise scale is estimated; job.strategy "
                     "\"allreduce\" with noise_scale = false estimates none"),
      std::string::npos)
      << every.out;
  auto lone =
      run_troupe("config check " + f +
                 " --set job.strategy=allreduce --set train.noise_scale=true --set train.lr_scaling=adascale "
                 "--set job.records_per_task=100 --set train.batch_size=64");
  EXPECT_NE(
      lone.out.find("note: job.records_per_task (100) is below 2 x train.batch_size (128): one worker alone"),
      std::string::npos)
      << lone.out;
  auto fits = run_troupe(
      "config check " + f +
      " --set job.strategy=allreduce --set train.noise_scale=true --set train.lr_scaling=adascale");
  EXPECT_EQ(fits.out.find("note:"), std::string::npos) << fits.out;
  std::filesystem::remove(f);
}

// The shipped examples set nothing their job does not read.
TEST(config_check, the_examples_get_no_note) {
  for (const auto& e : std::filesystem::directory_iterator(TROUPE_SOURCE_DIR "/examples")) {
    if (e.path().extension() != ".toml") continue;
    auto r = run_troupe("config check " + e.path().string());
    EXPECT_EQ(r.out.find("has no effect"), std::string::npos) << e.path() << ":\n" << r.out;
  }
}

// --print shows every key the job reads with its effective value, defaults included (it showed only
// the keys the file set), and what it prints is itself a valid job file that prints the same.
TEST(config_check, print_shows_the_defaults_too) {
  auto f = write_temp("print.toml", std::string("[job]\nworkers = 3\n") + ctr_data);
  auto r = run_troupe("config check --print " + f + " --set train.epochs=7");
  ASSERT_EQ(r.code, 0) << r.out;
  for (const char* line : {"workers = 3", "epochs = 7", "lease_timeout_ms = 30000", "records_per_task = 1024",
                           "batch_size = ", "learning_rate = ", "optimizer = ", "shards = 1",
                           "type = ", "rows = 1000", "heartbeat_timeout_ms = "})
    EXPECT_NE(r.out.find(line), std::string::npos) << line << " in:\n" << r.out;
  for (const char* table :
       {"[job]", "[train]", "[model]", "[data]", "[ps]", "[transport]", "[log]", "[cluster]"})
    EXPECT_NE(r.out.find(table), std::string::npos) << table << " in:\n" << r.out;
  const auto printed = r.out.substr(0, r.out.rfind(f + ": ok"));
  auto again = write_temp("print-again.toml", printed);
  auto r2 = run_troupe("config check --print " + again);
  ASSERT_EQ(r2.code, 0) << r2.out << "\nfrom:\n" << printed;
  EXPECT_EQ(r2.out.substr(0, r2.out.rfind(again + ": ok")), printed);
  std::filesystem::remove(f);
  std::filesystem::remove(again);
}

// `run` prints a config error as the very line `config check` prints (file, line, key, reason).
TEST(config_check, run_prints_the_same_error_line_as_check) {
  auto root = temp_path("same-line-jobs");
  for (const std::string body : {"workers = 'x'\n", "wokers = 2\n"}) {
    auto f = write_temp("same-line.toml", job_root_line(root) + body + ctr_data);
    auto check = run_troupe("config check " + f);
    auto run = run_troupe("run " + f + " --quiet");
    EXPECT_EQ(check.code, 2) << check.out;
    EXPECT_EQ(run.code, 2) << run.out;
    EXPECT_NE(check.out.find(f + ":3"), std::string::npos) << "the line number: " << check.out;
    EXPECT_EQ(run.out, check.out);
    std::filesystem::remove(f);
  }
  EXPECT_FALSE(std::filesystem::exists(root));
}

// Commands that only look at a store never write to it: an empty data.mdb stays empty (LMDB made
// an 8 KiB environment of it), and is refused as what it is.
TEST(config_check, looking_at_a_store_never_writes_it) {
  auto dir = temp_path("empty-store");
  std::filesystem::create_directories(dir / "train");
  std::filesystem::create_directories(dir / "test");
  std::ofstream(dir / "train" / "data.mdb").flush();
  std::ofstream(dir / "test" / "data.mdb").flush();
  auto f = write_temp("empty-store.toml",
                      "[job]\nstrategy = 'async_ps'\n[model]\ntype = 'deepfm'\n[data]\n"
                      "source = 'store'\ntrain = '" +
                          (dir / "train").string() + "'\ntest = '" + (dir / "test").string() + "'\n");
  auto check = run_troupe("config check " + f);
  EXPECT_EQ(check.code, 2) << check.out;
  EXPECT_NE(check.out.find("empty (0 bytes)"), std::string::npos) << check.out;
  auto inspect = run_troupe("data inspect " + (dir / "train").string());
  EXPECT_EQ(inspect.code, 1) << inspect.out;
  EXPECT_NE(inspect.out.find("empty (0 bytes)"), std::string::npos) << inspect.out;
  EXPECT_EQ(std::filesystem::file_size(dir / "train" / "data.mdb"), 0u);
  EXPECT_EQ(std::filesystem::file_size(dir / "test" / "data.mdb"), 0u);
  // A real store: inspect (and --verify) leave its data file as it was.
  auto store = (dir / "real").string();
  ASSERT_EQ(run_troupe("data synth-ctr --rows 300 --fields 3 --vocab 20 --out " + store).code, 0);
  const auto size = std::filesystem::file_size(store + "/data.mdb");
  const auto mtime = std::filesystem::last_write_time(store + "/data.mdb");
  ASSERT_EQ(run_troupe("data inspect --verify " + store).code, 0);
  EXPECT_EQ(std::filesystem::file_size(store + "/data.mdb"), size);
  EXPECT_EQ(std::filesystem::last_write_time(store + "/data.mdb"), mtime);
  std::filesystem::remove_all(dir);
  std::filesystem::remove(f);
}

TEST(chaos_cli, unknown_target_is_exit_2_before_the_job) {
  auto root = temp_path("chaos-jobs");
  auto f = write_temp("chaos.toml", job_root_line(root) + ctr_data);
  auto r = run_troupe("chaos --job " + f + " --fault '1 kill nobody'");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("unknown target 'nobody'"), std::string::npos) << r.out;
  EXPECT_FALSE(std::filesystem::exists(root));
  auto rnd = run_troupe("chaos --job " + f + " --rate 1 --targets worker,nobody");
  EXPECT_EQ(rnd.code, 2) << rnd.out;
  // What the job file rules out is refused before the job too (the job ran, the fault was skipped):
  // a preemption without the Slurm launcher, a PS shard the job does not have.
  auto preempt = run_troupe("chaos --job " + f + " --fault '1 preempt worker hold=2'");
  EXPECT_EQ(preempt.code, 2) << preempt.out;
  EXPECT_NE(preempt.out.find("cluster.launcher is 'local'"), std::string::npos) << preempt.out;
  auto shard = run_troupe("chaos --job " + f + " --fault '1 kill ps-7'");
  EXPECT_EQ(shard.code, 2) << shard.out;
  EXPECT_NE(shard.out.find("PS shard(s)"), std::string::npos) << shard.out;
  // Times that are no number of seconds: --duration inf drew faults into memory without end (4 GB
  // in 6 s, never returned); -1, nan and inf were taken by --settle and --hold and by a fault's time.
  for (const std::string& bad :
       {std::string("--rate 1 --duration inf"), std::string("--rate 100 --duration 2000"),
        std::string("--fault '1 kill worker' --settle -1"), std::string("--fault '1 kill worker' --hold nan"),
        std::string("--fault 'inf kill worker'")}) {
    auto b = run_troupe("chaos --job " + f + " " + bad);
    EXPECT_EQ(b.code, 2) << bad << ": " << b.out;
  }
  EXPECT_FALSE(std::filesystem::exists(root));
  std::filesystem::remove(f);
}

// --set job.root moves the job: chaos finds it there (it looked under the file's root and reported
// "the job did not start" for a job that ran and finished).
TEST(chaos_cli, a_job_root_set_on_the_command_line_is_where_chaos_finds_the_job) {
  auto root = temp_path("chaos-set-root");
  auto f = write_temp("chaos-set.toml",
                      "[job]\nworkers = 1\n[ps]\nshards = 1\n[model]\ntype = 'lr'\n" + std::string(ctr_data));
  auto r = run_troupe("chaos --job " + f + " --set job.root=" + root.string() + " --set job.dataset_cache=" +
                      (root / "datasets").string() + " --fault '60 kill worker'");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(r.out.find("did not start"), std::string::npos) << r.out;
  EXPECT_TRUE(std::filesystem::exists(root)) << r.out;
  std::filesystem::remove_all(root);
  std::filesystem::remove(f);
}

}  // namespace
