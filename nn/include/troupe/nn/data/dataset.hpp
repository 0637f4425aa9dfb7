// An in-memory training/evaluation set and batches that view into it.
//
// Layout (all row-major, row r of each array belongs to example r):
//   dense   float32 [rows x dense_dim]       (pixels in [0,1] for images, transformed ints for CTR)
//   sparse  uint64  [rows x sparse_fields]   one categorical id per field; ids are global: the
//                                            readers put the field into the id (see field_id), so
//                                            equal ids of different fields never collide and one
//                                            embedding table can serve all fields
//   labels  float32 [rows]                   class index (0..num_classes-1) or 0/1 for CTR
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "troupe/core/error.hpp"

namespace troupe::nn {

struct dataset_info {
  std::string name;                          // "fashion-mnist/train", "criteo:<path>", "synthetic-ctr"
  std::size_t dense_dim = 0;                 // floats per row
  std::size_t sparse_fields = 0;             // ids per row
  std::size_t num_classes = 2;               // 2: binary (CTR, sigmoid output); 10: Fashion-MNIST
  std::array<std::size_t, 3> image_shape{};  // {channels, height, width}; zeros when not an image
  std::uint64_t buckets_per_field = 0;       // ids of field f lie in [f*b, (f+1)*b); 0: unbounded
};

// Builds the global id of `local` (already < buckets) in `field`: field * buckets + local.
inline std::uint64_t field_id(std::size_t field, std::uint64_t buckets, std::uint64_t local) {
  return static_cast<std::uint64_t>(field) * buckets + local;
}

struct dataset {
  dataset_info info;
  std::size_t rows = 0;
  std::vector<float> dense;
  std::vector<std::uint64_t> sparse;
  std::vector<float> labels;

  const float* dense_row(std::size_t r) const { return dense.data() + r * info.dense_dim; }
  const std::uint64_t* sparse_row(std::size_t r) const { return sparse.data() + r * info.sparse_fields; }

  // Checks that the array sizes agree with rows and info, and labels with num_classes.
  expected<void> validate() const;
  // The rows [first, first+count) as a new dataset (for train/test splits).
  dataset slice(std::size_t first, std::size_t count) const;
  // `rows` rows of zeros (dense values, ids, labels) of `info`'s shape: a model's probe.
  static dataset zeros(const dataset_info& info, std::size_t rows);
};

// A batch: either a contiguous row range of a dataset, or gathered row indices. Cheap to copy;
// the dataset (and the index array) must outlive it.
class batch {
 public:
  batch(const dataset& d, std::size_t first, std::size_t count) : data_(&d), first_(first), count_(count) {}
  batch(const dataset& d, std::span<const std::uint32_t> indices)
      : data_(&d), count_(indices.size()), indices_(indices) {}

  const dataset& data() const { return *data_; }
  std::size_t size() const { return count_; }
  // The dataset row of batch example i.
  std::size_t row(std::size_t i) const { return indices_.empty() ? first_ + i : indices_[i]; }
  bool contiguous() const { return indices_.empty(); }
  // Examples [first, first + count) of this batch, as a batch (a micro-batch of gradient accumulation).
  batch sub(std::size_t first, std::size_t count) const {
    if (contiguous()) return batch(*data_, first_ + first, count);
    return batch(*data_, indices_.subspan(first, count));
  }
  const float* dense_row(std::size_t i) const { return data_->dense_row(row(i)); }
  const std::uint64_t* sparse_row(std::size_t i) const { return data_->sparse_row(row(i)); }
  float label(std::size_t i) const { return data_->labels[row(i)]; }

 private:
  const dataset* data_;
  std::size_t first_ = 0;
  std::size_t count_;
  std::span<const std::uint32_t> indices_;
};

}  // namespace troupe::nn
