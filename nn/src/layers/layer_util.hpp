// Helpers shared by the layer implementations.
#pragma once

#include <string>

#include "troupe/nn/errc.hpp"
#include "troupe/nn/layer.hpp"
#include "troupe/nn/random.hpp"

namespace troupe::nn::detail {

inline unexpected shape_error(const layer& l, const std::string& what) {
  return make_unexpected(nn_errc::bad_shape, "layer '" + (l.name().empty() ? l.kind() : l.name()) + "' (" +
                                                 l.kind() + "): " + what);
}

inline void make_param(dense_param& p, const std::string& owner, const char* name, const shape& s,
                       bool trainable = true) {
  p.name = owner + "/" + name;
  p.value.resize(s);
  p.value.zero();
  p.trainable = trainable;
  if (trainable) {
    p.grad.resize(s);
    p.grad.zero();
  }
}

// Glorot-uniform (Keras' default): U(-l, l) with l = sqrt(6 / (fan_in + fan_out)).
inline void glorot_uniform(tensor& t, std::size_t fan_in, std::size_t fan_out, std::uint64_t seed) {
  rng r(seed);
  const double limit = std::sqrt(6.0 / static_cast<double>(fan_in + fan_out));
  for (auto& v : t) v = static_cast<float>((2 * r.uniform() - 1) * limit);
}

}  // namespace troupe::nn::detail
