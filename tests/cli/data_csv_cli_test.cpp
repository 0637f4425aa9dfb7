// `troupe data import csv` for real: the binary's output and exit codes on good and bad input, job
// files naming the stores it makes (relative to the job file), and a model trained on them.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "run_command.hpp"
#include "scratch_test.hpp"

namespace {

namespace fs = std::filesystem;
using troupe::test_util::command_result;
using troupe::test_util::run_troupe;
using troupe::test_util::stderr_mode;

class DataCsvCli : public troupe::test_util::scratch_test {
 protected:
  DataCsvCli() : scratch_test("csv-cli") {}
};

// A learnable problem: class (x1 > 0) + (x2 > 0) of 3, a categorical column that shifts x1's
// threshold, an id column the model must not see. A fixed linear congruential stream: the same
// file every run.
std::string synthetic_csv(int rows) {
  std::string text = "id,x1,x2,shade,label\n";
  std::uint64_t s = 12345;
  auto uniform = [&s] {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<double>(s >> 11) * 0x1.0p-53 * 2 - 1;
  };
  const char* shades[] = {"dark", "light", "\"mid, grey\""};
  for (int i = 0; i < rows; ++i) {
    const double x1 = uniform(), x2 = uniform();
    const int shade = static_cast<int>(std::floor((uniform() + 1) * 1.5)) % 3;
    const double shift = shade == 0 ? -0.3 : shade == 1 ? 0.3 : 0;
    const int label = (x1 > shift) + (x2 > 0);
    text += std::to_string(i) + "," + std::to_string(x1) + "," + std::to_string(x2) + "," + shades[shade] +
            "," + std::to_string(label) + "\n";
  }
  return text;
}

TEST_F(DataCsvCli, ImportsSplitsAndInspects) {
  auto csv = write("d.csv", synthetic_csv(300));
  auto r = run_troupe("data import csv " + csv + " --out " + path("store") +
                      " --label label --dense x1,x2 --sparse shade --buckets 16 --test-fraction 0.25");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find(path("store/train") + ": "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(": 75 records (test fraction 0.25, seed 24301)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("label label: 3 classes"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("sparse (1, 16 ids each): shade"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("ignored: id"), std::string::npos) << r.out;
  auto i = run_troupe("data inspect " + path("store/test") + " --verify");
  ASSERT_EQ(i.code, 0) << i.out;
  EXPECT_NE(i.out.find("num_classes = 3"), std::string::npos) << i.out;
  EXPECT_NE(i.out.find("dense_dim = 2"), std::string::npos) << i.out;
  EXPECT_NE(i.out.find("all checksums match"), std::string::npos) << i.out;
}

TEST_F(DataCsvCli, BadInputIsExit2NamingLineAndColumnAndLeavesNoStore) {
  auto bad = write("bad.csv", "a,b,label\n1,2,0\n1,x,1\n");
  auto r = run_troupe("data import csv " + bad + " --out " + path("s") + " --label label");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find(bad + ":3: column 'b' (2): 'x' is not a number"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(path("s")));
  auto ragged = write("ragged.csv", "a,label\n1,0\n1,2,3\n4,1\n");
  r = run_troupe("data import csv " + ragged + " --out " + path("s") + " --label label");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("1 malformed line (line 3: 3 fields, the header has 2)"), std::string::npos) << r.out;
  r = run_troupe("data import csv " + ragged + " --out " + path("s") + " --label label --skip-malformed");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("skipped 1 malformed line (--skip-malformed): line 3: 3 fields"), std::string::npos)
      << r.out;
  r = run_troupe("data import csv " + bad + " --out " + path("t") + " --label nope");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("label column 'nope': no such column (the header has: a, b, label)"),
            std::string::npos)
      << r.out;
  r = run_troupe("data import csv " + bad + " --out " + path("t") + " --label label --delimiter ab");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("--delimiter 'ab'"), std::string::npos) << r.out;
  r = run_troupe("data import csv " + path("absent.csv") + " --out " + path("t") + " --label label");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find(path("absent.csv") + ": cannot open"), std::string::npos) << r.out;
}

