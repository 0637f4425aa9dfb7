#include "checkpoint_codec.hpp"

#include <xxhash.h>

#include <algorithm>

#include "bytes.hpp"

namespace troupe::storage::ckpt {

namespace {
std::uint32_t sum(std::string_view key, const char* p, std::size_t n) {
  return static_cast<std::uint32_t>(XXH3_64bits_withSeed(p, n, XXH3_64bits(key.data(), key.size())));
}
}  // namespace

void append_key(std::string& k, std::uint64_t version, section sec, std::string_view name,
                std::uint64_t row) {
  const auto n = static_cast<std::uint16_t>(std::min<std::size_t>(name.size(), 0xffff));
  char buf[11 + 8];
  for (int i = 7; i >= 0; --i, version >>= 8) buf[i] = static_cast<char>(version & 0xff);
  buf[8] = static_cast<char>(sec);
  buf[9] = static_cast<char>(n >> 8);
  buf[10] = static_cast<char>(n & 0xff);
  k.append(buf, 11);
  k.append(name.substr(0, n));
  for (int i = 7; i >= 0; --i, row >>= 8) buf[11 + i] = static_cast<char>(row & 0xff);
  k.append(buf + 11, 8);
}

std::string encode_key(std::uint64_t version, section sec, std::string_view name, std::uint64_t row) {
  std::string k;
  append_key(k, version, sec, name, row);
  return k;
}

bool decode_key(std::string_view k, data_key& out) {
  if (k.size() < 8 + 1 + 2 + 8) return false;
  out.version = from_be64(k.substr(0, 8));
  auto sec = static_cast<std::uint8_t>(k[8]);
  std::size_t n = (static_cast<std::uint8_t>(k[9]) << 8) | static_cast<std::uint8_t>(k[10]);
  if (sec > embedding_slot || k.size() != 8 + 1 + 2 + n + 8) return false;
  out.sec = static_cast<section>(sec);
  out.name.assign(k.substr(11, n));
  out.row = from_be64(k.substr(11 + n, 8));
  return true;
}

void encode_value(std::string_view key, const std::vector<float>& v, char* out) {
  std::memcpy(out + 4, v.data(), 4 * v.size());
  std::uint32_t s = sum(key, out + 4, 4 * v.size());
  std::memcpy(out, &s, 4);
}

bool decode_value(std::string_view key, std::string_view v, std::vector<float>& out) {
  if (v.size() < 4 || (v.size() - 4) % 4 != 0) return false;
  std::uint32_t s;
  std::memcpy(&s, v.data(), 4);
  if (s != sum(key, v.data() + 4, v.size() - 4)) return false;
  out.resize((v.size() - 4) / 4);
  std::memcpy(out.data(), v.data() + 4, v.size() - 4);
  return true;
}

std::size_t rows_per_pack(std::size_t dim) {
  return std::clamp<std::size_t>((std::size_t{64} << 10) / (8 + 4 * dim), 1, 4096);
}

void encode_pack(std::string_view key, const row_ref* rows, std::size_t count, std::size_t dim, char* out) {
  const auto c = static_cast<std::uint32_t>(count), d = static_cast<std::uint32_t>(dim);
  std::memcpy(out + 4, &c, 4);
  std::memcpy(out + 8, &d, 4);
  char* ids = out + 12;
  char* data = ids + 8 * count;
  for (std::size_t i = 0; i < count; ++i) {
    std::memcpy(ids + 8 * i, &rows[i].first, 8);
    std::memcpy(data + 4 * dim * i, rows[i].second->data(), 4 * dim);
  }
  std::uint32_t s = sum(key, out + 4, pack_size(count, dim) - 4);
  std::memcpy(out, &s, 4);
}

bool decode_pack(std::string_view key, std::string_view v,
                 const std::function<void(std::uint64_t, std::vector<float>&&)>& fn) {
  if (v.size() < 12) return false;
  std::uint32_t s, c, d;
  std::memcpy(&s, v.data(), 4);
  std::memcpy(&c, v.data() + 4, 4);
  std::memcpy(&d, v.data() + 8, 4);
  if (v.size() != pack_size(c, d) || s != sum(key, v.data() + 4, v.size() - 4)) return false;
  const char* ids = v.data() + 12;
  const char* data = ids + 8 * std::size_t{c};
  for (std::size_t i = 0; i < c; ++i) {
    std::uint64_t id;
    std::memcpy(&id, ids + 8 * i, 8);
    std::vector<float> row(d);
    std::memcpy(row.data(), data + 4 * std::size_t{d} * i, 4 * std::size_t{d});
    fn(id, std::move(row));
  }
  return true;
}

std::string encode_info(const checkpoint_info& i) {
  byte_writer w;
  w.pod(i.format).pod(i.version).pod(i.parent).pod(static_cast<std::uint8_t>(i.kind));
  w.pod(static_cast<std::uint8_t>(i.complete)).pod(i.entries).pod(i.bytes);
  return std::move(w.bytes());
}

bool decode_info(std::string_view v, checkpoint_info& out) {
  byte_reader r(v);
  auto ver = r.pod<std::uint8_t>();
  out.version = r.pod<std::uint64_t>();
  out.parent = r.pod<std::uint64_t>();
  auto kind = r.pod<std::uint8_t>();
  out.complete = r.pod<std::uint8_t>() != 0;
  out.entries = r.pod<std::uint64_t>();
  out.bytes = r.pod<std::uint64_t>();
  out.kind = static_cast<checkpoint_kind>(kind);
  out.format = ver;
  return r.done() && (ver == 1 || ver == 2) && kind <= 1;
}

}  // namespace troupe::storage::ckpt
