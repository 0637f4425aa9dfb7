// Issue 46: every job ends with a model. For each strategy, for built-in models (mlp, cnn, deepfm)
// and users' TorchScript modules (examples/torch: mlp, cnn, deepfm), a real `troupe run` job writes
// jobs/<id>/model/; plain PyTorch (Debian's /usr/bin/python3, no troupe) loads model.pt and scores
// the job's own test records (exported by export_records) to troupe's own evaluation in result.json
// within 1e-5 (check_model.py). Then the model of a job that did not finish: `troupe export` of a
// running job (from its checkpoints), and an allreduce job whose runner is SIGKILLed, resumed from
// its ring checkpoint with nothing trained twice.
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "../job/job_harness.hpp"
#include "disk_faults.hpp"
#include "run_command.hpp"
#include "troupe/storage/task_journal.hpp"

namespace troupe::testing {
namespace {

namespace fs = std::filesystem;

// A shell command's output (stderr joined); its exit code in `code`.
std::string run(const std::string& cmd, int* code = nullptr) {
  auto r = test_util::run_command(cmd);
  if (code) *code = r.code;
  return r.out;
}

// The example modules, scripted once per test process.
std::string module(const std::string& name) {
  static const std::string dir = [] {
    auto d = fs::temp_directory_path() / ("troupe-model-modules-" + std::to_string(::getpid()));
    fs::create_directories(d);
    for (const char* m : {"mlp", "cnn"})
      run("/usr/bin/python3 " TROUPE_SOURCE_DIR "/examples/torch/" + std::string(m) + ".py " +
          (d / m).string() + ".pt");
    run("/usr/bin/python3 " TROUPE_SOURCE_DIR "/examples/torch/deepfm.py 6 4 8 " +
        (d / "deepfm.pt").string());
    return d.string();
  }();
  return dir + "/" + name + ".pt";
}

// A record store written out for check_model.py at `out` (a file prefix), which it returns.
std::string export_records(const std::string& store, const std::string& out) {
  run(std::string(TROUPE_EXPORT_RECORDS) + " " + store + " " + out);
  return out;
}

// The job's test store (its dataset cache holds one entry) written out for check_model.py.
std::string test_records(const std::string& cache, const std::string& out) {
  for (const auto& e : fs::directory_iterator(cache))
    if (fs::is_directory(e.path() / "test")) return export_records((e.path() / "test").string(), out);
  ADD_FAILURE() << "no record store in " << cache;
  return out;
}

// Runs the job to its end and checks its model in plain PyTorch against its own evaluation. A job on
// the user's own stores names its test store (`test_store`) and, for a Criteo store, the TSV file it
// was imported from (`criteo_tsv`: plain Python turns its lines into the test records by model.json's
// `input` rules).
void expect_exported_model(const std::string& name, const std::string& toml, int epochs,
                           const std::string& test_store = "", const std::string& criteo_tsv = "") {
  const std::string cache = test_root(name + "-cache");
  auto r = start_job(name, toml, {.root = "", .dataset_cache = cache, .job_id = ""});
  ASSERT_EQ(wait_job(r, std::chrono::seconds(400)), 0) << read_file(r.err_file);
  auto res = result(r);
  ASSERT_EQ(res.value("model_dir", ""), r.job_dir + "/model") << res.dump();
  ASSERT_TRUE(fs::is_regular_file(r.job_dir + "/model/model.pt"));
  ASSERT_TRUE(fs::is_regular_file(r.job_dir + "/model/model.json"));
  const auto meta = nlohmann::json::parse(read_file(r.job_dir + "/model/model.json"));
  EXPECT_EQ(meta.value("model", ""), res.value("model", "")) << meta.dump();
  EXPECT_EQ(meta["job"].value("strategy", ""), res.value("strategy", "")) << meta.dump();
  EXPECT_EQ(meta["job"].value("from", ""), "final") << meta.dump();
  // The optimizer's steps (async_ps: the shards' pushes applied; local_sgd: the ring's averaging
  // rounds, 1 for the initial weights) and the last data epoch.
  EXPECT_GT(meta["job"].value("step", 0), 0) << meta.dump();
  EXPECT_EQ(meta["job"].value("data_epoch", -1), epochs - 1) << meta.dump();
  // model.json says how a raw example becomes the module's input: the training store's source, and
  // for Fashion-MNIST the scale that plain Python applies to the idx file's bytes to get the test
  // records bit for bit.
  const std::string source = meta["input"].value("source", "");
  EXPECT_FALSE(source.empty()) << meta.dump();
  std::string raw;
  if (source.rfind("fashion-mnist:", 0) == 0) {
    EXPECT_EQ(meta["input"].value("dense_scale", 0.0), static_cast<double>(1.0f / 255.0f)) << meta.dump();
    // nn::fashion_mnist_default_dir, where the job read it (Debian's dataset-fashion-mnist).
    std::string idx = "/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte";
    if (!fs::exists(idx)) idx += ".gz";
    raw = " --idx-images " + idx;
  } else if (!criteo_tsv.empty()) {
    EXPECT_EQ(source.rfind("criteo:", 0), 0u) << meta.dump();  // the training store's file
    EXPECT_TRUE(meta["input"].contains("ids")) << meta.dump();
    raw = " --criteo-tsv " + criteo_tsv;
  }
  const std::string records =
      test_store.empty() ? test_records(cache, r.dir + "/test") : export_records(test_store, r.dir + "/test");
  int code = 0;
  auto out = run("/usr/bin/python3 " TROUPE_TEST_SOURCE_DIR "/check_model.py " + r.job_dir + "/model " +
                     records + " " + r.job_dir + "/result.json" + raw,
                 &code);
  EXPECT_EQ(code, 0) << out;
  if (!raw.empty()) {
    EXPECT_NE(out.find("\"raw_rows_match\": true"), std::string::npos) << out;
  }
  std::printf("%s: %s", name.c_str(), out.c_str());
}

std::string ring_job(const std::string& strategy, const std::string& model_section, int rows = 4000) {
  return "strategy = \"" + strategy + "\"\nworkers = 2\nrecords_per_task = 500\nsync_every = 4\n" +
         model_section +
         "[train]\nepochs = 1\nbatch_size = 64\noptimizer = \"adam\"\nlearning_rate = 0.002\n" +
         "[data]\nsource = \"fashion-mnist\"\nmax_train_rows = " + std::to_string(rows) +
         "\nmax_test_rows = 1000\n";
}

TEST(model_export, built_in_models_of_every_strategy_match_pytorch) {
  expect_exported_model("mlp-allreduce", ring_job("allreduce", "[model]\ntype = \"mlp\"\nhidden = [64]\n"),
                        1);
  expect_exported_model("cnn-local-sgd",
                        ring_job("local_sgd", "[model]\ntype = \"cnn\"\nfilters = [4, 8]\n", 1000), 1);
  expect_exported_model("deepfm-async-ps", ctr_job(2, 10000, 2), 2);
  // Batch norm under async_ps: its running statistics live on each worker (not on the shards), so
  // one worker evaluates, the one whose model is exported (spread over two, the job's figures were
  // no one model's: loss 0.3515 against the exported model's 0.3522).
  expect_exported_model("cnn-async-ps",
                        ring_job("async_ps", "[model]\ntype = \"cnn\"\nfilters = [4, 8]\n", 1000), 1);
  // And under allreduce: the ring averages gradients, not the statistics (test loss 0.16193
  // reported, 0.15947 the exported model's).
  expect_exported_model("cnn-allreduce",
                        ring_job("allreduce", "[model]\ntype = \"cnn\"\nfilters = [4, 8]\n", 1000), 1);
}

// A Criteo TSV as the dataset has it: a 0/1 label, 13 integer columns (some empty, negative or large)
// and 26 categorical ones (hex strings, some empty), `rows` lines from `seed`.
void write_criteo_tsv(const std::string& path, int rows, unsigned seed) {
  std::ofstream out(path);
  std::uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  auto next = [&x] {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return x;
  };
  for (int r = 0; r < rows; ++r) {
    const std::uint64_t signal = next() % 8;
    out << (next() % 8 < 2 + (signal < 3 ? 4 : 0) ? 1 : 0);
    for (int i = 0; i < 13; ++i) {
      const std::uint64_t v = next();
      out << '\t';
      if (v % 7 == 0) continue;  // missing
      out << (v % 11 == 0 ? -static_cast<long long>(v % 3)
                          : static_cast<long long>(v % (i == 0 ? 100000 : 40)));
    }
    for (int f = 0; f < 26; ++f) {
      const std::uint64_t v = next();
      out << '\t';
      if (v % 9 == 0) continue;  // missing
      char hex[9];
      std::snprintf(hex, sizeof hex, "%08llx", static_cast<unsigned long long>(f == 0 ? signal : v % 30));
      out << hex;
    }
    out << '\n';
  }
}

// A model of a store imported from Criteo's TSV: model.json's `input` names the file and the rules
// (log1p of the integers, the categoricals' hash) by which plain Python turns the test file's raw
// lines into the test records, bit for bit.
TEST(model_export, a_criteo_models_input_turns_raw_lines_into_its_records) {
  const std::string dir = test_root("criteo-raw");
  for (auto [name, rows, seed] : {std::tuple{"train", 3000, 1u}, std::tuple{"test", 600, 2u}}) {
    write_criteo_tsv(dir + "/" + name + ".tsv", rows, seed);
    std::string out;
    ASSERT_EQ(troupe("data import criteo " + dir + "/" + name + ".tsv --out " + dir + "/" + name +
                         "-store --buckets 1000 2>&1",
                     &out),
              0)
        << out;
  }
  expect_exported_model(
      "deepfm-criteo",
      "strategy = \"async_ps\"\nworkers = 2\nrecords_per_task = 500\n[ps]\nshards = 1\n[model]\ntype = "
      "\"deepfm\"\nembedding_dim = 4\nhidden = [16]\n[train]\nepochs = 1\nbatch_size = 64\n"
      "optimizer = \"adam\"\nlearning_rate = 0.01\n[data]\nsource = \"store\"\ntrain = \"" +
          dir + "/train-store\"\ntest = \"" + dir + "/test-store\"\n",
      1, dir + "/test-store", dir + "/test.tsv");
}

// troupe train --local ends with a model too (a job directory of its own under [job] root).
TEST(model_export, train_local_writes_a_model_that_matches_pytorch) {
  for (const std::string& model : {std::string("[model]\ntype = \"mlp\"\nhidden = [64]\n"),
                                   "[model]\ntype = \"torchscript\"\npath = \"" + module("mlp") + "\"\n"}) {
    const std::string dir = test_root("local"), cache = test_root("local-cache");
    std::ofstream(dir + "/job.toml") << "[job]\nroot = \"" << dir << "/jobs\"\ndataset_cache = \"" << cache
                                     << "\"\n"
                                     << ring_job("allreduce", model);
    std::string out;
    ASSERT_EQ(troupe("train --local " + dir + "/job.toml 2>/dev/null", &out), 0) << out;
    while (!out.empty() && out.back() == '\n') out.pop_back();
    const auto res = nlohmann::json::parse(out.substr(out.rfind('\n') + 1));
    const std::string model_dir = res.value("model_dir", "");
    ASSERT_FALSE(model_dir.empty()) << res.dump();
    const auto job_dir = fs::path(model_dir).parent_path().string();
    const auto job = nlohmann::json::parse(read_file(model_dir + "/model.json"))["job"];
    EXPECT_EQ(job.value("strategy", ""), "local");
    EXPECT_GT(job.value("step", 0), 0) << job.dump();
    EXPECT_EQ(job.value("data_epoch", -1), 0) << job.dump();
    // Its result.json says it ended as a runner's does: listed finished, and prunable (without a
    // status it read as a dead job, kept by `troupe jobs prune` for good).
    EXPECT_EQ(nlohmann::json::parse(read_file(job_dir + "/result.json")).value("status", ""), "finished");
    std::string listed;
    ASSERT_EQ(troupe("jobs prune --older-than 0s --dry-run --root " + dir + "/jobs", &listed), 0) << listed;
    EXPECT_NE(listed.find("would remove " + fs::path(job_dir).filename().string() + " (finished"),
              std::string::npos)
        << listed;
    int code = 0;
    auto check = run("/usr/bin/python3 " TROUPE_TEST_SOURCE_DIR "/check_model.py " + model_dir + " " +
                         test_records(cache, dir + "/test") + " " + job_dir + "/result.json",
                     &code);
    EXPECT_EQ(code, 0) << check;
    std::printf("train --local: %s", check.c_str());
  }
}

// A model that cannot be written (here: no TorchScript plugin to write model.pt with) fails the
// command after training: exit 1, the final line with its figures and model_error, and one line on
// stderr saying why (on the device machine the line was missing: exit 1 and nothing said).
TEST(model_export, train_local_that_cannot_write_its_model_says_why) {
  const std::string dir = test_root("local-noplugin"), cache = test_root("local-noplugin-cache");
  std::ofstream(dir + "/job.toml") << "[job]\nroot = \"" << dir << "/jobs\"\ndataset_cache = \"" << cache
                                   << "\"\n"
                                   << ring_job("allreduce", "[model]\ntype = \"mlp\"\nhidden = [16]\n");
  ::setenv("TROUPE_TORCHSCRIPT_PLUGIN", (dir + "/no-such-plugin.so").c_str(), 1);
  std::string out;
  const int code = troupe("train --local " + dir + "/job.toml 2>" + dir + "/err", &out);
  ::unsetenv("TROUPE_TORCHSCRIPT_PLUGIN");
  EXPECT_EQ(code, 1) << out;
  while (!out.empty() && out.back() == '\n') out.pop_back();
  const auto res = nlohmann::json::parse(out.substr(out.rfind('\n') + 1));
  EXPECT_NE(res.value("model_error", "").find("no-such-plugin.so"), std::string::npos) << res.dump();
  EXPECT_FALSE(res.value("ok", true)) << res.dump();  // it said "ok": true with exit 1
  EXPECT_GT(res.value("test_accuracy", 0.0), 0.5) << res.dump();
  const std::string err = read_file(dir + "/err");
  EXPECT_NE(err.find("troupe: error: the trained model was not written: "), std::string::npos) << err;
  EXPECT_NE(err.find("no-such-plugin.so"), std::string::npos) << err;
}

// A job that did its work but whose model cannot be written (here: a plugin that is no library;
// before: a layer with no TorchScript form) fails, exit 1, saying why and how to write the model
// later; it exited 0 with model_dir null and one log line. `troupe export` writes it once mended.
TEST(model_export, a_job_whose_model_cannot_be_written_fails_and_says_how_to_write_it_later) {
  const std::string cache = test_root("badplugin-cache");
  std::ofstream(cache + "/bad-plugin.so") << "not a shared library\n";
  ::setenv("TROUPE_TORCHSCRIPT_PLUGIN", (cache + "/bad-plugin.so").c_str(), 1);
  auto r = start_job("badplugin", ring_job("allreduce", "[model]\ntype = \"mlp\"\nhidden = [16]\n"),
                     {.root = "", .dataset_cache = cache, .job_id = ""});
  const int rc = wait_job(r, std::chrono::seconds(300));
  ::unsetenv("TROUPE_TORCHSCRIPT_PLUGIN");
  EXPECT_EQ(rc, 1) << read_file(r.err_file);
  const auto res = nlohmann::json::parse(read_file(r.job_dir + "/result.json"));
  EXPECT_EQ(res.value("status", ""), "failed") << res.dump();
  EXPECT_FALSE(res.value("ok", true));
  const std::string reason = res.value("reason", "");
  EXPECT_NE(reason.find("every task done, but the model could not be written (`troupe export " + r.job_dir),
            std::string::npos)
      << reason;
  EXPECT_NE(reason.find("bad-plugin.so"), std::string::npos) << reason;
  EXPECT_GT(res.value("tasks_done", 0), 0) << res.dump();
  std::string out;
  ASSERT_EQ(troupe("export " + r.job_dir + " 2>&1", &out), 0) << out;
  EXPECT_TRUE(fs::is_regular_file(r.job_dir + "/model/model.pt"));
}

// A troupe built without libtorch (the plugin absent: TROUPE_TORCHSCRIPT_PLUGIN names no file): the
// job finishes, its runner says how to write model.pt later (told by `troupe export`'s exit code
// exit_not_built, not by its text), and `troupe export` writes it once the plugin is there.
TEST(model_export, a_job_without_the_plugin_finishes_and_its_model_is_written_later) {
  const std::string cache = test_root("noplugin-cache");
  ::setenv("TROUPE_TORCHSCRIPT_PLUGIN", (cache + "/no-such-plugin.so").c_str(), 1);
  auto r = start_job("noplugin", ring_job("allreduce", "[model]\ntype = \"mlp\"\nhidden = [16]\n"),
                     {.root = "", .dataset_cache = cache, .job_id = ""});
  const int rc = wait_job(r, std::chrono::seconds(300));
  std::string out;
  const int later = troupe("export " + r.job_dir + " 2>&1", &out);
  ::unsetenv("TROUPE_TORCHSCRIPT_PLUGIN");
  ASSERT_EQ(rc, 0) << read_file(r.err_file);
  const std::string err = read_file(r.err_file);
  EXPECT_NE(err.find("model.pt not written: this troupe was built without libtorch"), std::string::npos)
      << err;
  EXPECT_EQ(later, 4) << out;  // exit_not_built (3 is `troupe run`'s "stopped on request")
  EXPECT_NE(out.find("no-such-plugin.so (missing)"), std::string::npos) << out;
  EXPECT_FALSE(fs::exists(r.job_dir + "/model/model.pt"));
  ASSERT_EQ(troupe("export " + r.job_dir + " 2>&1", &out), 0) << out;
  EXPECT_TRUE(fs::is_regular_file(r.job_dir + "/model/model.pt"));
  // --out: a relative name, then the same place again (an old model is replaced); a directory of
  // the user's is refused and keeps its files; so is a file.
  const std::string here = test_root("export-out");
  const std::string in_here = "cd " + here + " && " TROUPE_BIN " export " + r.job_dir;
  ASSERT_EQ(test_util::run_command(in_here + " --out mine 2>&1").code, 0);
  ASSERT_EQ(test_util::run_command(in_here + " --out mine 2>&1").code, 0) << "an old model is replaced";
  EXPECT_TRUE(fs::is_regular_file(here + "/mine/model.json"));
  fs::create_directories(here + "/docs/sub");
  std::ofstream(here + "/docs/notes.txt") << "precious";
  auto refused = test_util::run_command(in_here + " --out docs 2>&1");
  EXPECT_EQ(refused.code, 2) << refused.out;
  EXPECT_NE(refused.out.find("holds '"), std::string::npos) << refused.out;
  EXPECT_EQ(read_file(here + "/docs/notes.txt"), "precious");
  EXPECT_TRUE(fs::is_directory(here + "/docs/sub"));
  refused = test_util::run_command(in_here + " --out docs/notes.txt 2>&1");
  EXPECT_EQ(refused.code, 2) << refused.out;
  EXPECT_NE(refused.out.find("exists and is not a directory"), std::string::npos) << refused.out;
  // A disk that fills while model.pt is written: an error naming the file, nothing left behind
  // (libtorch's archive writer threw from its destructor: the export aborted, leaving its temporary
  // directory).
  fs::create_directories(here + "/full");
  {
    test_util::small_tmpfs full(here + "/full", "1m");
    if (!full.mounted) {
      std::printf("(skipped the full-disk export: cannot mount a tmpfs here, needs root)\n");
    } else {
      full.fill();
      auto no_room = test_util::run_command(in_here + " --out full/m 2>&1");
      EXPECT_EQ(no_room.code, 1) << no_room.out;
      EXPECT_NE(no_room.out.find("no space left on device: "), std::string::npos) << no_room.out;
      EXPECT_NE(no_room.out.find("model.pt (writing)"), std::string::npos) << no_room.out;
      for (const auto& e : fs::directory_iterator(here + "/full"))
        EXPECT_EQ(e.path().filename().string().find(".tmp-"), std::string::npos) << "left " << e.path();
    }
  }
  for (const auto& e : fs::directory_iterator(here))
    EXPECT_EQ(e.path().filename().string().find(".tmp-"), std::string::npos) << "left " << e.path();
}

TEST(model_export, users_torchscript_modules_of_every_strategy_match_pytorch) {
  const auto torch = [](const std::string& m) {
    return "[model]\ntype = \"torchscript\"\npath = \"" + module(m) + "\"\n";
  };
  expect_exported_model("torch-mlp-allreduce", ring_job("allreduce", torch("mlp")), 1);
  expect_exported_model("torch-cnn-local-sgd", ring_job("local_sgd", torch("cnn"), 1000), 1);
  const std::string ctr =
      "strategy = \"async_ps\"\nworkers = 2\nrecords_per_task = 2048\n[ps]\nshards = 2\n"
      "[model]\ntype = \"torchscript\"\npath = \"" +
      module("deepfm") +
      "\"\nembedding_dim = 8\n[train]\nepochs = 1\nbatch_size = 128\noptimizer = \"adam\"\n"
      "learning_rate = 0.005\n[data]\nsource = \"synthetic-ctr\"\nrows = 20000\ntest_rows = 5000\n"
      "fields = 6\ndense_dim = 4\nvocab_per_field = 50\n";
  expect_exported_model("torch-deepfm-async-ps", ctr, 1);
}

// An allreduce MLP job on `rows` Fashion-MNIST rows for `epochs` epochs, each worker paced at `rate`
// samples/s, a ring checkpoint every `checkpoint_ms`.
std::string paced_ring_job(int checkpoint_ms, int rows, int epochs, int rate,
                           const std::string& strategy = "allreduce") {
  std::string toml = "checkpoint_every_ms = " + std::to_string(checkpoint_ms) + "\n" +
                     ring_job(strategy, "[model]\ntype = \"mlp\"\nhidden = [64]\n", rows);
  toml.replace(
      toml.find("[train]\nepochs = 1\n"), 18,
      "[train]\nepochs = " + std::to_string(epochs) + "\nmax_samples_per_s = " + std::to_string(rate) + "\n");
  return toml;
}

// A ring job's replicas are durable: `troupe export` of the running job writes its model from the
// latest ring checkpoint; its runner SIGKILLed, `troupe run --resume` starts the replicas from that
// checkpoint, trains again exactly the DONE tasks whose rows were applied after the checkpoint's step
// (lost with the replicas; before 2026-12-06 they were kept done: their rows were in no model), no
// other, and ends no more than 0.03 below the accuracy of the same job run without the kill.
TEST(model_export, an_allreduce_job_resumes_from_its_ring_checkpoint_after_a_runner_sigkill) {
  const std::string cache = test_root("ring-resume-cache");
  // 3 epochs of 30,000 rows (at most 10,000 samples/s a worker: about 5 s). The accuracy of such runs
  // varies from run to run (the ring's timing, which rank trains the epoch's tail alone): 12 runs
  // without the kill gave 0.8332-0.8498, 4 resumed ones 0.8288-0.8566 (2026-12-06; a tolerance of
  // 0.01 either way failed a CI run at +0.0124); 7 more resumed on 2026-12-07 gave 0.8372-0.8506 and,
  // once under the default suite's load, 0.8196 against 0.8442 (0.02 below failed it): 0.03 below.
  // A checkpoint each 1.5 s: the kill comes between two.
  std::string toml = paced_ring_job(1500, 30000, 3, 10000);
  toml.replace(toml.find("max_test_rows = 1000"), 20, "max_test_rows = 5000");
  auto whole = start_job("ring-whole", toml, {.root = "", .dataset_cache = cache, .job_id = ""});
  ASSERT_EQ(wait_job(whole, std::chrono::seconds(400)), 0) << read_file(whole.err_file);
  const double reference = result(whole).value("test_accuracy", 0.0);

  auto r = start_job("ring-resume", toml, {.root = "", .dataset_cache = cache, .job_id = ""});
  ASSERT_TRUE(wait_status(
      r,
      [&](const nlohmann::json& j) {
        return j["tasks"]["done"].get<std::uint64_t>() >= 12 &&
               fs::exists(r.job_dir + "/checkpoints/ring/state.json");
      },
      std::chrono::seconds(180)))
      << read_file(r.err_file);
  int code = 0;
  auto out =
      run(std::string(TROUPE_BIN) + " export " + r.job_dir + " --out " + r.dir + "/running-model", &code);
  ASSERT_EQ(code, 0) << out;
  const auto running = nlohmann::json::parse(read_file(r.dir + "/running-model/model.json"));
  EXPECT_EQ(running["job"].value("from", ""), "checkpoint") << running.dump();
  EXPECT_GT(running["job"].value("step", 0), 0) << running.dump();
  // The kill once tasks were done after the latest checkpoint (the journal and the checkpoint read as
  // the job runs; a checkpoint written since may cover them: what the kill lost is read after it).
  ASSERT_TRUE(poll_until([&] { return done_after(done_steps(r), ring_checkpoint_step(r)) > 0; },
                         std::chrono::seconds(60)));
  ASSERT_EQ(::kill(r.pid, SIGKILL), 0);
  EXPECT_EQ(wait_job(r, std::chrono::seconds(30)), -SIGKILL);
  ASSERT_TRUE(poll_until([&] { return no_processes_of(r); }, std::chrono::seconds(30)));
  const auto before = done_attempts(r);
  const auto steps = done_steps(r);
  ASSERT_GE(before.size(), 12u);
  ASSERT_LT(before.size(), 180u) << "the job was over before the kill";
  const std::uint64_t kept_step = ring_checkpoint_step(r);
  ASSERT_GT(kept_step, 0u);
  for (const auto& [id, step] : steps) EXPECT_GT(step, 0u) << "task " << id << ": no step reported";
  const std::size_t lost = done_after(steps, kept_step);
  EXPECT_GT(lost, 0u) << "no task was done after the checkpoint of step " << kept_step;
  std::printf(
      "at the kill: %zu of 180 tasks done; the ring checkpoint at step %llu; %zu tasks done after it\n",
      before.size(), static_cast<unsigned long long>(kept_step), lost);
  resume_job(r);
  ASSERT_EQ(wait_job(r, std::chrono::seconds(400)), 0) << read_file(r.err_file);
  auto res = result(r);
  EXPECT_EQ(res.value("status", ""), "finished") << res.dump();
  EXPECT_TRUE(res.value("resumed", false)) << res.dump();
  EXPECT_EQ(res.contains("reopened_tasks") ? res["reopened_tasks"].value("done", 0ull) : 0ull, lost)
      << res.dump();
  expect_all_done(r);
  const std::string logs = expect_trained_again_after(r, before, steps, kept_step);
  // With the goodput controller of the same moment ([train] noise_scale is on by default).
  EXPECT_NE(logs.find("starts from the ring's latest checkpoint with the strategy's state ("),
            std::string::npos);
  EXPECT_NE(logs.find("what later steps applied was lost with the replicas"), std::string::npos);
  // Every record of the 3 epochs once: the reopened tasks' records are counted when they are done
  // again, not twice (before 2026-12-06 records_done kept the first count too).
  EXPECT_EQ(res.value("records_done", 0ull), 90000ull) << res.dump();
  EXPECT_GE(res.value("test_accuracy", 0.0), reference - 0.03) << res.dump();
  std::printf("uninterrupted %.4f, resumed %.4f\n", reference, res.value("test_accuracy", 0.0));
  EXPECT_TRUE(no_processes_of(r));
}

// Every worker of a ring job (allreduce unless `strategy` says) SIGKILLed at once while its runner
// lives (harness: kill_the_whole_ring): the job `name`, a checkpoint every `checkpoint_ms` (600,000:
// none before the kill), 3 epochs of 30,000 rows in 180 tasks. Returns the job's logs.
std::string kill_the_whole_ring(const std::string& name, int checkpoint_ms,
                                const std::string& strategy = "allreduce") {
  auto r = start_job(name, paced_ring_job(checkpoint_ms, 30000, 3, 10000, strategy));
  return kill_the_whole_ring(r, checkpoint_ms < 600000, 180, 90000);
}

TEST(model_export, a_ring_that_lost_every_replica_trains_again_what_its_checkpoint_lacks) {
  const std::string logs = kill_the_whole_ring("ring-all-killed", 1500);
  EXPECT_NE(logs.find("the ring starts again from its checkpoint of step "), std::string::npos);
}

// The same under local_sgd, whose tasks name the averaging round that put their rows into every
// replica and whose checkpoints keep the ring's round (before 2026-12-07 its tasks named no step and
// stayed done, their rows in no model, and its checkpoints' step was a replica's optimizer steps).
TEST(model_export, a_local_sgd_ring_that_lost_every_replica_trains_again_what_its_checkpoint_lacks) {
  const std::string logs = kill_the_whole_ring("local-sgd-all-killed", 1500, "local_sgd");
  EXPECT_NE(logs.find("the ring starts again from its checkpoint of step "), std::string::npos);
}

// The same before the ring's first checkpoint: the new ring starts from its initial weights, and every
// task done is trained again (before 2026-12-07 they all stayed done while the runner lived, their
// rows in no model; only `--resume` trained them again).
TEST(model_export, a_ring_that_lost_every_replica_before_its_first_checkpoint_trains_everything_again) {
  const std::string logs = kill_the_whole_ring("ring-all-killed-early", 600000);
  EXPECT_NE(logs.find("the ring starts again from its initial weights (no checkpoint yet: "
                      "job.checkpoint_every_ms = 600000)"),
            std::string::npos);
}

// A ring job stopped before its first periodic checkpoint keeps what it learnt: the writer, as it
// leaves, hands its replica to a last ring checkpoint; the stopped job's model is written from it, and
// `--resume` goes on from it to the end.
TEST(model_export, a_ring_job_stopped_before_its_first_checkpoint_keeps_what_it_learnt) {
  using namespace std::chrono_literals;
  for (std::string strategy : {"allreduce", "local_sgd"}) {
    SCOPED_TRACE(strategy);
    std::string toml = "checkpoint_every_ms = 600000\n" +
                       ring_job(strategy, "[model]\ntype = \"mlp\"\nhidden = [64]\n", 30000);
    toml.replace(toml.find("[train]\nepochs = 1\n"), 18, "[train]\nepochs = 1\nmax_samples_per_s = 4000\n");
    auto r = start_job("ring-stop-" + strategy, toml);
    ASSERT_TRUE(wait_status(
        r, [](const nlohmann::json& j) { return j["tasks"]["done"].get<std::uint64_t>() >= 2; }, 180s))
        << read_file(r.err_file);
    std::string out;
    ASSERT_EQ(troupe("stop --job-dir " + r.job_dir, &out), 0) << out;
    ASSERT_EQ(wait_job(r, 30s), 3) << read_file(r.err_file);
    auto res = result(r);
    EXPECT_EQ(res.value("model_dir", ""), r.job_dir + "/model") << res.dump();
    auto model = nlohmann::json::parse(read_file(r.job_dir + "/model/model.json"), nullptr, false);
    ASSERT_TRUE(model.is_object()) << res.dump();
    EXPECT_EQ(model["job"].value("from", ""), "checkpoint") << model.dump();
    EXPECT_GT(model["job"].value("step", 0), 0) << model.dump();
    resume_job(r);
    ASSERT_EQ(wait_job(r, 300s), 0) << read_file(r.err_file);
    EXPECT_TRUE(result(r).value("resumed", false));
    expect_all_done(r);
  }
}

// A ring job whose runner is SIGKILLed before any ring checkpoint lost what its DONE tasks taught (it
// lived only in the replicas): `--resume` trains them again, says so in its result, and trains every
// sample of the job (it trained the rest on a fresh model and reported success).
TEST(model_export, a_ring_job_killed_before_any_checkpoint_trains_its_done_tasks_again) {
  using namespace std::chrono_literals;
  std::string toml = paced_ring_job(600000, 20000, 1, 4000);
  auto r = start_job("ring-kill-early", toml);
  ASSERT_TRUE(wait_status(
      r, [](const nlohmann::json& j) { return j["tasks"]["done"].get<std::uint64_t>() >= 3; }, 180s))
      << read_file(r.err_file);
  ASSERT_EQ(::kill(r.pid, SIGKILL), 0);
  EXPECT_EQ(wait_job(r, 30s), -SIGKILL);
  ASSERT_TRUE(poll_until([&] { return no_processes_of(r); }, 30s));
  ASSERT_FALSE(fs::exists(r.job_dir + "/checkpoints/ring/state.json"));
  const auto before = done_attempts(r);
  const auto done_before = before.size();
  ASSERT_GE(done_before, 3u);
  resume_job(r);
  ASSERT_EQ(wait_job(r, 300s), 0) << read_file(r.err_file);
  auto res = result(r);
  EXPECT_EQ(res["reopened_tasks"].value("done", 0ull), done_before) << res.dump();
  expect_all_done(r);
  const auto after = done_attempts(r);
  for (const auto& [id, attempt] : before)
    EXPECT_GT(after.at(id), attempt) << "task " << id << " was not trained again";
}

// The first progress window's loss in a job's timeline (-1 when none was written).
double first_loss(const job_run& r) {
  std::ifstream in(r.job_dir + "/events.jsonl");
  for (std::string line; std::getline(in, line);) {
    auto e = nlohmann::json::parse(line, nullptr, false);
    if (e.is_object() && e.value("kind", "") == "metrics" && e.contains("loss") && e["loss"].is_number())
      return e["loss"].get<double>();
  }
  return -1;
}

// Continue training (Weibo's daily incremental training): job B, [model] init = job A, starts at A's
// final loss, not at a fresh model's, and ends at least as good; a copy of A's model directory
// serves as well; a model of other shapes is refused before any node starts, naming the tensor.
TEST(model_export, a_job_initialised_from_another_starts_where_it_ended) {
  const std::string cache = test_root("init-cache");
  const auto job = [](const std::string& init, const std::string& hidden) {
    std::string t = ring_job("allreduce",
                             "[model]\ntype = \"mlp\"\nhidden = " + hidden + "\n" +
                                 (init.empty() ? "" : "init = \"" + init + "\"\n"),
                             30000);
    t.replace(t.find("max_test_rows = 1000"), 20, "max_test_rows = 5000");
    // Paced (5,000 samples/s a worker: about 3 s) so that the timeline has progress windows.
    t.replace(t.find("[train]\n"), 8, "[train]\nmax_samples_per_s = 5000\n");
    return t;
  };
  auto a = start_job("init-a", job("", "[64]"), {.root = "", .dataset_cache = cache, .job_id = ""});
  ASSERT_EQ(wait_job(a, std::chrono::seconds(400)), 0) << read_file(a.err_file);
  const auto ra = result(a);
  auto b = start_job("init-b", job(a.job_dir, "[64]"), {.root = "", .dataset_cache = cache, .job_id = ""});
  ASSERT_EQ(wait_job(b, std::chrono::seconds(400)), 0) << read_file(b.err_file);
  const auto rb = result(b);
  const double fresh = 2.30, a_final = ra.value("train_loss", 9.0), b_first = first_loss(b);
  std::printf("A: final loss %.4f accuracy %.4f; B: first loss %.4f, final accuracy %.4f\n", a_final,
              ra.value("test_accuracy", 0.0), b_first, rb.value("test_accuracy", 0.0));
  ASSERT_GT(b_first, 0);
  EXPECT_LT(b_first, a_final * 1.25 + 0.05)
      << "B starts far from where A ended (a fresh model's loss is ~" << fresh << ")";
  EXPECT_GE(rb.value("test_accuracy", 0.0), ra.value("test_accuracy", 1.0) - 0.005) << rb.dump();
  EXPECT_NE(read_file(b.job_dir + "/logs/worker-0.log").find("starts from " + a.job_dir), std::string::npos);
  // Where it started from, in its result and its timeline.
  EXPECT_EQ(rb.value("init", ""), a.job_dir) << rb.dump();
  const std::string events = read_file(b.job_dir + "/events.jsonl");
  EXPECT_NE(events.find("\"kind\":\"init\""), std::string::npos) << events.substr(0, 2000);
  EXPECT_EQ(ra.value("init", "none"), "none") << "a job of its own has no init";

  const std::string copy = test_root("init-copy") + "/model";
  fs::copy(a.job_dir + "/model", copy, fs::copy_options::recursive);
  auto c = start_job("init-c", job(copy, "[64]"), {.root = "", .dataset_cache = cache, .job_id = ""});
  ASSERT_EQ(wait_job(c, std::chrono::seconds(400)), 0) << read_file(c.err_file);
  EXPECT_LT(first_loss(c), a_final * 1.25 + 0.05);

  auto d = start_job("init-d", job(copy, "[32]"), {.root = "", .dataset_cache = cache, .job_id = ""});
  // Refused before its job directory is made (exit 2), as `troupe config check` refuses it.
  EXPECT_EQ(wait_job(d, std::chrono::seconds(120)), 2);
  const auto why = read_file(d.err_file);
  EXPECT_NE(why.find("tensor 'dense_1/weight' has 50176 values in the state; the model's is [784, 32]"),
            std::string::npos)
      << why;
  EXPECT_FALSE(fs::exists(d.job_dir + "/result.json")) << "a refused job left a result";
}

// The trained steps in one TROUPE_STEP_LOG file (a line per step).
std::size_t steps_logged_of(const std::string& file) {
  std::size_t n = 0;
  std::ifstream in(file);
  for (std::string line; std::getline(in, line);) n += !line.empty();
  return n;
}

// The trained steps in TROUPE_STEP_LOG's files under `dir` (every worker).
std::size_t steps_logged(const std::string& dir) {
  std::size_t n = 0;
  for (const auto& e : fs::directory_iterator(dir)) n += steps_logged_of(e.path().string());
  return n;
}

// 4 tasks of 3,000 Fashion-MNIST rows in batches of 64 (47 steps each) for 2 workers at most 2,000
// rows/s each (about 1.5 s a task); `job_keys` after records_per_task.
std::string mid_task_job(const std::string& strategy, const std::string& job_keys) {
  std::string toml = ring_job(strategy, "[model]\ntype = \"mlp\"\nhidden = [64]\n", 12000);
  toml.replace(toml.find("records_per_task = 500"), 22, "records_per_task = 3000" + job_keys);
  toml.replace(toml.find("[train]\nepochs = 1\n"), 18, "[train]\nepochs = 1\nmax_samples_per_s = 2000\n");
  return toml;
}

// A job stopped while its workers are partway through their tasks trains no row twice: each leaving
// worker hands its task back with the rows it trained (in the ring's replicas and its last checkpoint,
// or in the PS shards), and `--resume` trains the rest of each. The stopped run's and the resumed run's
// steps add up to an uninterrupted job's: 4 tasks of 3,000 rows in batches of 64 are 4 x 47 steps
// (before 2026-12-05 each partly trained task went back whole: its first steps were trained twice).
TEST(model_export, a_job_stopped_mid_task_trains_no_row_twice) {
  using namespace std::chrono_literals;
  for (std::string strategy : {"allreduce", "async_ps"}) {
    SCOPED_TRACE(strategy);
    const std::string toml = mid_task_job(strategy, "");
    const std::string logs = test_root("mid-task-stop-steps-" + strategy);
    fs::create_directories(logs + "/first");
    fs::create_directories(logs + "/resumed");
    ::setenv("TROUPE_STEP_LOG", (logs + "/first").c_str(), 1);
    auto r = start_job("mid-task-stop-" + strategy, toml);
    // Halfway through the second round of tasks (each takes ~1.5 s at 2,000 rows/s).
    ASSERT_TRUE(wait_status(
        r, [](const nlohmann::json& j) { return j["tasks"]["done"].get<std::uint64_t>() >= 1; }, 180s))
        << read_file(r.err_file);
    std::this_thread::sleep_for(600ms);
    std::string out;
    ASSERT_EQ(troupe("stop --job-dir " + r.job_dir, &out), 0) << out;
    ASSERT_EQ(wait_job(r, 30s), 3) << read_file(r.err_file);
    const auto first = steps_logged(logs + "/first");
    ::setenv("TROUPE_STEP_LOG", (logs + "/resumed").c_str(), 1);
    resume_job(r);
    ASSERT_EQ(wait_job(r, 300s), 0) << read_file(r.err_file);
    ::unsetenv("TROUPE_STEP_LOG");
    expect_all_done(r);
    const auto resumed = steps_logged(logs + "/resumed");
    std::string all;
    for (const auto& e : fs::directory_iterator(r.job_dir + "/logs")) all += read_file(e.path().string());
    const bool handed_back = all.find("goes back with") != std::string::npos;
    EXPECT_TRUE(handed_back) << "no worker was partway through a task at the stop";
    if (handed_back) {
      EXPECT_NE(all.find("rows were trained by an earlier holder"), std::string::npos);
    }
    EXPECT_EQ(first + resumed, 4u * 47u) << first << " steps before the stop, " << resumed << " after";
    std::printf("%s: %zu steps before the stop, %zu after\n", strategy.c_str(), first, resumed);
  }
}

// The rows of `holder`'s task kept as it died, from its requeue in the timeline ("holder gone: task T
// with N rows trained kept"); 0 when it went back whole, or was not requeued.
std::uint64_t rows_kept_at_death(const job_run& r, const std::string& holder) {
  std::ifstream in(r.job_dir + "/events.jsonl");
  const std::string with = " with ";
  for (std::string line; std::getline(in, line);) {
    auto e = nlohmann::json::parse(line, nullptr, false);
    if (!e.is_object() || e.value("kind", "") != "requeue" || e.value("node", "") != holder) continue;
    const std::string cause = e.value("cause", "");
    if (cause.rfind("holder gone: task ", 0) != 0) continue;
    return std::stoull(cause.substr(cause.find(with) + with.size()));
  }
  return 0;
}

// DONE tasks whose holder was `holder` (node#incarnation), from the journal.
std::size_t done_by(const job_run& r, const std::string& holder) {
  auto j = storage::task_journal::open(r.job_dir + "/journal");
  auto done = j ? j->list(storage::task_state::done) : expected<std::vector<storage::task>>(j.err());
  if (!done) return 0;
  return static_cast<std::size_t>(
      std::count_if(done->begin(), done->end(), [&](const auto& t) { return t.holder == holder; }));
}

// Runs `toml` as job `name` with every worker's steps logged (TROUPE_STEP_LOG) into `logs`, a fresh
// folder, SIGKILLs worker-1 once its log has `steps` steps (line-buffered: it says where the worker
// is whatever the machine's load), and waits for the job to end ok with every task done.
void kill_worker_1_after_steps(const std::string& name, const std::string& toml, std::size_t steps,
                               job_run& r, std::string& logs) {
  using namespace std::chrono_literals;
  logs = test_root(name + "-steps");
  fs::create_directories(logs);
  ::setenv("TROUPE_STEP_LOG", logs.c_str(), 1);
  r = start_job(name, toml);
  ::unsetenv("TROUPE_STEP_LOG");  // the runner has it
  ASSERT_TRUE(poll_until([&] { return steps_logged_of(logs + "/worker-1#0.steps") >= steps; }, 180s))
      << read_file(r.err_file);
  const pid_t victim = node_pid(r, "worker-1");
  ASSERT_GT(victim, 0);
  ASSERT_EQ(::kill(victim, SIGKILL), 0);
  ASSERT_EQ(wait_job(r, 300s), 0) << read_file(r.err_file);
  expect_all_done(r);
}

// A worker SIGKILLed partway through a task costs it only the rows no surviving model holds: with its
// progress every 100 ms it told the master how many of its task's rows the ring's replicas applied (at
// which step) or the PS shards acknowledged, and its task goes back to TODO keeping the latest of
// those a surviving replica's step covers (any, on the shards). The steps add up exactly: the job's
// 4 x 47 plus the steps the killed worker trained on its task beyond the kept rows, a few (before
// 2026-12-06 the task went back whole, and every step of it was trained twice).
TEST(model_export, a_worker_killed_mid_task_costs_only_the_rows_no_survivor_holds) {
  using namespace std::chrono_literals;
  for (std::string strategy : {"allreduce", "async_ps"}) {
    SCOPED_TRACE(strategy);
    const std::string toml = mid_task_job(strategy, "\nprogress_every_ms = 100");
    // 30 steps into worker-1's second task (of 47: a second task's rows have been reported, and it
    // is not over).
    job_run r;
    std::string logs;
    ASSERT_NO_FATAL_FAILURE(kill_worker_1_after_steps("mid-task-kill-" + strategy, toml, 47 + 30, r, logs));
    const std::size_t total = steps_logged(logs);
    const std::size_t victim_steps = steps_logged_of(logs + "/worker-1#0.steps");
    const std::size_t done = done_by(r, "worker-1#0");
    ASSERT_GE(victim_steps, 47u * done);
    const std::size_t on_task = victim_steps - 47u * done;  // its steps on the task it held as it died
    const std::uint64_t kept = rows_kept_at_death(r, "worker-1#0");
    EXPECT_GT(kept, 0u) << "the killed worker's task went back whole (" << on_task << " steps trained on it)";
    EXPECT_EQ(kept % 64, 0u);
    EXPECT_LE(kept / 64, on_task);
    EXPECT_EQ(total, 4u * 47u + on_task - kept / 64) << total << " steps: the killed worker trained "
                                                     << on_task << " of its task, " << kept << " rows kept";
    std::printf(
        "%s: the killed worker trained %zu steps of its task; %llu rows (%llu steps) kept; %zu trained "
        "again\n",
        strategy.c_str(), on_task, static_cast<unsigned long long>(kept),
        static_cast<unsigned long long>(kept / 64), total - 4u * 47u);
  }
}

// local_sgd with `workers` workers on 188 tasks of one batch (12,000 rows in tasks of 64), averaging
// every 100 steps, at most 2,000 rows/s a worker.
std::string local_sgd_kill_job(int workers) {
  std::string toml = mid_task_job("local_sgd", "");
  toml.replace(toml.find("records_per_task = 3000"), 23, "records_per_task = 64");
  toml.replace(toml.find("sync_every = 4"), 14, "sync_every = 100");
  toml.replace(toml.find("workers = 2"), 11, "workers = " + std::to_string(workers));
  return toml;
}

// The tasks given back by a holder that goes on ("task T given back: ..." requeue events): the holder
// and the task of each (a task may be given back more than once, each time trained once more).
std::vector<std::pair<std::string, std::string>> given_back(const job_run& r) {
  std::vector<std::pair<std::string, std::string>> out;
  std::ifstream in(r.job_dir + "/events.jsonl");
  for (std::string line; std::getline(in, line);) {
    auto e = nlohmann::json::parse(line, nullptr, false);
    if (!e.is_object() || e.value("kind", "") != "requeue") continue;
    const std::string cause = e.value("cause", "");
    if (cause.find(" given back: ") != std::string::npos)
      out.emplace_back(e.value("node", ""), cause.substr(0, cause.find(" given back: ")));
  }
  return out;
}

// The steps `node` (worker-1#0) trained before the last resync that took its replica in (local_sgd:
// "ring epoch E (rank R of N): replicas averaged from rank(s) ...,R,... of round K"): their rows are in
// every replica since. At most: the log says the millisecond, and the batch offered again right after
// the resync may end within the same one.
std::size_t steps_before_its_last_resync(const std::string& log, const std::string& node,
                                         const std::string& steps_file) {
  static const std::regex line(
      R"((\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)\.(\d{3}) .*\(rank (\d+) of \d+\): replicas \w+ from rank\(s\) ([\d,]+) of round)");
  long long last_ms = -1;
  std::ifstream in(log);
  for (std::string l; std::getline(in, l);) {
    std::smatch m;
    if (l.find("[" + node + "]") == std::string::npos || !std::regex_search(l, m, line)) continue;
    std::istringstream ranks(m[4].str());
    bool in = false;
    for (std::string rank; std::getline(ranks, rank, ',');) in = in || rank == m[3].str();
    if (!in) continue;
    std::tm tm{};
    ::strptime(m[1].str().c_str(), "%Y-%m-%d %H:%M:%S", &tm);
    tm.tm_isdst = -1;  // spdlog writes local time
    last_ms = static_cast<long long>(std::mktime(&tm)) * 1000 + std::stoll(m[2].str());
  }
  std::size_t n = 0;
  std::ifstream steps(steps_file);
  for (std::string l; std::getline(steps, l);)
    if (!l.empty() && std::stoll(l) < (last_ms + 1) * 1000) ++n;
  return n;
}

// What a local_sgd job (local_sgd_kill_job) whose worker-1 was SIGKILLed after 15 steps, before its
// first averaging round, trained.
struct local_sgd_kill {
  std::size_t victim_steps = 0, total = 0;  // the killed worker's steps; every worker's
  std::size_t victim_done = 0;              // its tasks DONE: those a resync averaged before it died
  // The tasks the surviving workers gave back (the killed worker's own are among its steps).
  std::vector<std::pair<std::string, std::string>> back;
};
// Runs that job with `workers` workers as `name`. Of the killed worker's tasks only those a resync
// averaged into every replica before it died may be DONE (the others' rows were in its replica
// alone), and the steps add up to the job's 188 (tasks of one batch), plus every step the killed
// worker trained but those of its DONE tasks, plus one for each task a survivor gave back.
void run_local_sgd_kill(const std::string& name, int workers, local_sgd_kill& k) {
  job_run r;
  std::string logs;
  ASSERT_NO_FATAL_FAILURE(kill_worker_1_after_steps(name, local_sgd_kill_job(workers), 15, r, logs));
  k.victim_steps = steps_logged_of(logs + "/worker-1#0.steps");
  ASSERT_GE(k.victim_steps, 15u);
  k.back = given_back(r);
  std::erase_if(k.back, [](const auto& b) { return b.first == "worker-1#0"; });
  k.victim_done = done_by(r, "worker-1#0");
  const std::size_t averaged = steps_before_its_last_resync(r.job_dir + "/logs/worker-1.log", "worker-1#0",
                                                            logs + "/worker-1#0.steps");
  EXPECT_LE(k.victim_done, averaged) << "tasks done with their rows in no model";
  k.total = steps_logged(logs);
  EXPECT_EQ(k.total, 188u + k.victim_steps - k.victim_done + k.back.size())
      << "the killed worker trained " << k.victim_steps << " steps, " << k.victim_done << " of them DONE; "
      << k.back.size() << " tasks given back";
  std::printf(
      "local_sgd, %d workers: the killed worker trained %zu steps (%zu before a resync averaged its "
      "replica; %zu tasks DONE); the survivors gave %zu tasks back; %zu steps in all\n",
      workers, k.victim_steps, averaged, k.victim_done, k.back.size(), k.total);
}

// local_sgd: a worker's rows reach the model only at the ring's next averaging round (every 100
// steps here) or resync. A worker SIGKILLed before its first round has no task DONE under its name
// but those a resync took in (a worker that trained alone before the others joined): the tasks it
// trained to their end since were held, not reported, went back with it and were trained again, so
// the steps add up to the job's 188 plus every step it trained but its DONE ones (its survivor gives
// nothing back). Before 2026-12-07 they were reported at once: the job finished DONE without their
// rows in any model.
TEST(model_export, a_local_sgd_worker_killed_before_its_round_leaves_no_task_done_without_its_rows) {
  local_sgd_kill k;
  ASSERT_NO_FATAL_FAILURE(run_local_sgd_kill("local-sgd-kill", 2, k));
  EXPECT_TRUE(k.back.empty()) << k.back.size() << " tasks given back by the survivor";
}

// The same with 3 workers: the kill rebuilds the ring, whose resync averages the two survivors'
// replicas (both of the latest round), so neither loses its rows since the ring began and neither
// gives a task back; the replacement joins with nothing to lose. Before the end of 2026-12-07 the
// resync copied the most trained replica over the other, which gave back the tasks it had trained
// to their end (one step each here), trained again.
TEST(model_export, a_local_sgd_resync_averages_the_survivors_and_gives_nothing_back) {
  local_sgd_kill k;
  ASSERT_NO_FATAL_FAILURE(run_local_sgd_kill("local-sgd-resync", 3, k));
  EXPECT_TRUE(k.back.empty()) << k.back.size() << " tasks given back by the survivors";
}

}  // namespace
}  // namespace troupe::testing
