// The epoch loop of a device trainer (plain C++ over the device_trainer interface): nn's epoch loop
// (nn/epoch.hpp) with the device's steps.
#include "troupe/nn/epoch.hpp"

#include "troupe/gpu/trainer.hpp"

namespace troupe::gpu {

expected<double> train_epoch(device_trainer& t, const nn::dataset& data, const nn::train_config& c,
                             std::size_t epoch, const std::function<void(const nn::progress&)>& report) {
  std::vector<std::uint32_t> order;
  auto mean = nn::run_epoch(
      data, c, epoch, order,
      [&](const nn::batch& b) -> expected<double> {
        auto loss = t.compute_gradients(b);
        if (!loss) return loss.err();
        t.apply_gradients();
        return static_cast<double>(*loss);
      },
      report);
  if (!mean) return mean;
  if (auto ok = t.sync(); !ok) return ok.err();
  return mean;
}

}  // namespace troupe::gpu
