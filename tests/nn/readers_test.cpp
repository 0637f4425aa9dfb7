#include <gtest/gtest.h>
#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "troupe/nn/data/readers.hpp"
#include "troupe/nn/errc.hpp"

namespace troupe::nn {
namespace {

namespace fs = std::filesystem;

fs::path temp_dir(const std::string& name) {
  auto p = fs::temp_directory_path() / ("troupe_nn_" + name + "_" + std::to_string(::getpid()));
  fs::create_directories(p);
  return p;
}

void write_gz(const fs::path& path, const std::vector<unsigned char>& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size()));
  gzclose(f);
}

std::vector<unsigned char> be(std::initializer_list<std::uint32_t> words) {
  std::vector<unsigned char> out;
  for (auto w : words)
    for (int s = 24; s >= 0; s -= 8) out.push_back(static_cast<unsigned char>(w >> s));
  return out;
}

TEST(readers, fashion_mnist_reads_scaled_pixels_and_labels) {
  if (!fs::exists(std::string(fashion_mnist_default_dir) + "/t10k-labels-idx1-ubyte.gz"))
    GTEST_SKIP() << "dataset-fashion-mnist is not installed at " << fashion_mnist_default_dir;
  auto d = read_fashion_mnist(fashion_mnist_default_dir, "t10k");
  ASSERT_TRUE(d) << d.err().to_string();
  EXPECT_EQ(d->rows, 10000u);
  EXPECT_EQ(d->info.dense_dim, 784u);
  EXPECT_EQ(d->info.num_classes, 10u);
  EXPECT_EQ(d->info.image_shape, (std::array<std::size_t, 3>{1, 28, 28}));
  EXPECT_TRUE(d->validate());
  auto [lo, hi] = std::minmax_element(d->dense.begin(), d->dense.end());
  EXPECT_EQ(*lo, 0.0f);
  EXPECT_EQ(*hi, 1.0f);
  EXPECT_EQ(d->labels[0], 9.0f);  // the first t10k image is an ankle boot
  auto small = read_fashion_mnist(fashion_mnist_default_dir, "train", 100);
  ASSERT_TRUE(small);
  EXPECT_EQ(small->rows, 100u);
}

TEST(readers, fashion_mnist_wrong_magic_names_file) {
  auto dir = temp_dir("magic");
  write_gz(dir / "train-images-idx3-ubyte.gz", be({0x0801, 1, 28, 28}));
  auto d = read_fashion_mnist(dir.string(), "train");
  ASSERT_FALSE(d);
  EXPECT_TRUE(d.err() == nn_errc::bad_data);
  EXPECT_NE(d.err().context().find("train-images-idx3-ubyte.gz: wrong magic 0x00000801"), std::string::npos)
      << d.err().to_string();
  fs::remove_all(dir);
}

TEST(readers, fashion_mnist_truncated_names_record) {
  auto dir = temp_dir("trunc");
  auto img = be({0x0803, 3, 2, 2});
  for (int i = 0; i < 6; ++i) img.push_back(7);  // 1.5 of 3 images
  write_gz(dir / "t10k-images-idx3-ubyte.gz", img);
  auto d = read_fashion_mnist(dir.string(), "t10k");
  ASSERT_FALSE(d);
  EXPECT_NE(d.err().context().find("truncated at image 1 of 3"), std::string::npos) << d.err().to_string();
  fs::remove_all(dir);
}

TEST(readers, fashion_mnist_missing_dir_and_bad_split) {
  auto d = read_fashion_mnist("/nonexistent/dir", "train");
  ASSERT_FALSE(d);
  EXPECT_TRUE(d.err() == nn_errc::io_error);
  EXPECT_NE(d.err().context().find("/nonexistent/dir/train-images-idx3-ubyte.gz"), std::string::npos);
  EXPECT_TRUE(read_fashion_mnist("/x", "test").err() == nn_errc::bad_config);
}

std::string criteo_line(const std::string& label, const std::string& i1, const std::string& c1) {
  std::string s = label + "\t" + i1;
  for (int i = 1; i < 13; ++i) {
    s += '\t';
    s += std::to_string(i);
  }
  s += "\t" + c1;
  for (int i = 1; i < 26; ++i) s += "\t68fd1e64";
  return s;
}

