#include "checkpoint_file.hpp"

#include <fcntl.h>
#include <sys/uio.h>
#include <unistd.h>
#define XXH_STATIC_LINKING_ONLY  // XXH3_state_t on the stack
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>

#include "checkpoint_codec.hpp"
#include "troupe/storage/disk_fault.hpp"

namespace troupe::storage::ckpt_file {

namespace {

constexpr char file_magic[8] = {'t', 'r', 'o', 'u', 'p', 'e', 'c', 'k'};
constexpr char end_magic[8] = {'t', 'r', 'o', 'u', 'p', 'e', 'n', 'd'};
constexpr std::uint32_t file_format = 2;
constexpr std::size_t header_size = 24, block_header_size = 16, trailer_size = 32;
constexpr std::size_t block_payload = std::size_t{8} << 20;     // bytes of rows per block, about
constexpr std::size_t writeback_every = std::size_t{32} << 20;  // start writing back this often
constexpr std::size_t staging_size = std::size_t{1} << 20;

error io_error(int err, const std::string& path, const std::string& doing) {
  if (auto f = disk_fault(err, path, doing)) return *f;
  return error(storage_errc::io_error, path + " (" + doing + "): " + std::strerror(err));
}

error corrupt(const std::string& path, std::uint64_t version, const std::string& what) {
  return error(storage_errc::corrupt_checkpoint, path + ": version " + std::to_string(version) + ": " + what);
}

struct fd_closer {
  int fd = -1;
  ~fd_closer() {
    if (fd >= 0) ::close(fd);
  }
};

// Sequential output: small pieces gathered in a staging buffer, large ones written straight from
// the caller's memory; writeback of what is written starts every writeback_every bytes, so that
// the final fdatasync waits for the tail only.
class file_out {
 public:
  file_out(int fd, std::string path) : fd_(fd), path_(std::move(path)), staging_(new char[staging_size]) {}
  expected<void> put(const void* p, std::size_t n) {
    if (n < staging_size / 4) {
      if (used_ + n > staging_size)
        if (auto r = flush(); !r) return r;
      std::memcpy(staging_.get() + used_, p, n);
      used_ += n;
      return {};
    }
    if (auto r = flush(); !r) return r;
    return write_all(static_cast<const char*>(p), n);
  }
  expected<void> flush() {
    if (used_ == 0) return {};
    auto r = write_all(staging_.get(), used_);
    used_ = 0;
    return r;
  }
  std::size_t offset() const { return offset_ + used_; }

