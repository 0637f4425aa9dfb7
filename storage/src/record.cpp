#include "troupe/storage/record.hpp"

#include <xxhash.h>

#include <cstring>

namespace troupe::storage {

namespace {
std::uint32_t checksum(std::uint64_t index, const char* payload, std::size_t n) {
  return static_cast<std::uint32_t>(XXH3_64bits_withSeed(payload, n, index));
}
}  // namespace

std::size_t encoded_size(const record_schema& s) {
  return 4 + 4 + 4 * std::size_t{s.dense_dim} + 8 * std::size_t{s.sparse_fields};
}

expected<void> check_shape(const record_schema& s, std::uint64_t index, const record& r) {
  if (r.dense.size() != s.dense_dim || r.sparse.size() != s.sparse_fields)
    return make_unexpected(storage_errc::invalid_argument,
                           "record " + std::to_string(index) + ": has " + std::to_string(r.dense.size()) +
                               " dense / " + std::to_string(r.sparse.size()) +
                               " sparse values, schema needs " + std::to_string(s.dense_dim) + " / " +
                               std::to_string(s.sparse_fields));
  return {};
}

void encode_record(const record_schema& s, std::uint64_t index, const record& r, char* out) {
  char* p = out + 4;
  std::memcpy(p, &r.label, 4);
  p += 4;
  std::memcpy(p, r.dense.data(), 4 * std::size_t{s.dense_dim});
  p += 4 * std::size_t{s.dense_dim};
  std::memcpy(p, r.sparse.data(), 8 * std::size_t{s.sparse_fields});
  std::uint32_t sum = checksum(index, out + 4, encoded_size(s) - 4);
  std::memcpy(out, &sum, 4);
}

namespace {
// The record's size and checksum, checked; errors name `where` and the index.
expected<void> verify(const record_schema& s, std::uint64_t index, std::string_view bytes,
                      const std::string& where) {
  const std::size_t need = encoded_size(s);
  if (bytes.size() != need)
    return make_unexpected(storage_errc::corrupt_record,
                           where + ": record " + std::to_string(index) + ": " + std::to_string(bytes.size()) +
                               " bytes, the schema needs " + std::to_string(need) +
                               (bytes.size() < need ? " (truncated)" : ""));
  std::uint32_t stored;
  std::memcpy(&stored, bytes.data(), 4);
  if (stored != checksum(index, bytes.data() + 4, need - 4))
    return make_unexpected(storage_errc::corrupt_record,
                           where + ": record " + std::to_string(index) + ": checksum mismatch");
  return {};
}

void copy_fields(const record_schema& s, const char* p, const record_slots& out) {
  std::memcpy(out.label, p + 4, 4);
  std::memcpy(out.dense, p + 8, 4 * std::size_t{s.dense_dim});
  std::memcpy(out.sparse, p + 8 + 4 * std::size_t{s.dense_dim}, 8 * std::size_t{s.sparse_fields});
}
}  // namespace

expected<void> decode_record(const record_schema& s, std::uint64_t index, std::string_view bytes, record& out,
                             const std::string& where) {
  if (auto v = verify(s, index, bytes, where); !v) return v;
  out.dense.resize(s.dense_dim);
  out.sparse.resize(s.sparse_fields);
  copy_fields(s, bytes.data(), record_slots{&out.label, out.dense.data(), out.sparse.data()});
  return {};
}

expected<void> decode_record_to(const record_schema& s, std::uint64_t index, std::string_view bytes,
                                const record_slots& out, const std::string& where) {
  if (auto v = verify(s, index, bytes, where); !v) return v;
  copy_fields(s, bytes.data(), out);
  return {};
}

}  // namespace troupe::storage
