#include "exported_backend.hpp"

#include <algorithm>
#include <cmath>

#include "troupe/model/model_dir.hpp"
#include "troupe/model/predictor.hpp"
#include "troupe/nn/errc.hpp"

namespace troupe::actors {

namespace {

class exported_backend final : public trainer_backend {
 public:
  exported_backend(std::unique_ptr<model::predictor> p, std::unique_ptr<nn::optimizer> none,
                   std::size_t fields)
      : predictor_(std::move(p)), none_(std::move(none)), fields_(fields) {}

  std::string_view name() const override { return "exported"; }
  std::string placement() const override { return predictor_->placement(); }
  expected<float> compute_gradients(const nn::batch&) override {
    return make_unexpected(core_errc::invalid_argument, "an exported model predicts; it does not train");
  }
  void apply_gradients(double) override {}
  std::span<float> parameters() override { return {}; }
  std::span<float> gradients() override { return {}; }
  const std::vector<param_slice>& layout() const override { return layout_; }
  const std::vector<nn::dense_param*>& dense_parameters() override { return params_; }
  const nn::optimizer& optimizer() const override { return *none_; }
  std::vector<nn::dense_slots>& optimizer_state() override { return slots_; }
  std::vector<std::uint64_t> batch_ids(const nn::batch&, std::size_t) override { return {}; }
  std::span<const float> probabilities() const override { return probs_; }
  std::size_t output_width() const override { return predictor_->width(); }
  expected<float> predict(const nn::batch& b) override;

 private:
  std::unique_ptr<model::predictor> predictor_;
  std::unique_ptr<nn::optimizer> none_;
  std::size_t fields_;
  std::vector<param_slice> layout_;
  std::vector<nn::dense_param*> params_;
  std::vector<nn::dense_slots> slots_;
  std::vector<float> dense_, logits_, probs_;
  std::vector<std::int64_t> ids_;
};

// Mean loss of the batch from its logits; probabilities into probs_.
double binary(const float* l, const nn::batch& b, float* p) {
  double sum = 0;
  for (std::size_t i = 0; i < b.size(); ++i) {
    const double x = l[i], y = b.label(i);
    p[i] = static_cast<float>(1.0 / (1.0 + std::exp(-x)));
    sum += std::max(x, 0.0) - x * y + std::log1p(std::exp(-std::fabs(x)));
  }
  return sum / static_cast<double>(b.size());
}

double softmax(const float* l, const nn::batch& b, std::size_t k, float* p) {
  double sum = 0;
  for (std::size_t i = 0; i < b.size(); ++i) {
    const float* row = l + i * k;
    const double top = *std::max_element(row, row + k);
    double z = 0;
    for (std::size_t c = 0; c < k; ++c) z += std::exp(row[c] - top);
    for (std::size_t c = 0; c < k; ++c) p[i * k + c] = static_cast<float>(std::exp(row[c] - top) / z);
    const auto y = std::min<std::size_t>(static_cast<std::size_t>(b.label(i)), k - 1);
    sum += std::log(z) + top - row[y];
  }
  return sum / static_cast<double>(b.size());
}

expected<float> exported_backend::predict(const nn::batch& b) {
  const std::size_t n = b.size(), dd = b.data().info.dense_dim, k = predictor_->width();
  dense_.resize(n * dd);
  ids_.resize(n * fields_);
  for (std::size_t i = 0; i < n; ++i) {
    std::copy(b.dense_row(i), b.dense_row(i) + dd, dense_.data() + i * dd);
    for (std::size_t f = 0; f < fields_; ++f)
      ids_[i * fields_ + f] = static_cast<std::int64_t>(b.sparse_row(i)[f]);
  }
  logits_.resize(n * k);
  probs_.resize(n * k);
  if (auto e = predictor_->predict(dense_.data(), fields_ ? ids_.data() : nullptr, n, logits_.data());
      !e.empty())  // the model's own failure (a user module's ValueError), or the shape it returned
    return make_unexpected(nn::nn_errc::model_failed, e);
  return static_cast<float>(k == 1 ? binary(logits_.data(), b, probs_.data())
                                   : softmax(logits_.data(), b, k, probs_.data()));
}

}  // namespace

expected<std::unique_ptr<trainer_backend>> make_exported_backend(const std::string& model_dir,
                                                                 const nn::dataset_info& data, int threads,
                                                                 std::size_t max_batch) {
  auto info = model::read_model_dir(model_dir);
  if (!info) return info.err();
  if (info->dense_dim != data.dense_dim || info->fields != data.sparse_fields)
    return make_unexpected(core_errc::invalid_argument,
                           model_dir + "/model.json: the model takes " + std::to_string(info->dense_dim) +
                               " dense values and " + std::to_string(info->fields) +
                               " sparse fields a row; the data (" + data.name + ") has " +
                               std::to_string(data.dense_dim) + " and " + std::to_string(data.sparse_fields));
  auto o = model::options_for(*info);
  o.threads = threads;
  o.max_batch = std::max<std::size_t>(1, max_batch);
  // No warm-up forwards: a prediction job's first batch warms the model as well (serving warms up,
  // its first request must not); the load's probe on two rows still checks the logits. The runner
  // builds this backend twice to check the job, and 20 forwards of a max_batch of 1,024 rows cost a
  // large MLP ~0.3 s each time.
  o.warmup = 0;
  auto p = model::load_predictor(o);
  if (!p) return p.err();
  auto none = nn::make_optimizer(nn::optimizer_config{});
  if (!none) return none.err();
  return std::unique_ptr<trainer_backend>(
      new exported_backend(std::move(*p), std::move(*none), info->fields));
}

}  // namespace troupe::actors