 private:
  expected<void> write_all(const char* p, std::size_t n) {
    while (n > 0) {
      ssize_t w = ::write(fd_, p, std::min<std::size_t>(n, std::size_t{1} << 30));
      if (w < 0) {
        if (errno == EINTR) continue;
        return io_error(errno, path_, "write");
      }
      if (w == 0) return io_error(ENOSPC, path_, "write");
      p += w;
      n -= static_cast<std::size_t>(w);
      offset_ += static_cast<std::size_t>(w);
    }
    if (offset_ - synced_ >= writeback_every) {
      (void)::sync_file_range(fd_, static_cast<off_t>(synced_), static_cast<off_t>(offset_ - synced_),
                              SYNC_FILE_RANGE_WRITE);
      synced_ = offset_;
    }
    return {};
  }
  int fd_;
  std::string path_;
  std::unique_ptr<char[]> staging_;
  std::size_t used_ = 0, offset_ = 0, synced_ = 0;
};

// One block: header, name, ids (rows only), values, checksum.
struct block_header {
  std::uint8_t section = 0;
  std::uint8_t zero = 0;
  std::uint16_t name_len = 0;
  std::uint32_t width = 0;  // floats a row; 0: a dense tensor of `count` floats
  std::uint64_t count = 0;
};
static_assert(sizeof(block_header) == block_header_size);

expected<void> put_block(file_out& out, std::uint64_t version, ckpt::section sec, const std::string& name,
                         std::uint32_t width, std::uint64_t count, const std::uint64_t* ids,
                         const float* values, std::size_t floats) {
  block_header h{static_cast<std::uint8_t>(sec), 0, static_cast<std::uint16_t>(name.size()), width, count};
  XXH3_state_t st;
  XXH3_64bits_reset_withSeed(&st, version);
  XXH3_64bits_update(&st, &h, sizeof h);
  XXH3_64bits_update(&st, name.data(), name.size());
  if (ids) XXH3_64bits_update(&st, ids, 8 * count);
  XXH3_64bits_update(&st, values, 4 * floats);
  const std::uint64_t sum = XXH3_64bits_digest(&st);
  for (auto [p, n] : {std::pair<const void*, std::size_t>{&h, sizeof h},
                      {name.data(), name.size()},
                      {ids, ids ? 8 * count : 0},
                      {values, 4 * floats},
                      {&sum, sizeof sum}})
    if (n > 0)
      if (auto r = out.put(p, n); !r) return r;
  return {};
}

expected<void> put_all(file_out& out, std::uint64_t version, const flat_state& s, checkpoint_info& info) {
  const char zero[4] = {};
  if (auto r = out.put(file_magic, 8); !r) return r;
  if (auto r = out.put(&file_format, 4); !r) return r;
  if (auto r = out.put(zero, 4); !r) return r;
  if (auto r = out.put(&version, 8); !r) return r;
  std::uint64_t blocks = 0, bytes = 0;
  for (auto [sec, list] : {std::pair{ckpt::dense, &s.dense}, std::pair{ckpt::dense_slot, &s.dense_slots}})
    for (const auto& [name, v] : *list) {
      if (auto r = put_block(out, version, sec, name, 0, v.size(), nullptr, v.data(), v.size()); !r) return r;
      ++blocks;
      bytes += 4 * v.size();
    }
  for (auto [sec, list] :
       {std::pair{ckpt::embedding, &s.embeddings}, std::pair{ckpt::embedding_slot, &s.embedding_slots}})
    for (const auto& t : *list) {
      const std::size_t n = t.ids.size();
      if (n == 0) continue;  // a table with no rows is not stored
      const std::size_t per = std::max<std::size_t>(1, block_payload / (8 + 4 * t.width));
      for (std::size_t at = 0; at < n; at += per) {
        const std::size_t c = std::min(per, n - at);
        if (auto r = put_block(out, version, sec, t.name, static_cast<std::uint32_t>(t.width), c,
                               t.ids.data() + at, t.values.data() + at * t.width, c * t.width);
            !r)
          return r;
        ++blocks;
        bytes += 4 * c * t.width;
      }
    }
  std::uint64_t tail[3] = {blocks, bytes, 0};
  char end[trailer_size];
  std::memcpy(end, end_magic, 8);
  std::memcpy(end + 8, tail, 16);
  tail[2] = XXH3_64bits_withSeed(end, 24, version);
  std::memcpy(end + 24, &tail[2], 8);
  if (auto r = out.put(end, sizeof end); !r) return r;
  info.entries = blocks;
  info.bytes = bytes;
  return out.flush();
}

expected<void> fsync_dir(const std::string& dir) {
  fd_closer d{::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)};
  if (d.fd < 0) return io_error(errno, dir, "open directory");
  if (::fsync(d.fd) != 0) return io_error(errno, dir, "fsync directory");
  return {};
}

// Buffered sequential input; read() fails at the end of the file.
class file_in {
 public:
  explicit file_in(int fd) : fd_(fd) {}
  // false at a short read (end of file) or an error (errno set).
  bool read(void* p, std::size_t n) {
    auto* o = static_cast<char*>(p);
    while (n > 0) {
      if (at_ == end_) {
        if (n >= sizeof buf_) {  // large: straight into the destination
          ssize_t r = ::read(fd_, o, n);
          if (r < 0 && errno == EINTR) continue;
          if (r <= 0) return false;
          o += r;
          n -= static_cast<std::size_t>(r);
          continue;
        }
        ssize_t r = ::read(fd_, buf_, sizeof buf_);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return false;
        at_ = 0;
        end_ = static_cast<std::size_t>(r);
      }
      const std::size_t k = std::min(n, end_ - at_);
      std::memcpy(o, buf_ + at_, k);
      at_ += k;
      o += k;
      n -= k;
    }
    return true;
  }

