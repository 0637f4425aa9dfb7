#include "troupe/nn/trainer.hpp"

#include <algorithm>
#include <chrono>
#include <numeric>

#include "troupe/nn/blas.hpp"
#include "troupe/nn/epoch.hpp"
#include "troupe/nn/errc.hpp"
#include "troupe/nn/metrics.hpp"
#include "troupe/nn/random.hpp"

namespace troupe::nn {

expected<std::unique_ptr<trainer>> trainer::create(model& m, const train_config& c) {
  if (c.batch_size == 0 || c.eval_batch_size == 0)
    return make_unexpected(nn_errc::bad_config, "batch_size and eval_batch_size must be > 0");
  auto opt = make_optimizer(c.optimizer);
  if (!opt) return opt.err();
  set_blas_threads(c.threads);
  return std::unique_ptr<trainer>(new trainer(m, c, std::move(*opt)));
}

trainer::trainer(model& m, const train_config& c, std::unique_ptr<optimizer> opt)
    : model_(m), config_(c), opt_(std::move(opt)) {
  for (dense_param* p : model_.parameters())
    if (p->trainable) params_.push_back(p);
  dense_state_.resize(params_.size());
  tables_ = model_.embedding_tables();
  for (auto* t : tables_) row_state_.emplace_back(t->dim(), *opt_);
}

expected<float> trainer::step(const batch& b) {
  auto loss = compute_gradients(b);
  if (!loss) return loss;
  apply_gradients();
  return loss;
}

expected<float> trainer::compute_gradients(const batch& b) {
  auto loss = model_.forward(b, true);
  if (!loss) return loss;
  model_.backward();
  return loss;
}

void trainer::apply_gradients(double lr_scale) {
  const double lr = opt_->learning_rate();
  if (lr_scale != 1.0) opt_->set_learning_rate(lr * lr_scale);
  for (std::size_t i = 0; i < params_.size(); ++i)
    apply_dense(*opt_, params_[i]->value, params_[i]->grad, dense_state_[i]);
  for (std::size_t i = 0; i < tables_.size(); ++i)
    apply_sparse(*opt_, *tables_[i], tables_[i]->grad(), row_state_[i]);
  opt_->set_learning_rate(lr);
  ++steps_;
}

expected<double> trainer::train_epoch(const dataset& data,
                                      const std::function<void(const progress&)>& report) {
  auto mean = run_epoch(
      data, config_, epoch_, order_,
      [&](const batch& b) -> expected<double> {
        auto loss = step(b);
        if (!loss) return loss.err();
        return static_cast<double>(*loss);
      },
      report);
  if (mean) ++epoch_;
  return mean;
}

expected<eval_result> trainer::evaluate(const dataset& data) {
  if (data.rows == 0) return eval_result{};
  const std::size_t classes = model_.num_classes(), width = classes == 2 ? 1 : classes;
  scores_.resize(data.rows * width);
  double loss_sum = 0;
  for (std::size_t first = 0; first < data.rows; first += config_.eval_batch_size) {
    const std::size_t n = std::min(config_.eval_batch_size, data.rows - first);
    auto loss = model_.forward(batch(data, first, n), false);
    if (!loss) return loss.err();
    loss_sum += static_cast<double>(*loss) * static_cast<double>(n);
    const tensor& p = model_.probabilities();
    std::copy(p.begin(), p.end(), scores_.begin() + static_cast<std::ptrdiff_t>(first * width));
  }
  return score_predictions(scores_, width, std::span<const float>(data.labels.data(), data.rows), loss_sum);
}

}  // namespace troupe::nn
