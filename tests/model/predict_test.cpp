// Issue 46: `troupe predict` and `troupe evaluate` as elastic jobs, and every error a model
// directory or its input can hold. A CSV of 100,000 rows (string labels, standardized columns) is
// imported, a model trained and exported; `troupe predict` on the raw CSV with a worker SIGKILLed
// mid-run gives every row once, in input order, with the probabilities plain PyTorch computes from
// the exported model.pt on the same rows (predict_reference.py, 1e-5). `troupe evaluate` on the
// job's test store reports what the job's own evaluation reported.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "../job/job_harness.hpp"
#include "run_command.hpp"

namespace troupe::testing {
namespace {

namespace fs = std::filesystem;

// A shell command's output (stderr joined); its exit code in `code`.
std::string sh(const std::string& cmd, int* code = nullptr) {
  auto r = test_util::run_command(cmd);
  if (code) *code = r.code;
  return r.out;
}

// 8 numeric columns of very different scales, a yes/no label that depends on them.
void write_csv(const std::string& path, std::size_t rows, bool label, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> g(0, 1);
  std::ofstream f(path);
  f << (label ? "answer," : "") << "a,b,c,d,e,f,g,h\n";
  for (std::size_t i = 0; i < rows; ++i) {
    double x[8];
    for (auto& v : x) v = g(rng);
    const double s = x[0] - 0.5 * x[1] + 0.8 * x[2] * x[3] + 0.3 * g(rng);
    if (label) f << (s > 0 ? "yes," : "no,");
    f << 1e5 * x[0] << ',' << x[1] << ',' << 1e-3 * x[2] << ',' << x[3] << ',' << 100 * x[4] << ',' << x[5]
      << ',' << x[6] << ',' << x[7] << '\n';
  }
}

// `troupe data import csv` of <dir>/train.csv into <dir>/store/{train,test} (a fifth held out), with
// `flags`; "" when it worked, else its output.
std::string import_store(const std::string& dir, const std::string& flags) {
  int code = 0;
  auto out = sh(std::string(TROUPE_BIN) + " data import csv " + dir + "/train.csv --out " + dir +
                    "/store --label answer --test-fraction 0.2 " + flags,
                &code);
  return code == 0 ? "" : out;
}

// Where the data of trained() is: its CSV and its store (store/train, store/test).
const std::string& data_dir() {
  static const std::string dir = test_root("predict-model");
  return dir;
}

// A trained, exported model of that data (once per test process): its job directory.
const std::string& trained() {
  static const std::string job = [] {
    const std::string& dir = data_dir();
    write_csv(dir + "/train.csv", 20000, true, 1);
    EXPECT_EQ(import_store(dir, "--standardize"), "");
    auto r =
        start_job("predict-train",
                  "strategy = \"allreduce\"\nworkers = 2\nrecords_per_task = 1000\n[model]\ntype = \"mlp\"\n"
                  "hidden = [32]\n[train]\nepochs = 3\nbatch_size = 64\noptimizer = \"adam\"\n"
                  "learning_rate = 0.005\n[data]\nsource = \"store\"\ntrain = \"" +
                      dir +
                      "/store/train\"\n"
                      "test = \"" +
                      dir + "/store/test\"\n");
    EXPECT_EQ(wait_job(r, std::chrono::seconds(300)), 0) << read_file(r.err_file);
    return r.job_dir;
  }();
  return job;
}

pid_t spawn(const std::vector<std::string>& args, const std::string& out) {
  pid_t pid = ::fork();
  if (pid == 0) {
    FILE* f = std::freopen(out.c_str(), "w", stdout);
    (void)f;
    ::dup2(1, 2);
    std::vector<char*> argv{const_cast<char*>("troupe")};
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execv(TROUPE_BIN, argv.data());
    _exit(127);
  }
  return pid;
}

// A prediction job trains nothing: exporting it is refused as such (it said "the job wrote no
// checkpoint yet", as if one would come).
void expect_export_refused(const std::string& job_dir) {
  std::string out;
  EXPECT_EQ(troupe("export " + job_dir, &out), 2) << out;
  EXPECT_NE(out.find("a prediction job (troupe predict or evaluate)"), std::string::npos) << out;
}

// The model directory is exported again mid-job (here: its weights negated in place): the worker
// relaunched after the kill runs the model as it was when the job began (the job's copy, model_in/),
// and every row's probabilities are the original model's. It loaded the new one: its tasks' rows were
// scored by another model.
TEST(predict, every_row_once_in_order_with_a_worker_killed_and_the_models_probabilities) {
  const auto model = trained() + "/model";
  const std::string dir = test_root("predict-kill");
  write_csv(dir + "/new.csv", 100000, false, 2);
  const std::string mine = dir + "/mine";
  fs::create_directories(mine);
  for (const char* f : {"model.json", "model.pt"}) fs::copy_file(model + "/" + f, mine + "/" + f);
  int negated = 0;
  const auto why =
      sh("/usr/bin/python3 -c \"import torch; m = torch.jit.load('" + model +
             "/model.pt'); [p.data.neg_() for p in m.parameters()]; m.save('" + dir + "/negated.pt')\" 2>&1",
         &negated);
  ASSERT_EQ(negated, 0) << why;
  job_run r;
  r.dir = dir;
  r.job_dir = dir + "/jobs/p1";
  r.pid = spawn({"predict", mine, "--data", dir + "/new.csv", "--out", dir + "/out.csv", "--workers", "2",
                 "--records-per-task", "2000", "--root", dir + "/jobs", "--job-id", "p1", "--quiet"},
                dir + "/log");
  // A worker dies once some tasks' output is written: its task is leased again and redone.
  ASSERT_TRUE(poll_until(
      [&] {
        std::error_code ec;
        std::size_t parts = 0;
        for (const auto& e : fs::directory_iterator(r.job_dir + "/predictions", ec))
          parts += e.path().extension() == ".bin";
        return parts >= 5 || exited(r);
      },
      std::chrono::seconds(240)));
  fs::copy_file(dir + "/negated.pt", mine + "/model.pt", fs::copy_options::overwrite_existing);
  const pid_t victim = node_pid(r, "worker-1");
  ASSERT_GT(victim, 0) << "no worker-1 to kill (the prediction was over?)\n" << read_file(dir + "/log");
  ASSERT_EQ(::kill(victim, SIGKILL), 0);
  ASSERT_EQ(wait_job(r, std::chrono::seconds(400)), 0) << read_file(dir + "/log");
  EXPECT_NE(read_file(r.job_dir + "/job.toml").find(r.job_dir + "/model_in"), std::string::npos);
  auto res = nlohmann::json::parse(read_file(r.job_dir + "/result.json"));
  EXPECT_GE(res.value("node_restarts", 0), 1) << res.dump();
  expect_all_done(r);
  // Once --out is written, the job's parts and the CSV's encoded copy go (each the input's size, they
  // stayed under --root after every run); its logs and result.json stay.
  EXPECT_FALSE(fs::exists(r.job_dir + "/predictions")) << "the prediction parts were kept";
  EXPECT_FALSE(fs::exists(r.job_dir + "/input")) << "the CSV's encoded copy was kept";
  EXPECT_FALSE(fs::exists(r.job_dir + "/model_in")) << "the model's copy was kept";
  EXPECT_TRUE(fs::exists(r.job_dir + "/logs/master.log"));
  int code = 0;
  auto out = sh("/usr/bin/python3 " TROUPE_TEST_SOURCE_DIR "/predict_reference.py " + model + " " + dir +
                    "/new.csv " + dir + "/out.csv",
                &code);
  EXPECT_EQ(code, 0) << out;
  std::printf("%s", out.c_str());
  expect_export_refused(r.job_dir);
  EXPECT_TRUE(no_processes_of(r));
}

TEST(predict, evaluate_scores_as_the_jobs_own_evaluation_did) {
  const auto job = trained();
  const auto own = nlohmann::json::parse(read_file(job + "/result.json"));
  const std::string dir = test_root("evaluate");
  std::string out;
  const std::string store = data_dir() + "/store/test";
  ASSERT_EQ(troupe("evaluate " + job + "/model --data " + store + " --root " + dir + " --quiet 2>" + dir +
                       "/quiet.err",
                   &out),
            0)
      << out;
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << "one JSON line on stdout\n" << out;
  auto j = nlohmann::json::parse(out);
  // --quiet: no info line on stderr (the runner's eight, the plugin's load); the job's log keeps them.
  const auto err = read_file(dir + "/quiet.err");
  EXPECT_EQ(err.find(" I ["), std::string::npos) << err;
  EXPECT_NE(read_file(j.value("job", "") + "/logs/runner.log").find("launched master#0"), std::string::npos);
  EXPECT_EQ(j.value("rows", 0), own.value("test_rows", 1)) << j.dump();
  EXPECT_NEAR(j.value("loss", 0.0), own.value("test_loss", 1.0), 1e-5) << j.dump() << own.dump();
  EXPECT_NEAR(j.value("accuracy", 0.0), own.value("test_accuracy", 1.0), 1e-9) << j.dump();
  EXPECT_NEAR(j.value("auc", 0.0), own.value("test_auc", 1.0), 1e-5) << j.dump();
  EXPECT_TRUE(fs::exists(store + "/data.mdb")) << "a store given is the user's: never removed";
  EXPECT_FALSE(fs::exists(j.value("job", "") + "/predictions")) << j.dump();
  // Rows of one class only: no AUC is defined, so none is reported (it said 0.5, a model no better
  // than chance); loss and accuracy still are.
  write_csv(dir + "/mixed.csv", 2000, true, 5);
  std::ifstream mixed(dir + "/mixed.csv");
  std::ofstream negatives(dir + "/negatives.csv");
  for (std::string line; std::getline(mixed, line);)
    if (line.rfind("yes,", 0) != 0) negatives << line << '\n';
  negatives.close();
  ASSERT_EQ(troupe("evaluate " + job + "/model --data " + dir + "/negatives.csv --root " + dir +
                       " --quiet 2>/dev/null",
                   &out),
            0)
      << out;
  j = nlohmann::json::parse(out);
  EXPECT_FALSE(j.contains("auc")) << j.dump();
  EXPECT_FALSE(fs::exists(j.value("job", "") + "/input")) << "the CSV's encoded copy was kept: " << j.dump();
  EXPECT_TRUE(fs::exists(j.value("job", "") + "/result.json")) << j.dump();
  EXPECT_GT(j.value("rows", 0), 500) << j.dump();
  EXPECT_TRUE(j.contains("accuracy")) << j.dump();
}

// `troupe evaluate MODEL --data DATA`: its JSON ("" and the output in `err` when it failed).
nlohmann::json evaluated(const std::string& model, const std::string& data, const std::string& root,
                         std::string* err = nullptr) {
  std::string out;
  const int code =
      troupe("evaluate " + model + " --data " + data + " --root " + root + " --quiet 2>&1", &out);
  if (err) *err = out;
  if (code != 0) return {};
  return nlohmann::json::parse(out.substr(out.rfind('{')), nullptr, false);
}

// A new day's rows imported on their own are encoded otherwise than the model's training rows
// (their own standardization; classes numbered by their own names): evaluating the model on such
// a store, or warm-starting it there, is refused or warned of (it scored them silently wrong:
// accuracy 0.51 for 0.97). `troupe data import csv --like MODEL` encodes them as the model's were:
// evaluating on that store gives what evaluating on the CSV gives.
TEST(predict, rows_encoded_otherwise_are_refused_and_like_encodes_them_as_the_model_did) {
  const std::string model = trained() + "/model";
  const std::string dir = test_root("predict-like");
  write_csv(dir + "/train.csv", 3000, true, 11);
  ASSERT_EQ(import_store(dir, "--standardize"), "");
  std::string err;
  EXPECT_TRUE(evaluated(model, dir + "/store/test", dir + "/jobs", &err).empty());
  EXPECT_NE(
      err.find("its rows are encoded otherwise than the model's: the dense column 'a' is standardized with "
               "mean"),
      std::string::npos)
      << err;
  EXPECT_NE(err.find("troupe data import csv --like " + model), std::string::npos) << err;
  // --like: every flag of the encoding is the model's; the rows as the model's rows were.
  std::string out;
  const std::string like = std::string(TROUPE_BIN) + " data import csv " + dir + "/train.csv --like " + model;
  int code = 0;
  out = sh(like + " --out " + dir + "/like --label answer", &code);
  EXPECT_EQ(code, 2) << out;
  EXPECT_NE(out.find("--label with --like"), std::string::npos) << out;
  out = sh(like + " --out " + dir + "/like", &code);
  ASSERT_EQ(code, 0) << out;
  EXPECT_NE(out.find("encoded as the training rows of " + model), std::string::npos) << out;
  const auto from_store = evaluated(model, dir + "/like", dir + "/jobs");
  const auto from_csv = evaluated(model, dir + "/train.csv", dir + "/jobs");
  ASSERT_FALSE(from_store.empty());
  ASSERT_FALSE(from_csv.empty());
  EXPECT_EQ(from_store.value("rows", 0), 3000) << from_store.dump();
  EXPECT_EQ(from_store.value("accuracy", 0.0), from_csv.value("accuracy", 1.0)) << from_store.dump();
  EXPECT_NEAR(from_store.value("loss", 0.0), from_csv.value("loss", 1.0), 1e-6) << from_store.dump();
  // Classes numbered anew: "nope" sorts before "yes" where the model's class 0 is "no".
  std::ifstream in(dir + "/train.csv");
  std::ofstream nope(dir + "/nope.csv");
  for (std::string line; std::getline(in, line);)
    nope << (line.rfind("no,", 0) == 0 ? "nope," + line.substr(3) : line) << '\n';
  nope.close();
  out = sh(std::string(TROUPE_BIN) + " data import csv " + dir + "/nope.csv --out " + dir +
               "/nope --label answer --standardize",
           &code);
  ASSERT_EQ(code, 0) << out;
  EXPECT_TRUE(evaluated(model, dir + "/nope", dir + "/jobs", &err).empty());
  EXPECT_NE(err.find("class 0 is 'no' in the model's training rows"), std::string::npos) << err;
  EXPECT_NE(err.find("'nope' in --data " + dir + "/nope"), std::string::npos) << err;
  out = sh(std::string(TROUPE_BIN) + " data import csv " + dir + "/nope.csv --like " + model + " --out " +
               dir + "/like-nope",
           &code);
  EXPECT_EQ(code, 2) << out;
  EXPECT_NE(out.find("'nope'"), std::string::npos) << out;
  EXPECT_FALSE(fs::exists(dir + "/like-nope/data.mdb")) << "nothing left of a refused import";
  // [model] init from the model on those stores: classes numbered anew refused before the job,
  // another standardization warned of.
  const std::string job =
      "workers = 1\nrecords_per_task = 1000\n[model]\ntype = \"mlp\"\nhidden = [32]\ninit = \"" + model +
      "\"\n[train]\nepochs = 1\n[data]\nsource = \"store\"\n";
  std::ofstream(dir + "/nope.toml") << "[job]\n"
                                    << job << "train = \"" << dir << "/nope\"\ntest = \"" << dir
                                    << "/nope\"\n";
  EXPECT_EQ(troupe("config check " + dir + "/nope.toml 2>&1", &out), 2) << out;
  EXPECT_NE(out.find("model.init " + model + ": the rows are encoded otherwise: class 0 is 'no'"),
            std::string::npos)
      << out;
  auto r = start_job("predict-like-init",
                     job + "train = \"" + dir + "/store/train\"\ntest = \"" + dir + "/store/test\"\n");
  ASSERT_EQ(wait_job(r, std::chrono::seconds(120)), 0) << read_file(r.err_file);
  EXPECT_NE(read_file(r.err_file).find("the warm-started weights read the new rows scaled otherwise"),
            std::string::npos)
      << read_file(r.err_file);
}

// The predicted rows of `out` (predict's CSV): each row's number (its line) and probability.
std::vector<std::pair<std::uint64_t, std::string>> predicted(const std::string& out) {
  std::vector<std::pair<std::uint64_t, std::string>> rows;
  std::ifstream in(out);
  std::string line;
  std::getline(in, line);  // the header
  while (std::getline(in, line)) {
    const auto comma = line.find(',');
    rows.emplace_back(std::stoull(line.substr(0, comma)), line.substr(comma + 1));
  }
  return rows;
}

// A CSV as users have it (a byte order mark, \r\n, quoted header names, blank lines, gzipped) is
// read as the import reads one: the same probabilities as the plain file, each row numbered by its
// own line in the file.
TEST(predict, a_csv_as_users_have_it_predicts_as_the_plain_one) {
  const auto model = trained() + "/model";
  const std::string dir = test_root("predict-messy");
  write_csv(dir + "/plain.csv", 40, false, 5);
  {
    std::ifstream in(dir + "/plain.csv");
    std::ofstream messy(dir + "/messy.csv", std::ios::binary);
    std::string line;
    std::getline(in, line);
    messy << "\xEF\xBB\xBF\"a\",b,\"c\",d,e,f,g,h\r\n";
    for (int row = 0; std::getline(in, line); ++row) {
      if (row == 9) messy << "\r\n";  // a blank line before row 9: it is on line 12
      messy << line << "\r\n";
    }
    messy << "\r\n\r\n";
  }
  sh("gzip -c " + dir + "/messy.csv > " + dir + "/messy.gz");
  std::vector<std::vector<std::pair<std::uint64_t, std::string>>> outs;
  for (const char* name : {"plain.csv", "messy.csv", "messy.gz"}) {
    std::string out;
    ASSERT_EQ(troupe(std::string("predict ") + model + " --data " + dir + "/" + name + " --out " + dir + "/" +
                         name + ".out --workers 1 --root " + dir + "/jobs --quiet 2>&1",
                     &out),
              0)
        << name << "\n"
        << out;
    outs.push_back(predicted(dir + "/" + name + ".out"));
    ASSERT_EQ(outs.back().size(), 40u) << name;
  }
  for (std::size_t row = 0; row < 40; ++row) {
    EXPECT_EQ(outs[0][row].first, row + 2);
    EXPECT_EQ(outs[1][row].first, row + (row < 9 ? 2 : 3)) << "row " << row;
    EXPECT_EQ(outs[2][row].first, outs[1][row].first) << "row " << row;
    EXPECT_EQ(outs[1][row].second, outs[0][row].second) << "row " << row;
    EXPECT_EQ(outs[2][row].second, outs[0][row].second) << "row " << row;
  }
  // The gzipped file cut short: the truncation is the error (exit 1, as the import), not its half
  // last line, and nothing is left.
  sh("head -c $(( $(stat -c %s " + dir + "/messy.gz) / 2 )) " + dir + "/messy.gz > " + dir + "/cut.gz");
  std::string cut;
  EXPECT_EQ(troupe("predict " + model + " --data " + dir + "/cut.gz --out " + dir +
                       "/cut.out --workers 1 --root " + dir + "/jobs --job-id cut --quiet 2>&1",
                   &cut),
            1)
      << cut;
  EXPECT_NE(cut.find("truncated: the gzip stream ends early"), std::string::npos) << cut;
  EXPECT_FALSE(std::filesystem::exists(dir + "/jobs/cut")) << "a refused input leaves no job directory";
  // Another delimiter than the import's, named by --delimiter.
  sh("tr ',' ';' < " + dir + "/plain.csv > " + dir + "/semi.csv");
  std::string out;
  ASSERT_EQ(troupe("predict " + model + " --data " + dir + "/semi.csv --delimiter ';' --out " + dir +
                       "/semi.out --workers 1 --root " + dir + "/jobs --quiet 2>&1",
                   &out),
            0)
      << out;
  EXPECT_EQ(predicted(dir + "/semi.out"), outs[0]);
}

// The fields of one CSV line as RFC 4180 reads it (quoted fields, doubled quotes).
std::vector<std::string> csv_fields(const std::string& line) {
  std::vector<std::string> out(1);
  bool quoted = false;
  for (std::size_t i = 0; i < line.size(); ++i) {
    const char ch = line[i];
    if (quoted && ch == '"' && i + 1 < line.size() && line[i + 1] == '"')
      out.back() += line[++i];
    else if (ch == '"')
      quoted = !quoted;
    else if (ch == ',' && !quoted)
      out.emplace_back();
    else
      out.back() += ch;
  }
  return out;
}

// Class names with a comma or a quote (the import reads them quoted) are written quoted: a class
// "New York, NY" made a line of 7 fields under a header read as 7 and rows of 6 and 7.
TEST(predict, class_names_with_a_comma_or_a_quote_are_quoted_in_its_csv) {
  const std::string dir = test_root("predict-quoted-data");
  {
    std::ofstream f(dir + "/d.csv");
    f << "x,label\n";
    const char* names[] = {"\"New York, NY\"", "\"He said \"\"hi\"\"\"", "plain"};
    for (int i = 0; i < 600; ++i) f << (i % 3) + 0.01 * (i % 7) << ',' << names[i % 3] << '\n';
  }
  int code = 0;
  auto out = sh(std::string(TROUPE_BIN) + " data import csv " + dir + "/d.csv --out " + dir +
                    "/store --label label --test-fraction 0.2",
                &code);
  ASSERT_EQ(code, 0) << out;
  auto r = start_job("predict-quoted",
                     "workers = 1\nrecords_per_task = 200\n[model]\ntype = \"mlp\"\nhidden = [8]\n[train]\n"
                     "epochs = 1\n[data]\nsource = \"store\"\ntrain = \"" +
                         dir + "/store/train\"\ntest = \"" + dir + "/store/test\"\n");
  ASSERT_EQ(wait_job(r, std::chrono::seconds(120)), 0) << read_file(r.err_file);
  ASSERT_EQ(troupe("predict " + r.job_dir + "/model --data " + dir + "/d.csv --out " + dir +
                       "/p.csv --workers 1 --root " + dir + "/jobs --quiet 2>&1",
                   &out),
            0)
      << out;
  std::ifstream in(dir + "/p.csv");
  std::string line;
  ASSERT_TRUE(std::getline(in, line));
  EXPECT_EQ(csv_fields(line),
            (std::vector<std::string>{"line", "class", "p_He said \"hi\"", "p_New York, NY", "p_plain"}))
      << line;
  std::set<std::string> classes;
  std::size_t rows = 0;
  while (std::getline(in, line)) {
    auto fields = csv_fields(line);
    ASSERT_EQ(fields.size(), 5u) << line;
    classes.insert(fields[1]);
    ++rows;
  }
  EXPECT_EQ(rows, 600u);
  for (const auto& c : classes)
    EXPECT_TRUE(c == "New York, NY" || c == "He said \"hi\"" || c == "plain") << c;
}

// A job keeps its training rows' shape and encoding (train_manifest.toml): its model is exported
// once its store is gone (export needed the store: "not a record store (no data.mdb)"), unverified
// and said so, and the model reads raw CSV rows as the job's were.
TEST(predict, a_job_whose_store_is_gone_is_still_exported) {
  const std::string dir = test_root("predict-store-gone-data");
  write_csv(dir + "/train.csv", 2000, true, 3);
  ASSERT_EQ(import_store(dir, "--standardize"), "");
  auto r = start_job("predict-store-gone",
                     "workers = 1\nrecords_per_task = 500\n[model]\ntype = \"mlp\"\nhidden = [8]\n[train]\n"
                     "epochs = 1\n[data]\nsource = \"store\"\ntrain = \"" +
                         dir + "/store/train\"\ntest = \"" + dir + "/store/test\"\n");
  ASSERT_EQ(wait_job(r, std::chrono::seconds(120)), 0) << read_file(r.err_file);
  EXPECT_TRUE(fs::exists(r.job_dir + "/train_manifest.toml"));
  fs::remove_all(dir + "/store");
  std::string out;
  ASSERT_EQ(troupe("export " + r.job_dir + " --out " + dir + "/model 2>&1", &out), 0) << out;
  EXPECT_NE(out.find("not verified on test rows"), std::string::npos) << out;
  EXPECT_NE(read_file(dir + "/model/model.json").find("\"standardize\""), std::string::npos)
      << read_file(dir + "/model/model.json");
  ASSERT_EQ(troupe("predict " + dir + "/model --data " + dir + "/train.csv --out " + dir +
                       "/p.csv --workers 1 --root " + dir + "/jobs --quiet 2>&1",
                   &out),
            0)
      << out;
  EXPECT_EQ(predicted(dir + "/p.csv").size(), 2000u);
}

// A CSV with malformed lines (a field too many, an unclosed quote) is refused naming the first; with
// --skip-malformed they are dropped, counted and named (on stderr and in the JSON line), and every
// other row is scored by its own line number (predict had no such flag: the import has).
TEST(predict, skip_malformed_drops_the_malformed_lines_and_names_them) {
  const auto model = trained() + "/model";
  const std::string dir = test_root("predict-malformed");
  write_csv(dir + "/plain.csv", 30, false, 9);
  {
    std::ifstream in(dir + "/plain.csv");
    std::ofstream bad(dir + "/bad.csv");
    std::string line;
    for (int n = 1; std::getline(in, line); ++n) {
      bad << line << "\n";
      if (n == 5) bad << "1,2,3,4,5,6,7,8,9\n";   // line 6: a field too many
      if (n == 20) bad << "\"1,2,3,4,5,6,7,8\n";  // line 22: a quote left open
    }
  }
  const std::string flags = " --workers 1 --root " + dir + "/jobs --quiet";
  std::string out;
  EXPECT_EQ(
      troupe("predict " + model + " --data " + dir + "/bad.csv --out " + dir + "/bad.out" + flags + " 2>&1",
             &out),
      2)
      << out;
  EXPECT_NE(out.find("bad.csv:6: 9 fields, the header has 8"), std::string::npos) << out;
  ASSERT_EQ(troupe("predict " + model + " --data " + dir + "/bad.csv --out " + dir +
                       "/bad.out --skip-malformed" + flags + " 2>" + dir + "/err",
                   &out),
            0)
      << out << read_file(dir + "/err");
  EXPECT_NE(out.find("\"skipped_malformed\":2"), std::string::npos) << out;
  const auto err = read_file(dir + "/err");
  EXPECT_NE(err.find("2 malformed line(s) of " + dir +
                     "/bad.csv skipped (--skip-malformed): line 6: 9 fields, "
                     "the header has 8; line 22: a quoted field"),
            std::string::npos)
      << err;
  ASSERT_EQ(
      troupe("predict " + model + " --data " + dir + "/plain.csv --out " + dir + "/plain.out" + flags, &out),
      0)
      << out;
  const auto skipped = predicted(dir + "/bad.out"), plain = predicted(dir + "/plain.out");
  ASSERT_EQ(skipped.size(), 30u);
  for (std::size_t row = 0; row < 30; ++row) {
    EXPECT_EQ(skipped[row].first, row + 2 + (row >= 4 ? 1 : 0) + (row >= 19 ? 1 : 0)) << "row " << row;
    EXPECT_EQ(skipped[row].second, plain[row].second) << "row " << row;
  }
}

// Predicting needs no labels: a label column whose values are no class of the model (new data, a
// label the user added) refused the whole file. A model trained with --missing skip-row (its rows
// had no missing value) skips the rows that have one, as its import did, and says how many and
// where; it refused the whole file at the first.
TEST(predict, labels_are_not_read_and_a_skip_row_model_skips_rows_with_a_missing_value) {
  const std::string dir = test_root("predict-skip-row");
  write_csv(dir + "/train.csv", 4000, true, 7);
  ASSERT_EQ(import_store(dir, "--missing skip-row"), "");
  std::string out;
  auto r = start_job("predict-skip-row-train",
                     "workers = 1\nrecords_per_task = 1000\n[model]\ntype = \"lr\"\n[train]\nepochs = 1\n"
                     "[data]\nsource = \"store\"\ntrain = \"" +
                         dir + "/store/train\"\ntest = \"" + dir + "/store/test\"\n");
  ASSERT_EQ(wait_job(r, std::chrono::seconds(120)), 0) << read_file(r.err_file);
  std::ofstream rows(dir + "/new.csv");
  rows << "answer,a,b,c,d,e,f,g,h\n";
  for (int i = 0; i < 20; ++i)
    rows << (i % 2 ? "maybe" : "yes") << ',' << i << ",1," << (i == 4 || i == 11 ? "" : "2")
         << ",3,4,5,6,7\n";
  rows.close();
  ASSERT_EQ(troupe("predict " + r.job_dir + "/model --data " + dir + "/new.csv --out " + dir +
                       "/new.out --workers 1 --root " + dir + "/jobs --quiet 2>" + dir + "/err",
                   &out),
            0)
      << out << read_file(dir + "/err");
  auto j = nlohmann::json::parse(out);
  EXPECT_EQ(j.value("rows", 0), 18) << j.dump();
  EXPECT_EQ(j.value("skipped_rows", 0), 2) << j.dump();
  const auto err = read_file(dir + "/err");
  EXPECT_NE(err.find("2 row(s) with a missing value skipped"), std::string::npos) << err;
  EXPECT_NE(err.find("line 6, column 'c'"), std::string::npos) << err;
  auto got = predicted(dir + "/new.out");
  ASSERT_EQ(got.size(), 18u);
  for (const auto& [line, p] : got) EXPECT_TRUE(line != 6 && line != 13) << "line " << line << " was scored";
  EXPECT_EQ(got.back().first, 21u);
  // Evaluating reads the labels: 'maybe' is no class of the model.
  EXPECT_EQ(troupe("evaluate " + r.job_dir + "/model --data " + dir + "/new.csv --root " + dir +
                       "/jobs --quiet 2>&1",
                   &out),
            2)
      << out;
  EXPECT_NE(out.find("'maybe'"), std::string::npos) << out;
}

// Item 6: a model directory that is missing, partial, from an incompatible troupe, or whose
// model.json does not fit the data: exit 2, one line naming the file and the problem, and nothing
// written outside --out and the job directory.
TEST(predict, bad_model_directories_and_inputs_are_refused_naming_the_file_and_the_problem) {
  const auto model = trained() + "/model";
  const std::string dir = test_root("predict-errors");
  write_csv(dir + "/ok.csv", 10, false, 3);
  const auto copy = [&](const std::string& name) {
    fs::copy(model, dir + "/" + name, fs::copy_options::recursive);
    return dir + "/" + name;
  };
  const auto partial = copy("partial");
  fs::remove(partial + "/model.pt");
  const auto damaged = copy("damaged");  // refused once its job starts: its CSV copy was left behind
  std::ofstream(damaged + "/model.pt") << "junk";
  // A byte of a tensor's data flipped: libtorch loaded it unchecked, and predict wrote 1.0 for every row.
  const auto flipped = copy("flipped");
  sh("python3 -c \"import zipfile,sys; p=sys.argv[1]; i=[x for x in zipfile.ZipFile(p).infolist() if "
     "x.filename.endswith('/data/0')][0]; b=bytearray(open(p,'rb').read()); h=i.header_offset; "
     "d=h+30+int.from_bytes(b[h+26:h+28],'little')+int.from_bytes(b[h+28:h+30],'little'); b[d]^=1; "
     "open(p,'wb').write(b)\" " +
     flipped + "/model.pt");
  const auto future = copy("future");
  sh("sed -i 's/\"format_version\": 1/\"format_version\": 99/' " + future + "/model.json");
  std::ofstream(dir + "/missing_column.csv") << "a,b,c\n1,2,3\n";
  std::ofstream(dir + "/not_a_number.csv") << "a,b,c,d,e,f,g,h\n1,2,x,4,5,6,7,8\n";
  // A header alone (a filtered export that matched nothing): its job's master crash-looped for 38 s.
  std::ofstream(dir + "/header_only.csv") << "a,b,c,d,e,f,g,h\n\n";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {model + " --data " + dir + "/header_only.csv",
       "header_only.csv: a header and no rows: nothing to score"},
      {dir + "/nothing --data " + dir + "/ok.csv", "nothing"},
      {partial + " --data " + dir + "/ok.csv", "model.pt"},
      {damaged + " --data " + dir + "/ok.csv", "model.pt: not a TorchScript archive"},
      {flipped + " --data " + dir + "/ok.csv", "model.pt: entry '"},
      {future + " --data " + dir + "/ok.csv", "format_version"},
      {model + " --data " + dir + "/missing_column.csv", "missing_column.csv:1"},
      {model + " --data " + dir + "/not_a_number.csv", "not_a_number.csv:2"},
      {model + " --data " + trained() + "/journal", "not a record store"},
      {model + " --data " + trained() + "/logs", "neither a CSV file nor a record store"},
  };
  for (const auto& [args, words] : cases) {
    std::string out;
    EXPECT_EQ(troupe("predict " + args + " --out " + dir + "/out.csv --root " + dir + "/jobs --quiet", &out),
              2)
        << args << "\n"
        << out;
    EXPECT_NE(out.find(words), std::string::npos) << args << "\n" << out;
    EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << "one line\n" << out;
    EXPECT_FALSE(fs::exists(dir + "/out.csv"));
    std::error_code ec;
    EXPECT_TRUE(!fs::exists(dir + "/jobs", ec) || fs::is_empty(dir + "/jobs", ec)) << "left something behind";
  }
  // Evaluate scores labelled rows of the model's classes; predict's --out must be writable: both
  // refused before any node starts.
  write_csv(dir + "/labelled.csv", 10, true, 4);
  sh("sed -i '5s/^[a-z]*,/,/' " + dir + "/labelled.csv");  // row 4 (line 5) without its label
  std::ofstream three(dir + "/three.csv");
  three << "answer,a,b,c,d,e,f,g,h\n";
  for (int i = 0; i < 30; ++i) three << i % 3 << ",1,2,3,4,5,6,7,8\n";
  three.close();
  sh(std::string(TROUPE_BIN) + " data import csv " + dir + "/three.csv --out " + dir +
     "/three --label answer");
  fs::create_directories(dir + "/a_dir");
  const std::vector<std::pair<std::string, std::string>> refusals = {
      {"evaluate " + model + " --data " + dir + "/ok.csv", "no label column 'answer' in the header"},
      {"evaluate " + model + " --data " + dir + "/labelled.csv", "labelled.csv:5: column 'answer': no label"},
      {"evaluate " + model + " --data " + dir + "/three", "labels of 3 classes; the model"},
      {"predict " + model + " --data " + dir + "/ok.csv --out " + dir + "/no_dir/p.csv",
       "no_dir: no such directory"},
      {"predict " + model + " --data " + dir + "/ok.csv --out " + dir + "/a_dir", "a_dir: a directory"},
      // --out is renamed over: what is not a regular file was replaced by one (/dev/stdout itself, as
      // root), and --data's own file was overwritten.
      {"predict " + model + " --data " + dir + "/ok.csv --out " + dir + "/fifo", "fifo: not a regular file"},
      {"predict " + model + " --data " + dir + "/ok.csv --out /dev/stdout", "a device or /proc path"},
      // Each hop of a link is checked, not its end alone (a link to /dev/stdout with stdout on a file
      // got through, as did a loop: the job ran, then "error: : No such file or directory").
      {"predict " + model + " --data " + dir + "/ok.csv --out " + dir + "/to_stdout",
       "a device or /proc path"},
      {"predict " + model + " --data " + dir + "/ok.csv --out " + dir + "/loop", "links that lead nowhere"},
      {"predict " + model + " --data " + dir + "/ok.csv --out " + dir + "/ok.csv", "the file --data reads"},
      // The model's own directory: --out model.json replaced the model with its predictions.
      {"predict " + model + " --data " + dir + "/ok.csv --out " + model + "/model.json",
       "in the model directory " + model},
      {"predict " + model + " --data " + dir + "/ok.csv --out ''", "--out: empty value"},
      {"predict " + model + " --data " + dir + "/ok.csv --out -", "standard output is not written to"},
      // The id is checked before anything is written under <root>/<id> (`../x` wrote outside it).
      {"predict " + model + " --data " + dir + "/ok.csv --out " + dir + "/p.csv --job-id ../escaped",
       "--job-id '../escaped': 1-64 characters"},
  };
  ASSERT_EQ(::mkfifo((dir + "/fifo").c_str(), 0644), 0);
  fs::create_symlink("/dev/stdout", dir + "/to_stdout");
  fs::create_symlink("loop", dir + "/loop");
  for (const auto& [args, words] : refusals) {
    std::string out;
    EXPECT_EQ(troupe(args + " --root " + dir + "/jobs --quiet", &out), 2) << args << "\n" << out;
    EXPECT_NE(out.find(words), std::string::npos) << args << "\n" << out;
    std::error_code ec;
    EXPECT_TRUE(!fs::exists(dir + "/jobs", ec) || fs::is_empty(dir + "/jobs", ec)) << "left something behind";
  }
  EXPECT_FALSE(fs::exists(dir + "/escaped"));
  EXPECT_EQ(fs::status(dir + "/fifo").type(), fs::file_type::fifo);
  // A link to a regular file is written through: the file it names gets the predictions.
  std::ofstream(dir + "/target.csv") << "before\n";
  fs::create_symlink("target.csv", dir + "/link.csv");
  std::string out;
  ASSERT_EQ(troupe("predict " + model + " --data " + dir + "/ok.csv --out " + dir + "/link.csv --root " +
                       dir + "/jobs --quiet",
                   &out),
            0)
      << out;
  EXPECT_TRUE(fs::is_symlink(dir + "/link.csv"));
  // A row the model gives no finite output for (inputs far outside what it saw): its class empty and
  // its value nan, counted and named (it read class "no" and "-nan").
  std::ofstream(dir + "/far.csv")
      << "a,b,c,d,e,f,g,h\n1,2,3,4,5,6,7,8\n3e38,3e38,3e38,3e38,3e38,3e38,3e38,3e38\n";
  ASSERT_EQ(troupe("predict " + model + " --data " + dir + "/far.csv --out " + dir + "/far.out --root " +
                       dir + "/jobs --quiet 2>&1",
                   &out),
            0)
      << out;
  EXPECT_NE(out.find("\"unscored_rows\":1"), std::string::npos) << out;
  EXPECT_NE(out.find("1 row(s) the model gave no finite output for"), std::string::npos) << out;
  const auto far = read_file(dir + "/far.out");
  EXPECT_NE(far.find("\n3,nan,\n"), std::string::npos) << far;
  // Evaluated, the same row counts as wrong and is named too (the loss read null with no word of why).
  std::ofstream(dir + "/far_labelled.csv")
      << "answer,a,b,c,d,e,f,g,h\nno,1,2,3,4,5,6,7,8\nno,3e38,3e38,3e38,3e38,3e38,3e38,3e38,3e38\n";
  ASSERT_EQ(troupe("evaluate " + model + " --data " + dir + "/far_labelled.csv --root " + dir +
                       "/jobs --quiet 2>&1",
                   &out),
            0)
      << out;
  EXPECT_NE(out.find("\"unscored_rows\":1"), std::string::npos) << out;
  EXPECT_NE(out.find("(they count as wrong, and the loss is null), the first at line 3"), std::string::npos)
      << out;
  // Line 2's class as predict wrote it: right or wrong; line 3's NaN ("no": class 0) wrong either way.
  const auto second =
      far.substr(far.find("\n2,") + 1, far.find('\n', far.find("\n2,") + 1) - far.find("\n2,") - 1);
  const bool first_right = second.size() > 3 && second.substr(second.size() - 3) == ",no";
  EXPECT_NE(out.find(first_right ? "\"accuracy\":0.5" : "\"accuracy\":0.0"), std::string::npos)
      << "the unscored row is wrong (" << second << "): " << out;
  EXPECT_EQ(read_file(dir + "/target.csv").rfind("line,probability,class\n", 0), 0u)
      << read_file(dir + "/target.csv");
}

}  // namespace
}  // namespace troupe::testing