// The job file names the stores relative to itself; run from elsewhere, the job finds them.
TEST_F(DataCsvCli, TrainsAboveChanceOnAnImportedCsvLocallyAndAsAJob) {
  auto csv = write("d.csv.gz.src", synthetic_csv(2000));
  ASSERT_EQ(std::system(("gzip -c " + csv + " > " + path("d.csv.gz")).c_str()), 0);
  auto imp = run_troupe("data import csv " + path("d.csv.gz") + " --out " + path("data") +
                        " --label label --sparse shade --dense x1,x2 --buckets 16 --test-fraction 0.2");
  ASSERT_EQ(imp.code, 0) << imp.out;
  fs::create_directories(path("jobs"));
  const char* job_body =
      "[model]\ntype = \"mlp\"\nhidden = [32]\nembedding_dim = 4\n"
      "[train]\nepochs = 8\nbatch_size = 32\noptimizer = \"adam\"\nlearning_rate = 0.01\n"
      "[data]\nsource = \"store\"\ntrain = \"../data/train\"\ntest = \"../data/test\"\n";
  auto job = write("jobs/csv.toml", job_body);
  auto check = run_troupe("config check " + job);
  EXPECT_EQ(check.code, 0) << check.out;
  auto r = run_troupe("train --local " + job, stderr_mode::separate);
  ASSERT_EQ(r.code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_GT(j["test_accuracy"].get<double>(), 0.8) << r.out << "\nchance is about 0.33-0.5";
  EXPECT_GT(j["test_rows"].get<int>(), 300) << r.out;
  // The same stores in an elastic job: the runner and its nodes resolve the paths the same way.
  auto run_job =
      write("jobs/run.toml", "[job]\nstrategy = \"async_ps\"\nworkers = 2\nroot = \"" + path("runs") +
                                 "\"\nrecords_per_task = 256\n" + std::string(job_body));
  r = run_troupe("run " + run_job + " --quiet", stderr_mode::separate);
  ASSERT_EQ(r.code, 0) << r.err;
  j = nlohmann::json::parse(r.out.substr(r.out.rfind('{')));
  EXPECT_EQ(j["status"], "finished") << r.out;
  EXPECT_GT(j["test_accuracy"].get<double>(), 0.8) << r.out;
}

TEST_F(DataCsvCli, ConfigCheckNamesAMissingStore) {
  auto job = write("missing.toml",
                   "[model]\ntype = \"mlp\"\n[data]\nsource = \"store\"\ntrain = \"nowhere/train\"\n"
                   "test = \"nowhere/test\"\n");
  auto r = run_troupe("config check " + job);
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("key 'data.train': " + path("nowhere/train") + ": no such directory"),
            std::string::npos)
      << r.out;
}

// Refused by `config check` and by `run` before a job directory is made (both exit 2): a test store
// of another shape than the training store, and a [model] init that names nothing or a state of
// another model (before 2026-11-30 the check said ok; run failed after training, or left a failed
// job behind).
TEST_F(DataCsvCli, ConfigCheckAndRunRefuseMismatchedStoresAndABadInit) {
  auto csv = write("d.csv", synthetic_csv(300));
  ASSERT_EQ(run_troupe("data import csv " + csv + " --out " + path("a") +
                       " --label label --dense x1,x2 --sparse shade --buckets 16 --test-fraction 0.25")
                .code,
            0);
  ASSERT_EQ(
      run_troupe("data import csv " + csv + " --out " + path("b") + " --label label --dense x1,x2").code, 0);
  const std::string root = "[job]\nroot = \"" + path("jobs") + "\"\nstrategy = \"async_ps\"\n";
  const std::string model = "[model]\ntype = \"mlp\"\nhidden = [8]\n";
  auto data = [&](const std::string& test) {
    return "[data]\nsource = \"store\"\ntrain = \"a/train\"\ntest = \"" + test + "\"\n";
  };
  // A job that fits, to take an init from.
  auto good = write("good.toml", root + model + data("a/test") + "[train]\nepochs = 1\n");
  auto g = run_troupe("run " + good + " --job-id first --quiet");
  ASSERT_EQ(g.code, 0) << g.out;
  const std::vector<std::pair<std::string, std::string>> cases = {
      {root + model + data("b"),
       "key 'data.test': " + path("b") + ": rows of 2 dense values, 0 sparse fields"},
      {root + model + "init = \"nowhere\"\n" + data("a/test"),
       "model.init: " + path("nowhere") + ": neither a model directory"},
      {root + "[model]\ntype = \"mlp\"\nhidden = [4]\ninit = \"jobs/first\"\n" + data("a/test"),
       "the state does not fit this job's model"},
      // A damaged model directory: refused, not read for its state alone as if whole.
      {root + model + "init = \"broken\"\n" + data("a/test"), path("broken") + "/model.json"},
  };
  fs::copy(path("jobs/first/model"), path("broken"), fs::copy_options::recursive);
  std::ofstream(path("broken/model.json")) << "{\"format\": ";
  for (const auto& [toml, words] : cases) {
    auto file = write("bad.toml", toml);
    auto c = run_troupe("config check " + file);
    EXPECT_EQ(c.code, 2) << toml << "\n" << c.out;
    EXPECT_NE(c.out.find(words), std::string::npos) << toml << "\n" << c.out;
    auto r = run_troupe("run " + file + " --job-id refused --quiet");
    EXPECT_EQ(r.code, 2) << toml << "\n" << r.out;
    EXPECT_NE(r.out.find(words), std::string::npos) << toml << "\n" << r.out;
    EXPECT_FALSE(fs::exists(path("jobs/refused"))) << "a refused job left its directory\n" << toml;
  }
}

