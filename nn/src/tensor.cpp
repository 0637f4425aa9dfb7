#include "troupe/nn/tensor.hpp"

#include <algorithm>

namespace troupe::nn {

shape::shape(std::initializer_list<std::size_t> dims) {
  for (auto d : dims) dims_[rank_++] = d;
}

shape shape::of(const std::size_t* dims, std::size_t rank) {
  shape s;
  for (std::size_t i = 0; i < rank; ++i) s.dims_[i] = dims[i];
  s.rank_ = rank;
  return s;
}

std::size_t shape::size() const {
  std::size_t n = 1;
  for (std::size_t i = 0; i < rank_; ++i) n *= dims_[i];
  return n;
}

shape shape::batched(std::size_t n) const {
  shape s;
  s.rank_ = rank_ + 1;
  s.dims_[0] = n;
  for (std::size_t i = 0; i < rank_; ++i) s.dims_[i + 1] = dims_[i];
  return s;
}

shape shape::example() const {
  shape s;
  if (rank_ == 0) return s;
  s.rank_ = rank_ - 1;
  for (std::size_t i = 1; i < rank_; ++i) s.dims_[i - 1] = dims_[i];
  return s;
}

std::string shape::to_string() const {
  std::string s = "[";
  for (std::size_t i = 0; i < rank_; ++i) s += (i ? ", " : "") + std::to_string(dims_[i]);
  return s + "]";
}

bool shape::operator==(const shape& o) const {
  return rank_ == o.rank_ && std::equal(dims_.begin(), dims_.begin() + rank_, o.dims_.begin());
}

tensor tensor::view(float* data, const shape& s) {
  tensor t;
  t.shape_ = s;
  t.size_ = s.size();
  t.data_ = data;
  return t;
}

tensor::tensor(const tensor& o) {
  *this = o;
}

tensor& tensor::operator=(const tensor& o) {
  if (this == &o) return *this;
  resize(o.shape_);
  std::copy(o.begin(), o.end(), data_);
  return *this;
}

void tensor::resize(const shape& s) {
  shape_ = s;
  size_ = s.size();
  if (storage_.size() < size_) storage_.resize(size_);
  data_ = storage_.data();
}

void tensor::fill(float v) {
  std::fill(begin(), end(), v);
}

}  // namespace troupe::nn