 private:
  int fd_;
  char buf_[1 << 16];
  std::size_t at_ = 0, end_ = 0;
};

}  // namespace

std::string path_of(const std::string& dir, std::uint64_t version) {
  char name[32];
  std::snprintf(name, sizeof name, "v%020llu.ckpt", static_cast<unsigned long long>(version));
  return dir + "/" + name;
}

expected<void> write(const std::string& dir, std::uint64_t version, const flat_state& s,
                     checkpoint_info& info) {
  const std::string path = path_of(dir, version), tmp = path + ".tmp";
  {
    fd_closer f{::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)};
    if (f.fd < 0) return io_error(errno, tmp, "create");
    file_out out(f.fd, tmp);
    auto r = put_all(out, version, s, info);
    if (r && ::fdatasync(f.fd) != 0) r = io_error(errno, tmp, "fdatasync");
    if (!r) {
      ::unlink(tmp.c_str());
      return r;
    }
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    auto e = io_error(errno, path, "rename");
    ::unlink(tmp.c_str());
    return e;
  }
  return fsync_dir(dir);
}

namespace {

// What apply() reads of one data file: where, which version, how far it has got.
struct data_reader {
  file_in& in;
  const std::string& path;
  std::uint64_t version;
  std::uint64_t remaining;  // bytes after the header not yet read
  std::uint64_t blocks = 0, bytes = 0;

  error bad(const std::string& what) const { return corrupt(path, version, what); }

  // The magic, the format and the version the file says it holds.
  expected<void> header() {
    char head[header_size];
    std::uint32_t format = 0;
    std::uint64_t file_version = 0;
    if (!in.read(head, sizeof head) || std::memcmp(head, file_magic, 8) != 0)
      return bad("not a checkpoint data file");
    std::memcpy(&format, head + 8, 4);
    std::memcpy(&file_version, head + 16, 8);
    if (format != file_format)
      return error(storage_errc::version_mismatch, path + ": data file format " + std::to_string(format));
    if (file_version != version) return bad("the file holds version " + std::to_string(file_version));
    return {};
  }

  // The trailer, whose first bytes `h` holds: the last thing in the file, and it counts the blocks.
  expected<void> trailer(const block_header& h) {
    char end[trailer_size];
    std::memcpy(end, &h, sizeof h);
    if (remaining != trailer_size - block_header_size || !in.read(end + 16, 16))
      return bad("malformed trailer");
    std::uint64_t tail[3];
    std::memcpy(tail, end + 8, 24);
    if (tail[2] != XXH3_64bits_withSeed(end, 24, version) || tail[0] != blocks || tail[1] != bytes)
      return bad("trailer does not match the blocks");
    return {};
  }

