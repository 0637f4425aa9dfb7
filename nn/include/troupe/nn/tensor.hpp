// A float32 CPU tensor, row-major, up to 4 dimensions; dimension 0 is the batch.
//
// A tensor either owns its storage (resize() keeps the allocation when the new size fits, so
// buffers sized for the largest batch are never reallocated) or is a view of memory owned
// elsewhere (a batch of a dataset, a parameter of a peer). Not thread-safe.
#pragma once

#include <array>
#include <cstddef>
#include <initializer_list>
#include <string>
#include <vector>

namespace troupe::nn {

class shape {
 public:
  shape() = default;
  shape(std::initializer_list<std::size_t> dims);
  static shape of(const std::size_t* dims, std::size_t rank);

  std::size_t rank() const { return rank_; }
  std::size_t operator[](std::size_t i) const { return dims_[i]; }
  std::size_t& operator[](std::size_t i) { return dims_[i]; }
  std::size_t size() const;  // product of the dims (1 for rank 0)
  // The shape with `n` prepended (per-example shape -> batch shape).
  shape batched(std::size_t n) const;
  // The shape without dimension 0 (batch shape -> per-example shape).
  shape example() const;
  std::string to_string() const;  // "[64, 784]"
  bool operator==(const shape& o) const;

  static constexpr std::size_t max_rank = 4;

 private:
  std::array<std::size_t, max_rank> dims_{};
  std::size_t rank_ = 0;
};

class tensor {
 public:
  tensor() = default;
  explicit tensor(const shape& s) { resize(s); }
  // A non-owning view; `data` must outlive the tensor.
  static tensor view(float* data, const shape& s);
  static tensor view(const float* data, const shape& s) { return view(const_cast<float*>(data), s); }

  tensor(const tensor& o);
  tensor& operator=(const tensor& o);
  tensor(tensor&&) noexcept = default;
  tensor& operator=(tensor&&) noexcept = default;

  // Gives the tensor shape `s`, owning storage; contents are unspecified after a size change.
  void resize(const shape& s);
  void fill(float v);
  void zero() { fill(0.0f); }

  const shape& dims() const { return shape_; }
  std::size_t dim(std::size_t i) const { return shape_[i]; }
  std::size_t rank() const { return shape_.rank(); }
  std::size_t size() const { return size_; }
  // Elements per example (size / dim 0).
  std::size_t row_size() const { return shape_.rank() && shape_[0] ? size_ / shape_[0] : 0; }
  bool is_view() const { return data_ != nullptr && storage_.empty() && size_ > 0; }

  float* data() { return data_; }
  const float* data() const { return data_; }
  float& operator[](std::size_t i) { return data_[i]; }
  float operator[](std::size_t i) const { return data_[i]; }
  float* begin() { return data_; }
  float* end() { return data_ + size_; }
  const float* begin() const { return data_; }
  const float* end() const { return data_ + size_; }

 private:
  shape shape_;
  std::size_t size_ = 0;
  float* data_ = nullptr;
  std::vector<float> storage_;
};

}  // namespace troupe::nn