TEST(readers, criteo_parses_missing_values_and_hashes_per_field) {
  auto dir = temp_dir("criteo");
  auto path = dir / "day.tsv";
  std::ofstream(path) << criteo_line("1", "", "") << "\n" << criteo_line("0", "5", "abc") << "\n";
  auto d = read_criteo_tsv(path.string(), {.buckets_per_field = 1000});
  ASSERT_TRUE(d) << d.err().to_string();
  EXPECT_EQ(d->rows, 2u);
  EXPECT_TRUE(d->validate());
  EXPECT_EQ(d->labels, (std::vector<float>{1, 0}));
  EXPECT_EQ(d->dense[0], 0.0f);                     // missing integer
  EXPECT_FLOAT_EQ(d->dense[13], std::log1p(5.0f));  // log transform
  EXPECT_EQ(d->sparse[0], 0u);                      // missing categorical of field 0
  EXPECT_GE(d->sparse[26], 1u);
  EXPECT_LT(d->sparse[26], 1000u);
  EXPECT_GE(d->sparse[1], 1000u);  // field 1 ids are in [1000, 2000)
  EXPECT_LT(d->sparse[1], 2000u);
  EXPECT_EQ(d->sparse[2] - 2000, d->sparse[28] - 2000);  // same value, same field: same id
  fs::remove_all(dir);
}

TEST(readers, criteo_reads_gzip_and_max_rows) {
  auto dir = temp_dir("criteo_gz");
  std::string text;
  for (int i = 0; i < 5; ++i)
    text +=
        criteo_line(i % 2 ? "1" : "0", std::to_string(i), std::string("c").append(std::to_string(i))) + "\n";
  write_gz(dir / "day.tsv.gz", std::vector<unsigned char>(text.begin(), text.end()));
  auto d = read_criteo_tsv((dir / "day.tsv.gz").string(), {.max_rows = 3});
  ASSERT_TRUE(d) << d.err().to_string();
  EXPECT_EQ(d->rows, 3u);
  EXPECT_EQ(d->labels, (std::vector<float>{0, 1, 0}));
  EXPECT_TRUE(d->validate());
  fs::remove_all(dir);
}

TEST(readers, criteo_malformed_line_names_file_and_line) {
  auto dir = temp_dir("criteo_bad");
  auto path = dir / "bad.tsv";
  std::ofstream(path) << criteo_line("0", "1", "a") << "\n" << criteo_line("1", "x7", "a") << "\n";
  auto d = read_criteo_tsv(path.string());
  ASSERT_FALSE(d);
  EXPECT_TRUE(d.err() == nn_errc::bad_data);
  EXPECT_NE(d.err().context().find("bad.tsv:2: integer column 1 is 'x7'"), std::string::npos)
      << d.err().to_string();
  std::ofstream(path) << "1\t2\t3\n";
  d = read_criteo_tsv(path.string());
  ASSERT_FALSE(d);
  EXPECT_NE(d.err().context().find("bad.tsv:1: 3 tab-separated fields, expected 40"), std::string::npos);
  fs::remove_all(dir);
}

TEST(readers, synthetic_ctr_is_deterministic_and_learnable) {
  synthetic_ctr_options o{.rows = 20000, .fields = 6, .vocab_per_field = 200};
  auto a = generate_synthetic_ctr(o);
  auto b = generate_synthetic_ctr(o);
  ASSERT_TRUE(a && b);
  EXPECT_TRUE(a->data.validate());
  EXPECT_EQ(a->data.sparse, b->data.sparse);
  EXPECT_EQ(a->data.labels, b->data.labels);
  EXPECT_GT(a->true_auc, 0.7);  // the planted signal is strong enough to learn
  EXPECT_LT(a->true_auc, 0.99);
  EXPECT_GT(a->positive_rate, 0.05);
  EXPECT_LT(a->positive_rate, 0.95);
  for (std::size_t i = 0; i < a->data.rows; ++i)
    for (std::size_t f = 0; f < 6; ++f) {
      auto id = a->data.sparse[i * 6 + f];
      ASSERT_GE(id, f * 200u);
      ASSERT_LT(id, (f + 1) * 200u);
    }
  o.sample_seed = 99;
  auto c = generate_synthetic_ctr(o);
  EXPECT_NE(c->data.labels, a->data.labels);
  EXPECT_NEAR(c->true_auc, a->true_auc, 0.02);  // same planted model, fresh rows
  o.fields = 0;
  EXPECT_TRUE(generate_synthetic_ctr(o).err() == nn_errc::bad_config);
}

}  // namespace
}  // namespace troupe::nn
