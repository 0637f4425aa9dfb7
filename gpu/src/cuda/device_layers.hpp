// Constructors of the device layers (one per nn layer kind), used by make_device_layer.
#pragma once

#include <memory>

#include "troupe/gpu/layers.hpp"
#include "troupe/nn/layers.hpp"

namespace troupe::gpu {

// Output element count per example of each node is what the factory passes as `out`.
std::unique_ptr<device_layer> make_input(std::size_t width);
std::unique_ptr<device_layer> make_dense(std::size_t in, std::size_t units);
std::unique_ptr<device_layer> make_relu(std::size_t width);
std::unique_ptr<device_layer> make_sigmoid(std::size_t width);
std::unique_ptr<device_layer> make_dropout(std::size_t width, float rate, std::uint64_t seed);
std::unique_ptr<device_layer> make_flatten(std::size_t width);
std::unique_ptr<device_layer> make_concat(std::vector<std::size_t> widths);
std::unique_ptr<device_layer> make_add(std::size_t width, std::size_t inputs);
std::unique_ptr<device_layer> make_sum(std::size_t width);
std::unique_ptr<device_layer> make_fm(std::size_t fields, std::size_t dim);
std::unique_ptr<device_layer> make_embedding(nn::embedding_layer& host);

// Grows `buf` to at least `n` elements (contents lost).
template <class T>
expected<void> reserve(device_buffer<T>& buf, std::size_t n) {
  if (buf.size() >= n) return {};
  auto b = device_buffer<T>::alloc(n);
  if (!b) return std::move(b).err();
  buf = std::move(*b);
  return {};
}

}  // namespace troupe::gpu
