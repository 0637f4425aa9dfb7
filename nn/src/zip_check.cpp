#include "troupe/nn/zip_check.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <limits>

namespace troupe::nn {

namespace {

// The file mapped read-only (nothing mapped for an empty file).
struct mapped {
  const unsigned char* data = nullptr;
  std::size_t size = 0;
  ~mapped() {
    if (data) ::munmap(const_cast<unsigned char*>(data), size);
  }
};

std::uint64_t le(const unsigned char* p, int bytes) {
  std::uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

class archive {
 public:
  archive(std::string path, const mapped& m) : path_(std::move(path)), d_(m.data), n_(m.size) {}

  expected<void> check() {
    std::uint64_t entries = 0, cd_offset = 0, cd_size = 0;
    if (auto e = read_end(entries, cd_offset, cd_size); !e) return e;
    std::uint64_t at = cd_offset;
    for (std::uint64_t i = 0; i < entries; ++i)
      if (auto e = check_entry(at, cd_offset + cd_size); !e) return e;
    return {};
  }

 private:
  unexpected bad(const std::string& why) const {
    return make_unexpected(core_errc::invalid_argument, path_ + ": " + why);
  }
  bool has(std::uint64_t at, std::uint64_t len) const { return at <= n_ && len <= n_ - at; }

  // The end of central directory record (the last one, searched back over its comment), and the
  // ZIP64 record where its counts do not fit.
  expected<void> read_end(std::uint64_t& entries, std::uint64_t& offset, std::uint64_t& size) const {
    if (n_ < 22) return bad("not a TorchScript archive (a ZIP archive: too short for one)");
    std::uint64_t eocd = n_ - 22;
    const std::uint64_t lowest = n_ > 22 + 65535 ? n_ - 22 - 65535 : 0;
    while (le(d_ + eocd, 4) != 0x06054b50) {
      if (eocd == lowest)
        return bad("not a TorchScript archive (a ZIP archive: no end of central directory; cut short?)");
      --eocd;
    }
    entries = le(d_ + eocd + 10, 2);
    size = le(d_ + eocd + 12, 4);
    offset = le(d_ + eocd + 16, 4);
    if (eocd >= 20 && le(d_ + eocd - 20, 4) == 0x07064b50) {
      const std::uint64_t z = le(d_ + eocd - 20 + 8, 8);
      if (!has(z, 56) || le(d_ + z, 4) != 0x06064b50)
        return bad("ZIP64 end of central directory out of the file");
      entries = le(d_ + z + 32, 8);
      size = le(d_ + z + 40, 8);
      offset = le(d_ + z + 48, 8);
    }
    if (!has(offset, size)) return bad("central directory out of the file (cut short?)");
    return {};
  }

  // One central directory entry at `at` (moved past it): its data found through its local header
  // and checked.
  expected<void> check_entry(std::uint64_t& at, std::uint64_t end) {
    if (at + 46 > end || le(d_ + at, 4) != 0x02014b50) return bad("central directory entry damaged");
    const auto method = le(d_ + at + 10, 2);
    const auto crc = static_cast<std::uint32_t>(le(d_ + at + 16, 4));
    std::uint64_t csize = le(d_ + at + 20, 4), usize = le(d_ + at + 24, 4), local = le(d_ + at + 42, 4);
    const auto name_len = le(d_ + at + 28, 2), extra_len = le(d_ + at + 30, 2),
               comment_len = le(d_ + at + 32, 2);
    if (at + 46 + name_len + extra_len + comment_len > end) return bad("central directory entry damaged");
    const std::string name(reinterpret_cast<const char*>(d_ + at + 46), name_len);
    read_zip64(d_ + at + 46 + name_len, extra_len, usize, csize, local);
    at += 46 + name_len + extra_len + comment_len;
    if (!has(local, 30) || le(d_ + local, 4) != 0x04034b50)
      return bad("entry '" + name + "': local header damaged or out of the file");
    const std::uint64_t data = local + 30 + le(d_ + local + 26, 2) + le(d_ + local + 28, 2);
    if (!has(data, csize)) return bad("entry '" + name + "': data out of the file (cut short?)");
    std::uint64_t got_size = 0;
    std::uint32_t got_crc = 0;
    if (method == 0) {
      got_size = csize;
      got_crc = crc_of(d_ + data, csize);
    } else if (method == 8) {
      if (auto i = inflated(d_ + data, csize, got_size, got_crc); !i)
        return bad("entry '" + name + "': " + i.err().context());
    } else {
      return bad("entry '" + name + "': compression method " + std::to_string(method) +
                 " (only stored or deflate)");
    }
    if (got_size != usize || got_crc != crc)
      return bad("entry '" + name +
                 "' is damaged (its CRC-32 or size does not match the archive's directory)");
    return {};
  }

  // The ZIP64 extra field's sizes and offset, each there only where the 32-bit field is all ones.
  static void read_zip64(const unsigned char* x, std::uint64_t len, std::uint64_t& usize,
                         std::uint64_t& csize, std::uint64_t& local) {
    for (std::uint64_t i = 0; i + 4 <= len;) {
      const auto id = le(x + i, 2), sz = le(x + i + 2, 2);
      if (i + 4 + sz > len) return;
      if (id == 0x0001) {
        std::uint64_t p = i + 4;
        for (auto* v : {&usize, &csize, &local})
          if (*v == 0xffffffffu && p + 8 <= i + 4 + sz) {
            *v = le(x + p, 8);
            p += 8;
          }
        return;
      }
      i += 4 + sz;
    }
  }

  static std::uint32_t crc_of(const unsigned char* p, std::uint64_t n) {
    uLong c = crc32(0L, Z_NULL, 0);
    while (n > 0) {
      const auto chunk = static_cast<uInt>(std::min<std::uint64_t>(n, 1u << 30));
      c = crc32(c, p, chunk);
      p += chunk;
      n -= chunk;
    }
    return static_cast<std::uint32_t>(c);
  }

  static expected<void> inflated(const unsigned char* p, std::uint64_t n, std::uint64_t& size,
                                 std::uint32_t& crc) {
    z_stream z{};
    if (inflateInit2(&z, -MAX_WBITS) != Z_OK) return make_unexpected(core_errc::io_error, "inflate");
    unsigned char out[1 << 16];
    uLong c = crc32(0L, Z_NULL, 0);
    int r = Z_OK;
    z.next_in = const_cast<unsigned char*>(p);
    z.avail_in = static_cast<uInt>(std::min<std::uint64_t>(n, std::numeric_limits<uInt>::max()));
    while (r == Z_OK) {
      z.next_out = out;
      z.avail_out = sizeof out;
      r = inflate(&z, Z_NO_FLUSH);
      const auto made = sizeof out - z.avail_out;
      c = crc32(c, out, static_cast<uInt>(made));
      size += made;
      if (r == Z_BUF_ERROR && z.avail_in == 0) break;
    }
    inflateEnd(&z);
    crc = static_cast<std::uint32_t>(c);
    if (r != Z_STREAM_END) return make_unexpected(core_errc::invalid_argument, "deflated data damaged");
    return {};
  }

  std::string path_;
  const unsigned char* d_;
  std::uint64_t n_;
};

}  // namespace

expected<void> check_zip_archive(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return make_unexpected(core_errc::io_error, path + ": " + std::strerror(errno));
  struct stat st {};
  mapped m;
  if (::fstat(fd, &st) == 0 && st.st_size > 0) {
    void* p = ::mmap(nullptr, static_cast<std::size_t>(st.st_size), PROT_READ, MAP_PRIVATE, fd, 0);
    if (p != MAP_FAILED) {
      m.data = static_cast<const unsigned char*>(p);
      m.size = static_cast<std::size_t>(st.st_size);
    }
  }
  const int err = errno;
  ::close(fd);
  if (!m.data && st.st_size > 0)
    return make_unexpected(core_errc::io_error, path + ": " + std::strerror(err));
  return archive(path, m).check();
}

}  // namespace troupe::nn
