// The epoch loop of a device trainer (plain C++ over the device_trainer interface).
#include <algorithm>
#include <chrono>
#include <numeric>

#include "troupe/gpu/trainer.hpp"
#include "troupe/nn/random.hpp"

namespace troupe::gpu {

namespace {
// nn::trainer::train_epoch's order of rows for (seed, epoch).
std::vector<std::uint32_t> epoch_order(std::size_t rows, const nn::train_config& c, std::size_t epoch) {
  std::vector<std::uint32_t> order(rows);
  std::iota(order.begin(), order.end(), 0u);
  if (c.shuffle) {
    nn::rng r(nn::mix3(c.seed, epoch, 0x5eedf));
    for (std::size_t i = rows; i > 1; --i) std::swap(order[i - 1], order[r.below(i)]);
  }
  return order;
}
}  // namespace

expected<double> train_epoch(device_trainer& t, const nn::dataset& data, const nn::train_config& c,
                             std::size_t epoch, const std::function<void(const nn::progress&)>& report) {
  const std::size_t bs = c.batch_size ? c.batch_size : 1, steps = (data.rows + bs - 1) / bs;
  const auto order = epoch_order(data.rows, c, epoch);
  double total = 0, window = 0;
  std::size_t window_steps = 0, window_rows = 0;
  auto t0 = std::chrono::steady_clock::now();
  for (std::size_t s = 0; s < steps; ++s) {
    const std::size_t first = s * bs, n = std::min(bs, data.rows - first);
    auto loss = c.shuffle ? t.compute_gradients(nn::batch(data, std::span(order.data() + first, n)))
                          : t.compute_gradients(nn::batch(data, first, n));
    if (!loss) return loss.err();
    t.apply_gradients();
    total += *loss, window += *loss;
    ++window_steps, window_rows += n;
    if (report && c.log_every > 0 && (s + 1) % c.log_every == 0) {
      auto t1 = std::chrono::steady_clock::now();
      const double secs = std::chrono::duration<double>(t1 - t0).count();
      report({epoch + 1, s + 1, steps, window / static_cast<double>(window_steps),
              secs > 0 ? static_cast<double>(window_rows) / secs : 0});
      window = 0, window_steps = 0, window_rows = 0;
      t0 = t1;
    }
  }
  if (auto ok = t.sync(); !ok) return ok.err();
  return steps ? total / static_cast<double>(steps) : 0.0;
}

}  // namespace troupe::gpu
