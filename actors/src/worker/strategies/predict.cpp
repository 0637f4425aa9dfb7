// Prediction (`troupe predict`, `troupe evaluate`; ElasticDL's prediction mode): a job whose tasks
// are rows to run a trained model on. Each batch goes through the backend's forward (the exported
// model's predictor, backends/exported_backend.cpp); a task's rows are kept in record order with
// their probabilities and loss, and written as the task's output (worker_context::output) before
// the worker reports the task done. Workers do not talk to each other: a killed worker's task is
// simply leased again and its output written again.
#include "troupe/actors/strategy.hpp"

namespace troupe::actors {

namespace {

class predict final : public strategy {
 public:
  std::string_view name() const override { return "predict"; }
  bool keeps_row_order() const override { return true; }

  step_result step(worker_context& ctx, const nn::batch* b, bool exhausted) override {
    if (!b) return {exhausted ? step_result::kind::finished : step_result::kind::idle};
    auto loss = ctx.backend.predict(*b);
    if (!loss) throw std::runtime_error(loss.err().to_string());
    const auto probs = ctx.backend.probabilities();
    width_ = ctx.backend.output_width();
    values_.insert(values_.end(), probs.begin(),
                   probs.begin() + static_cast<std::ptrdiff_t>(b->size() * width_));
    for (std::size_t i = 0; i < b->size(); ++i) labels_.push_back(b->label(i));
    loss_sum_ += *loss * static_cast<double>(b->size());
    return {step_result::kind::trained, b->size(), *loss};
  }

  expected<void> task_done(worker_context& ctx, std::uint64_t task, std::uint64_t first,
                           std::size_t rows) override {
    auto reset = [this] {
      values_.clear();
      labels_.clear();
      loss_sum_ = 0;
    };
    if (labels_.size() != rows) {
      reset();
      return make_unexpected(core_errc::invalid_argument, "task " + std::to_string(task) + ": " +
                                                              std::to_string(labels_.size()) +
                                                              " rows predicted for " + std::to_string(rows));
    }
    auto w = ctx.output
                 ? ctx.output->write(task, first, rows, width_, labels_, values_, loss_sum_)
                 : expected<void>(make_unexpected(core_errc::invalid_argument, "no output for predictions"));
    reset();
    return w;
  }

 private:
  std::vector<float> values_, labels_;
  std::size_t width_ = 1;
  double loss_sum_ = 0;
};

}  // namespace

void register_predict_strategy() {
  static strategy_registrar reg("predict", [](const job::job_spec&) { return std::make_unique<predict>(); });
}

}  // namespace troupe::actors
