// `troupe data import csv` on data as users have it, for real (issue #44, item 5): string labels,
// NaN cells filled and counted, --standardize, the exact split and --seed in the command's output,
// the manifest `data inspect` prints, and a model trained on such a store.
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
using troupe::test_util::run_troupe;
using troupe::test_util::stderr_mode;

class DataCsvUsersCli : public troupe::test_util::scratch_test {
 protected:
  DataCsvUsersCli() : scratch_test("csv-users-cli") {}
};

// Three species told apart by two measurements on scales a thousand times apart (what
// standardization is for), a few NaN and NA cells, a fixed stream: the same file every run.
std::string species_csv(int rows) {
  std::string text = "length_mm,weight_g,species\n";
  std::uint64_t s = 4242;
  auto uniform = [&s] {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<double>(s >> 11) * 0x1.0p-53;
  };
  const char* names[] = {"cat", "dog", "bird"};
  for (int i = 0; i < rows; ++i) {
    const int k = static_cast<int>(uniform() * 3) % 3;
    const double length = 0.2 + 0.1 * k + 0.08 * uniform(), weight = 2000 + 900 * k + 700 * uniform();
    const std::string l = i % 50 == 7 ? "NaN" : std::to_string(length);
    const std::string w = i % 61 == 3 ? "NA" : std::to_string(weight);
    text += l + "," + w + "," + names[k] + "\n";
  }
  return text;
}

TEST_F(DataCsvUsersCli, StringLabelsNanStandardizeAndAnExactSplit) {
  auto csv = write("s.csv", species_csv(400));
  auto r = run_troupe("data import csv " + csv + " --out " + path("store") +
                      " --label species --missing zero --test-fraction 0.25 --seed 11 --standardize");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find(path("store/test") + ": 100 records (test fraction 0.25, seed 11)"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("(3 passes)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("label species: 3 classes, named in sorted order: 0=bird, 1=cat, 2=dog"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("standardized (2), mean and std of the training rows: length_mm "), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("filled 15 missing values with 0 (--missing zero)"), std::string::npos) << r.out;
  auto i = run_troupe("data inspect " + path("store/train"));
  ASSERT_EQ(i.code, 0) << i.out;
  EXPECT_NE(i.out.find("[columns]"), std::string::npos) << i.out;
  EXPECT_NE(i.out.find("class_names = [\"bird\", \"cat\", \"dog\"]"), std::string::npos) << i.out;
  EXPECT_NE(i.out.find("standardize = [\"length_mm\", \"weight_g\"]"), std::string::npos) << i.out;
  EXPECT_NE(i.out.find("missing = \"zero\""), std::string::npos) << i.out;
  // Without --missing zero the first NA refuses the file, naming line and column.
  r = run_troupe("data import csv " + csv + " --out " + path("refused") + " --label species");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find(csv + ":5: column 'weight_g' (2): missing value 'NA'"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(path("refused")));
  // A list names the columns; one that is not dense is refused.
  r = run_troupe("data import csv " + csv + " --standardize weight_g --out " + path("some") +
                 " --label species --missing skip-row");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("standardized (1), mean and std of the training rows: weight_g "), std::string::npos)
      << r.out;
  r = run_troupe("data import csv " + csv + " --standardize species --out " + path("bad") +
                 " --label species");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("--standardize: 'species' is not a dense column"), std::string::npos) << r.out;
  // Two columns as data.md shows them (a,b), given twice, or after `=` (CLI11 refused a,b before
  // 2026-11-30); --missing mean prints its fill values.
  for (const char* list :
       {" --standardize weight_g,length_mm", " --standardize weight_g --standardize length_mm",
        " --standardize=weight_g,length_mm"}) {
    fs::remove_all(path("two"));
    r = run_troupe("data import csv " + csv + list + " --out " + path("two") +
                   " --label species --missing mean");
    ASSERT_EQ(r.code, 0) << list << "\n" << r.out;
    EXPECT_NE(r.out.find("standardized (2), mean and std of the training rows: length_mm "),
              std::string::npos)
        << list << "\n"
        << r.out;
    EXPECT_NE(r.out.find("filled 15 missing values with their column's mean of the training rows (--missing "
                         "mean); a missing cell of each column takes: length_mm "),
              std::string::npos)
        << r.out;
  }
}

TEST_F(DataCsvUsersCli, AModelTrainsOnStringLabelledStandardizedData) {
  auto csv = write("s.csv", species_csv(1500));
  auto imp = run_troupe("data import csv " + csv + " --out " + path("data") +
                        " --label species --missing zero --test-fraction 0.2 --standardize");
  ASSERT_EQ(imp.code, 0) << imp.out;
  auto job = write("job.toml",
                   "[model]\ntype = \"mlp\"\nhidden = [16]\n"
                   "[train]\nepochs = 6\nbatch_size = 32\noptimizer = \"adam\"\nlearning_rate = 0.01\n"
                   "[data]\nsource = \"store\"\ntrain = \"data/train\"\ntest = \"data/test\"\n");
  auto r = run_troupe("train --local " + job, stderr_mode::separate);
  ASSERT_EQ(r.code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_GT(j["test_accuracy"].get<double>(), 0.8) << r.out << "\nchance is about 0.33";
  EXPECT_EQ(j["test_rows"].get<int>(), 300) << r.out;
}

}  // namespace
