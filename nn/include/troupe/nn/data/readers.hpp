// Data readers producing an in-memory troupe::nn::dataset. Every error names the file and, for a
// malformed file, the record (image/label index, TSV line) where reading stopped.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "troupe/core/error.hpp"
#include "troupe/nn/data/dataset.hpp"

namespace troupe::nn {

inline constexpr const char* fashion_mnist_default_dir = "/usr/share/datasets/fashion-mnist";

// Reads `<dir>/<split>-images-idx3-ubyte.gz` and `<dir>/<split>-labels-idx1-ubyte.gz`
// (split "train": 60000 rows, "t10k": 10000 rows; uncompressed files without .gz are accepted
// too). dense_dim 784, pixels scaled to [0,1], image_shape {1,28,28}, num_classes 10.
// max_rows > 0 keeps only the first max_rows examples (fast tests).
expected<dataset> read_fashion_mnist(const std::string& dir, const std::string& split,
                                     std::size_t max_rows = 0);
// The rows read_fashion_mnist(dir, split, max_rows) reads, from the labels file's header alone.
expected<std::size_t> fashion_mnist_rows(const std::string& dir, const std::string& split,
                                         std::size_t max_rows = 0);

struct criteo_options {
  std::uint64_t buckets_per_field = 1u << 20;  // categorical values hash into this many ids per field
  std::size_t max_rows = 0;                    // 0: the whole file
  bool log_transform = true;                   // dense x -> log(1 + x) for x > 0, else x
};

// The id of a categorical value `text` of categorical field `field` (0-based among the categorical
// fields): field_id(field, buckets, 0) for an empty (missing) value, else field_id(field, buckets,
// 1 + xxh64(text, seed field) % (buckets - 1)). buckets >= 2. Every importer hashes this way (the
// Criteo reader, `troupe data import csv`), so a value gets the same id in every store.
std::uint64_t category_id(std::string_view text, std::size_t field, std::uint64_t buckets);

// Reads Criteo-format TSV: label \t 13 integers \t 26 hex categoricals (optionally gzipped,
// detected by content). Empty fields are allowed: a missing integer reads as 0, a missing
// categorical gets its field's "missing" id; each value gets category_id(text, f, buckets).
// dense_dim 13, sparse_fields 26, num_classes 2. A line with the wrong number of fields, a bad
// label or a non-integer in an integer column is an error naming the file and line.
expected<dataset> read_criteo_tsv(const std::string& path, const criteo_options& options = {});

struct synthetic_ctr_options {
  std::size_t rows = 10000;
  std::size_t fields = 8;
  std::uint64_t vocab_per_field = 1000;  // ids of field f: field_id(f, vocab, rank)
  double zipf_exponent = 1.05;           // P(rank k) ~ 1 / (k+1)^s
  std::size_t dense_dim = 0;             // extra N(0,1) dense features with planted weights
  std::size_t factor_dim = 4;            // planted FM factor size (0: purely linear model)
  double weight_scale = 0.5;             // stddev of planted per-id weights
  double factor_scale = 0.35;            // stddev of planted factor entries
  double bias = -1.0;                    // planted global bias (sets the click rate)
  std::uint64_t model_seed = 1;          // the planted model: same seed, same model
  std::uint64_t sample_seed = 2;         // the rows: use another sample_seed for a test set
};

struct synthetic_ctr {
  dataset data;
  double true_auc = 0;      // AUC of the planted model's probabilities on `data`
  double true_logloss = 0;  // log loss of those probabilities
  double positive_rate = 0;
};

// A CTR dataset whose labels are drawn from sigmoid(bias + sum_f w[id_f] + sum_{f<g} <v[id_f],
// v[id_g]> + <wd, dense>), with w, v, wd derived deterministically from model_seed and the id.
expected<synthetic_ctr> generate_synthetic_ctr(const synthetic_ctr_options& options);

}  // namespace troupe::nn