  // The block after header `h`, its checksum verified, into `name`, `ids` (rows only), `values`.
  expected<void> block(const block_header& h, std::string& name, std::vector<std::uint64_t>& ids,
                       std::vector<float>& values) {
    const bool rows = h.section == ckpt::embedding || h.section == ckpt::embedding_slot;
    if (h.section > ckpt::embedding_slot || h.zero != 0 || rows != (h.width > 0))
      return bad("malformed block " + std::to_string(blocks));
    const std::uint64_t floats = rows ? h.count * h.width : h.count;
    const std::uint64_t need = h.name_len + (rows ? 8 * h.count : 0) + 4 * floats + 8;
    if ((rows && h.count > remaining / 8) || floats > remaining / 4 || need > remaining)
      return bad("block " + std::to_string(blocks) + " runs past the end of the file");
    remaining -= need;
    name.resize(h.name_len);
    ids.resize(rows ? h.count : 0);
    values.resize(floats);
    std::uint64_t sum = 0;
    if (!in.read(name.data(), name.size()) || !in.read(ids.data(), 8 * ids.size()) ||
        !in.read(values.data(), 4 * values.size()) || !in.read(&sum, 8))
      return bad("truncated");
    XXH3_state_t st;
    XXH3_64bits_reset_withSeed(&st, version);
    XXH3_64bits_update(&st, &h, sizeof h);
    XXH3_64bits_update(&st, name.data(), name.size());
    XXH3_64bits_update(&st, ids.data(), 8 * ids.size());
    XXH3_64bits_update(&st, values.data(), 4 * values.size());
    if (sum != XXH3_64bits_digest(&st))
      return bad("checksum mismatch in '" + name + "'" +
                 (rows ? " rows from " + std::to_string(ids.empty() ? 0 : ids[0]) : std::string()));
    ++blocks;
    bytes += 4 * floats;
    return {};
  }
};

void store(const block_header& h, const std::string& name, const std::vector<std::uint64_t>& ids,
           const std::vector<float>& values, shard_state& s) {
  if (h.width > 0) {
    auto& table = (h.section == ckpt::embedding ? s.embeddings : s.embedding_slots)[name];
    for (std::size_t i = 0; i < ids.size(); ++i) {
      const float* r = values.data() + i * h.width;
      table[ids[i]].assign(r, r + h.width);
    }
  } else {
    (h.section == ckpt::dense ? s.dense : s.dense_slots)[name] = values;
  }
}

}  // namespace

expected<void> apply(const std::string& dir, const checkpoint_info& info, shard_state& s) {
  const std::uint64_t version = info.version;
  const std::string path = path_of(dir, version);
  fd_closer f{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (f.fd < 0) {
    if (errno == ENOENT) return corrupt(path, version, "data file missing");
    return io_error(errno, path, "open");
  }
  const off_t size = ::lseek(f.fd, 0, SEEK_END);
  if (size < 0 || ::lseek(f.fd, 0, SEEK_SET) != 0) return io_error(errno, path, "seek");
  if (static_cast<std::uint64_t>(size) < header_size)
    return corrupt(path, version, "not a checkpoint data file");
  file_in in(f.fd);
  data_reader rd{in, path, version, static_cast<std::uint64_t>(size) - header_size};
  if (auto r = rd.header(); !r) return r;
  std::string name;
  std::vector<std::uint64_t> ids;
  std::vector<float> values;
  for (;;) {
    block_header h;
    if (rd.remaining < block_header_size || !in.read(&h, sizeof h)) return rd.bad("truncated");
    rd.remaining -= block_header_size;
    if (std::memcmp(&h, end_magic, 8) == 0) {
      if (auto r = rd.trailer(h); !r) return r;
      break;
    }
    if (auto r = rd.block(h, name, ids, values); !r) return r;
    store(h, name, ids, values, s);
  }
  if (rd.blocks != info.entries || rd.bytes != info.bytes)
    return rd.bad(std::to_string(rd.blocks) + " blocks of " + std::to_string(rd.bytes) +
                  " bytes, the header says " + std::to_string(info.entries) + " of " +
                  std::to_string(info.bytes));
  return {};
}

std::vector<file_entry> list(const std::string& dir) {
  std::vector<file_entry> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    const std::string n = e.path().filename().string();
    // v<20 digits>.ckpt or v<20 digits>.ckpt.tmp
    if (n.size() < 26 || n[0] != 'v' || n.compare(21, 5, ".ckpt") != 0) continue;
    const bool tmp = n.size() == 30 && n.compare(26, 4, ".tmp") == 0;
    if (n.size() != 26 && !tmp) continue;
    if (!std::all_of(n.begin() + 1, n.begin() + 21, [](char c) { return c >= '0' && c <= '9'; })) continue;
    out.push_back({std::strtoull(n.c_str() + 1, nullptr, 10), tmp, e.path().string()});
  }
  return out;
}

}  // namespace troupe::storage::ckpt_file
