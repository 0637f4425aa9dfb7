// Keys and values of the checkpoint databases (docs/storage_format.md, "checkpoints").
//   ckpt_versions: be64(version) -> header (checkpoint_info)
//   ckpt_data:     be64(version) u8(section) u16(name length) name be64(row) -> u32 checksum, f32[]
//   ckpt_meta:     "latest" -> u64 version
#pragma once

#include <string>
#include <string_view>

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

std::string encode_info(const checkpoint_info& i);
bool decode_info(std::string_view v, checkpoint_info& out);

}  // namespace troupe::storage::ckpt
