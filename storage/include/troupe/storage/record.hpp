// One training example and its on-disk encoding (docs/storage_format.md, "records"):
//   [u32 checksum][f32 label][f32 dense[dense_dim]][u64 sparse[sparse_fields]]   little-endian
// checksum = low 32 bits of XXH3_64(everything after it, seed = record index), so flipped bits,
// a truncated value and a value stored under the wrong index are all detected.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "troupe/core/error.hpp"
#include "troupe/storage/errc.hpp"

namespace troupe::storage {

struct record_schema {
  std::uint32_t dense_dim = 0;
  std::uint32_t sparse_fields = 0;
  std::uint32_t num_classes = 0;           // 0: regression or binary label in [0, 1]
  std::vector<std::uint32_t> image_shape;  // e.g. {1, 28, 28}; empty when not an image
  std::uint64_t buckets_per_field = 0;     // ids of field f lie in [f*b, (f+1)*b); 0: unbounded
  bool operator==(const record_schema&) const = default;
};

struct record {
  float label = 0;
  std::vector<float> dense;           // dense_dim values
  std::vector<std::uint64_t> sparse;  // sparse_fields ids (already hashed into the id space)
  bool operator==(const record&) const = default;
};

// Bytes of one encoded record under `s`.
std::size_t encoded_size(const record_schema& s);

// Checks `r` against the schema; the error names `index`.
expected<void> check_shape(const record_schema& s, std::uint64_t index, const record& r);

// Writes encoded_size(s) bytes to `out`. `r` must have the schema's shape (check_shape).
void encode_record(const record_schema& s, std::uint64_t index, const record& r, char* out);

// Decodes into `out` (reusing its buffers). Errors (corrupt_record) name `where` and the index.
expected<void> decode_record(const record_schema& s, std::uint64_t index, std::string_view bytes, record& out,
                             const std::string& where);

// Where decode_record_to puts one record's fields: a label, dense_dim floats, sparse_fields ids
// (a row of a dataset, say).
struct record_slots {
  float* label;
  float* dense;
  std::uint64_t* sparse;
};
// As decode_record, straight into `out` (no intermediate record); nothing is written on an error.
expected<void> decode_record_to(const record_schema& s, std::uint64_t index, std::string_view bytes,
                                const record_slots& out, const std::string& where);

}  // namespace troupe::storage
