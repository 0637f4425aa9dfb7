#include "troupe/nn/epoch.hpp"

#include <algorithm>
#include <chrono>
#include <numeric>
#include <span>

#include "troupe/core/clock.hpp"
#include "troupe/nn/random.hpp"

namespace troupe::nn {

namespace {
// Mean loss and throughput over the steps since the last report.
class progress_window {
 public:
  void add(double loss, std::size_t rows) {
    loss_ += loss;
    ++steps_;
    rows_ += rows;
  }
  progress take(std::size_t epoch, std::size_t step, std::size_t steps_per_epoch) {
    auto now = clock::system().now();
    const double secs = std::chrono::duration<double>(now - since_).count();
    progress p{epoch, step, steps_per_epoch, loss_ / static_cast<double>(steps_),
               secs > 0 ? static_cast<double>(rows_) / secs : 0};
    *this = progress_window{};
    since_ = now;
    return p;
  }

 private:
  double loss_ = 0;
  std::size_t steps_ = 0, rows_ = 0;
  // Real time: the throughput reported is rows per second of the machine's.
  clock::time_point since_ = clock::system().now();
};
}  // namespace

void epoch_order(std::size_t rows, const train_config& config, std::size_t epoch,
                 std::vector<std::uint32_t>& order) {
  order.resize(rows);
  std::iota(order.begin(), order.end(), 0u);
  if (!config.shuffle) return;
  rng r(mix3(config.seed, epoch, 0x5eedf));
  for (std::size_t i = rows; i > 1; --i) std::swap(order[i - 1], order[r.below(i)]);
}

expected<double> run_epoch(const dataset& data, const train_config& config, std::size_t epoch,
                           std::vector<std::uint32_t>& order,
                           const std::function<expected<double>(const batch&)>& step,
                           const std::function<void(const progress&)>& report) {
  const std::size_t bs = config.batch_size ? config.batch_size : 1, steps = (data.rows + bs - 1) / bs;
  epoch_order(data.rows, config, epoch, order);
  double total = 0;
  progress_window window;
  for (std::size_t s = 0; s < steps; ++s) {
    const std::size_t first = s * bs, n = std::min(bs, data.rows - first);
    auto loss = config.shuffle ? step(batch(data, std::span<const std::uint32_t>(order.data() + first, n)))
                               : step(batch(data, first, n));
    if (!loss) return loss.err();
    total += *loss;
    window.add(*loss, n);
    if (report && config.log_every > 0 && (s + 1) % config.log_every == 0)
      report(window.take(epoch + 1, s + 1, steps));
  }
  return steps ? total / static_cast<double>(steps) : 0.0;
}

}  // namespace troupe::nn