// A test store imported on its own is standardized with its own rows' statistics (or its columns
// in another order): of the training store's shape, but its rows read as other values. The job's
// test metrics were silently wrong (accuracy 0.52 for 0.925, "ok"); now refused naming data.test
// and the difference, and `data import csv --like` the training store encodes the rows alike.
TEST_F(DataCsvCli, ATestStoreEncodedOtherwiseIsRefusedAndLikeTheTrainingStoreFits) {
  auto csv = write("d.csv", synthetic_csv(300));
  auto held_out = write("held_out.csv", synthetic_csv(120));
  ASSERT_EQ(run_troupe("data import csv " + csv + " --out " + path("train") +
                       " --label label --dense x1,x2 --standardize --missing mean")
                .code,
            0);
  for (const auto& [dir, flags] : {std::pair{"apart", "--dense x1,x2 --standardize --missing mean"},
                                   std::pair{"swapped", "--dense x2,x1 --standardize --missing mean"}}) {
    ASSERT_EQ(
        run_troupe("data import csv " + held_out + " --out " + path(dir) + " --label label " + flags).code,
        0);
  }
  auto job = [&](const std::string& test) {
    return write(test + ".toml", "[job]\nroot = \"" + path("jobs") +
                                     "\"\n[model]\ntype = \"mlp\"\nhidden = [8]\n[data]\nsource = \"store\"\n"
                                     "train = \"train\"\ntest = \"" +
                                     test + "\"\n");
  };
  for (const auto& [test, words] :
       {std::pair{"apart", "the dense column 'x1' is standardized with mean"},
        std::pair{"swapped", "the dense columns are (x1, x2) in data.train's rows"}}) {
    auto c = run_troupe("config check " + job(test));
    EXPECT_EQ(c.code, 2) << c.out;
    EXPECT_NE(c.out.find("key 'data.test': " + path(test) +
                         ": its rows are encoded otherwise than the training rows: "),
              std::string::npos)
        << c.out;
    EXPECT_NE(c.out.find(words), std::string::npos) << c.out;
    EXPECT_NE(c.out.find("troupe data import csv --like " + path("train")), std::string::npos) << c.out;
  }
  auto like =
      run_troupe("data import csv " + held_out + " --out " + path("like") + " --like " + path("train"));
  ASSERT_EQ(like.code, 0) << like.out;
  EXPECT_NE(like.out.find("120 records"), std::string::npos) << like.out;
  auto c = run_troupe("config check " + job("like"));
  EXPECT_EQ(c.code, 0) << c.out;
  auto bare = run_troupe("data import csv " + held_out + " --out " + path("x") + " --like " + path("jobs"));
  EXPECT_EQ(bare.code, 2) << bare.out;
}

// A file of another separator read with the default one: its header is one column, and the error
// says which separator it holds (it said "no such column" alone).
TEST_F(DataCsvCli, AFileOfAnotherSeparatorIsToldWhichOne) {
  auto semi = write("semi.csv", "x1;x2;label\n1;2;0\n3;4;1\n");
  auto r = run_troupe("data import csv " + semi + " --out " + path("semi") + " --label label");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("the header reads as one column: is the file separated by ';'? (--delimiter ';')"),
            std::string::npos)
      << r.out;
  auto tab = write("tab.csv", "x1\tx2\tlabel\n1\t2\t0\n");
  r = run_troupe("data import csv " + tab + " --out " + path("tab") + " --label label");
  EXPECT_NE(r.out.find("(--delimiter tab)"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(path("semi"))) << "nothing left of a refused import";
}

// A column whose name holds a comma is named in --dense, --sparse and --standardize in double quotes
// (the lists were split at every comma: "dense column 'price': no such column"), and listed quoted.
TEST_F(DataCsvCli, AColumnNameWithACommaIsNamedInQuotes) {
  auto csv = write("names.csv",
                   "\"price, usd\",house type,\"y, class\",size\n1.5,a,yes,3\n2.5,b,no,4\n3.5,a,yes,5\n");
  auto r = run_troupe("data import csv " + csv + " --out " + path("n") +
                      " --label 'y, class' --sparse 'house type' --dense '\"price, usd\",size' --standardize "
                      "'\"price, usd\"'");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("dense (2): \"price, usd\", size"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("standardized (1)"), std::string::npos) << r.out;
  auto bad = run_troupe("data import csv " + csv + " --out " + path("m") +
                        " --label 'y, class' --dense 'price, usd'");
  EXPECT_EQ(bad.code, 2) << bad.out;
  EXPECT_NE(bad.out.find("dense column 'price': no such column"), std::string::npos) << bad.out;
}

}  // namespace
