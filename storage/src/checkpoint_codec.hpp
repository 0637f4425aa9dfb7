// Keys and values of the checkpoint databases (docs/storage_format.md, "checkpoint store").
//   ckpt_versions: be64(version) -> header (checkpoint_info; its format byte says where the data is)
//   ckpt_data:     be64(version) u8(section) u16(name length) name be64(row) -> dense value or row pack
//                  (format 1 only: read, never written any more; format 2 data is in files)
//   ckpt_meta:     "latest" -> u64 version
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "troupe/storage/checkpoint_store.hpp"

namespace troupe::storage::ckpt {

// Sections of a checkpoint's data.
enum section : std::uint8_t { dense = 0, embedding = 1, dense_slot = 2, embedding_slot = 3 };

struct data_key {
  std::uint64_t version = 0;
  section sec = dense;
  std::string name;
  std::uint64_t row = 0;
};

std::string encode_key(std::uint64_t version, section sec, std::string_view name, std::uint64_t row);
// Appends the same bytes to `out`.
void append_key(std::string& out, std::uint64_t version, section sec, std::string_view name,
                std::uint64_t row);
bool decode_key(std::string_view k, data_key& out);

// Bytes of the value holding `n` floats.
inline std::size_t value_size(std::size_t n) {
  return 4 + 4 * n;
}
// Writes the value (checksum + floats) to `out` (value_size(v.size()) bytes); the checksum
// covers the key too.
void encode_value(std::string_view key, const std::vector<float>& v, char* out);
// false on a length or checksum mismatch.
bool decode_value(std::string_view key, std::string_view v, std::vector<float>& out);

// Embedding rows travel in packs of up to rows_per_pack(dim) rows of one table, sorted by id;
// the key's row field is the first id. Value:
//   u32 checksum | u32 count | u32 dim | u64 ids[count] | f32 rows[count * dim]
using row_ref = std::pair<std::uint64_t, const std::vector<float>*>;
std::size_t rows_per_pack(std::size_t dim);
inline std::size_t pack_size(std::size_t count, std::size_t dim) {
  return 12 + 8 * count + 4 * count * dim;
}
// Writes pack_size(count, dim) bytes; every row must have `dim` floats.
void encode_pack(std::string_view key, const row_ref* rows, std::size_t count, std::size_t dim, char* out);
// Calls fn(id, row floats) for each row; false on a length or checksum mismatch.
bool decode_pack(std::string_view key, std::string_view v,
                 const std::function<void(std::uint64_t, std::vector<float>&&)>& fn);

std::string encode_info(const checkpoint_info& i);
bool decode_info(std::string_view v, checkpoint_info& out);

}  // namespace troupe::storage::ckpt
