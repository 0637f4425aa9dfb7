#include <algorithm>
#include <cmath>
#include <vector>

#include "troupe/nn/data/readers.hpp"
#include "troupe/nn/errc.hpp"
#include "troupe/nn/metrics.hpp"
#include "troupe/nn/random.hpp"

namespace troupe::nn {
namespace {

// Salts separating the planted model's draws (weights, factors, dense weights).
constexpr std::uint64_t salt_weight = 1, salt_factor = 2, salt_dense = 3;

class planted_model {
 public:
  // Tabulates the per-id parameters when the id space is small enough (the usual case); they
  // are pure functions of (model_seed, id) either way.
  explicit planted_model(const synthetic_ctr_options& o) : o_(o) {
    const std::uint64_t ids = o.fields * o.vocab_per_field;
    if (ids * (1 + o.factor_dim) > (std::uint64_t{1} << 26)) return;
    table_.resize(ids * (1 + o.factor_dim));
    for (std::uint64_t id = 0; id < ids; ++id) {
      double* row = table_.data() + id * (1 + o.factor_dim);
      row[0] = compute_weight(id);
      compute_factor(id, row + 1);
    }
  }

  double weight(std::uint64_t id) const {
    return table_.empty() ? compute_weight(id) : table_[id * (1 + o_.factor_dim)];
  }
  void factor(std::uint64_t id, double* v) const {
    if (table_.empty()) return compute_factor(id, v);
    const double* row = table_.data() + id * (1 + o_.factor_dim) + 1;
    std::copy(row, row + o_.factor_dim, v);
  }
  double compute_weight(std::uint64_t id) const {
    return o_.weight_scale * hashed_normal(o_.model_seed ^ salt_weight, id, 0);
  }
  void compute_factor(std::uint64_t id, double* v) const {
    for (std::size_t k = 0; k < o_.factor_dim; ++k)
      v[k] = o_.factor_scale * hashed_normal(o_.model_seed ^ (salt_factor << 32), id, k);
  }
  double dense_weight(std::size_t j) const {
    return hashed_normal(o_.model_seed ^ (salt_dense << 40), j, 0) /
           std::sqrt(static_cast<double>(std::max<std::size_t>(o_.dense_dim, 1)));
  }

  // logit = bias + sum w + FM pairwise (0.5 * (|sum v|^2 - sum |v|^2)) + <wd, x>.
  double logit(const std::uint64_t* ids, const float* x, std::vector<double>& scratch) const {
    const std::size_t k = o_.factor_dim;
    scratch.assign(2 * k, 0.0);
    double* sum = scratch.data();
    double* v = sum + k;
    double z = o_.bias, sq = 0;
    for (std::size_t f = 0; f < o_.fields; ++f) {
      z += weight(ids[f]);
      factor(ids[f], v);
      for (std::size_t j = 0; j < k; ++j) {
        sum[j] += v[j];
        sq += v[j] * v[j];
      }
    }
    double s2 = 0;
    for (std::size_t j = 0; j < k; ++j) s2 += sum[j] * sum[j];
    z += 0.5 * (s2 - sq);
    for (std::size_t j = 0; j < o_.dense_dim; ++j) z += dense_weight(j) * x[j];
    return z;
  }

 private:
  synthetic_ctr_options o_;
  std::vector<double> table_;  // per id: weight, factor[factor_dim]
};

// Cumulative Zipf distribution over ranks 0..n-1.
std::vector<double> zipf_cdf(std::uint64_t n, double s) {
  std::vector<double> cdf(n);
  double acc = 0;
  for (std::uint64_t k = 0; k < n; ++k) cdf[k] = acc += 1.0 / std::pow(static_cast<double>(k + 1), s);
  for (auto& c : cdf) c /= acc;
  return cdf;
}

expected<void> check(const synthetic_ctr_options& o) {
  auto bad = [](const std::string& why) {
    return make_unexpected(nn_errc::bad_config, "synthetic-ctr: " + why);
  };
  if (o.rows == 0) return bad("rows must be > 0");
  if (o.fields == 0 || o.fields > 1024)
    return bad("fields must be in [1, 1024], got " + std::to_string(o.fields));
  if (o.vocab_per_field == 0 || o.vocab_per_field > (1u << 24))
    return bad("vocab_per_field must be in [1, 16777216], got " + std::to_string(o.vocab_per_field));
  if (!(o.zipf_exponent >= 0 && o.zipf_exponent <= 10)) return bad("zipf_exponent must be in [0, 10]");
  if (o.factor_dim > 256 || o.dense_dim > 4096) return bad("factor_dim must be <= 256 and dense_dim <= 4096");
  return {};
}

}  // namespace

expected<synthetic_ctr> generate_synthetic_ctr(const synthetic_ctr_options& o) {
  if (auto r = check(o); !r) return r.err();
  synthetic_ctr out;
  dataset& d = out.data;
  d.info = {"synthetic-ctr", o.dense_dim, o.fields, 2, {}, o.vocab_per_field};
  d.rows = o.rows;
  d.dense.resize(o.rows * o.dense_dim);
  d.sparse.resize(o.rows * o.fields);
  d.labels.resize(o.rows);
  std::vector<float> probs(o.rows);
  const auto cdf = zipf_cdf(o.vocab_per_field, o.zipf_exponent);
  const planted_model model(o);
  rng r(splitmix64(o.sample_seed) ^ 0x5eed);
  std::vector<double> scratch;
  double positives = 0;
  for (std::size_t i = 0; i < o.rows; ++i) {
    std::uint64_t* ids = d.sparse.data() + i * o.fields;
    for (std::size_t f = 0; f < o.fields; ++f) {
      auto rank =
          static_cast<std::uint64_t>(std::lower_bound(cdf.begin(), cdf.end(), r.uniform()) - cdf.begin());
      ids[f] = field_id(f, o.vocab_per_field, std::min(rank, o.vocab_per_field - 1));
    }
    float* x = d.dense.data() + i * o.dense_dim;
    for (std::size_t j = 0; j < o.dense_dim; ++j) x[j] = static_cast<float>(r.normal());
    double p = 1.0 / (1.0 + std::exp(-model.logit(ids, x, scratch)));
    probs[i] = static_cast<float>(p);
    d.labels[i] = r.uniform() < p ? 1.0f : 0.0f;
    positives += d.labels[i];
  }
  out.true_auc = auc(probs, d.labels);
  out.true_logloss = log_loss(probs, d.labels);
  out.positive_rate = positives / static_cast<double>(o.rows);
  return out;
}

}  // namespace troupe::nn
