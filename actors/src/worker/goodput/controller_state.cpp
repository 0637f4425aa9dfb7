// The controller's whole state as floats (controller.hpp, sync_floats): what a fresh ring's resync
// hands every rank and what a ring checkpoint keeps.
#include "controller.hpp"

#include <algorithm>

namespace troupe::actors::goodput {

void controller::pack(std::span<float> out) const {
  std::fill(out.begin(), out.begin() + sync_floats, 0.0f);
  ns_.pack(out.subspan(0, noise_scale::state_floats));
  auto s = out.subspan(noise_scale::state_floats);
  s[0] = static_cast<float>(progress_);
  s[1] = static_cast<float>(cur_.atomic);
  s[2] = static_cast<float>(cur_.accum);
  s[3] = static_cast<float>(seq_);
  s[4] = static_cast<float>(epoch_);
  s[5] = chosen_once_ ? (choice_due_ ? 2.0f : 1.0f) : 0.0f;  // 2: a choice is due
  s[6] = static_cast<float>(choice_.from);
  s[7] = static_cast<float>(choice_.predicted);
  s[8] = static_cast<float>(choice_.before);
  s[9] = static_cast<float>(obs_.size());
  s[10] = preconditioned_ ? 1.0f : 0.0f;
  s[11] = static_cast<float>(choice_.replicas);
  s[12] = static_cast<float>(choice_.at_progress);
  for (std::size_t i = 0; i < obs_.size(); ++i) {
    auto o = s.subspan(sync_header + 6 * i, 6);
    o[0] = static_cast<float>(obs_[i].o.hosts);
    o[1] = static_cast<float>(obs_[i].o.replicas);
    o[2] = static_cast<float>(obs_[i].o.atomic);
    o[3] = static_cast<float>(obs_[i].o.compute);
    o[4] = static_cast<float>(obs_[i].o.sync);
    o[5] = static_cast<float>(obs_[i].count);
  }
}

std::vector<float> controller::packed() const {
  std::vector<float> out(sync_floats);
  pack(out);
  return out;
}

void controller::unpack(std::span<const float> in) {
  ns_.unpack(in.subspan(0, noise_scale::state_floats));
  auto s = in.subspan(noise_scale::state_floats);
  progress_ = s[0];
  // The batch travels only where the controller sets it: a job resumed after its job.toml went from
  // batch = "auto" to a fixed batch kept the chosen batch its workers no longer cut (every round
  // looked short, and the rate was cut under lr_scaling = "none").
  if (s[1] > 0 && (opt_.auto_batch || opt_.global_batch))
    cur_ = {static_cast<int>(s[1]), static_cast<int>(s[2])};
  seq_ = static_cast<std::uint32_t>(s[3]);
  proposed_ = cur_;
  proposed_seq_ = seq_;
  epoch_ = static_cast<std::uint32_t>(s[4]);
  chosen_once_ = s[5] != 0.0f;
  choice_due_ = s[5] == 2.0f;
  choice_ = {static_cast<std::uint32_t>(s[6]), static_cast<std::uint32_t>(s[11]), s[7], s[8], s[12]};
  proposed_choice_ = choice_;
  preconditioned_ = s[10] != 0.0f;
  obs_.clear();
  const auto n = std::min<std::size_t>(static_cast<std::size_t>(s[9]), max_observations);
  for (std::size_t i = 0; i < n; ++i) {
    auto o = s.subspan(sync_header + 6 * i, 6);
    obs_.push_back({{static_cast<int>(o[0]), static_cast<int>(o[1]), o[2], o[3], o[4]}, o[5]});
  }
  pending_full_ = false;
  since_s_ = -1;
  since_samples_ = since_steps_ = 0;
}

}  // namespace troupe::actors::goodput
