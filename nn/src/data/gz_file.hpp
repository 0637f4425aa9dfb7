// RAII over a zlib gzFile (reads gzip and plain files alike).
#pragma once

#include <zlib.h>

#include <cstddef>
#include <cstring>
#include <string>
#include <vector>

namespace troupe::nn::detail {

class gz_file {
 public:
  explicit gz_file(const std::string& path) : f_(gzopen(path.c_str(), "rb")) {
    if (f_) gzbuffer(f_, 1 << 16);
  }
  gz_file(const gz_file&) = delete;
  gz_file& operator=(const gz_file&) = delete;
  ~gz_file() {
    if (f_) gzclose(f_);
  }
  bool is_open() const { return f_ != nullptr; }
  // Reads up to n bytes; returns how many were read (short at EOF), or -1 on a zlib error.
  long read(void* dst, std::size_t n) {
    std::size_t done = 0;
    auto* out = static_cast<char*>(dst);
    while (done < n) {
      unsigned chunk = static_cast<unsigned>(std::min<std::size_t>(n - done, 1u << 30));
      int got = gzread(f_, out + done, chunk);
      if (got < 0) return -1;
      if (got == 0) break;
      done += static_cast<std::size_t>(got);
    }
    return static_cast<long>(done);
  }
  // Reads one line into buf (without the newline, and a CR before it). False at EOF. A NUL byte is
  // kept as a byte of the line (gzgets' C strings cut the line there and joined what followed to the
  // next line).
  bool getline(std::string& buf) {
    buf.clear();
    for (;;) {
      if (pos_ == len_) {
        if (ended_) return !buf.empty();
        if (block_.empty()) block_.resize(1 << 16);
        int got = gzread(f_, block_.data(), static_cast<unsigned>(block_.size()));
        if (got <= 0) {
          ended_ = true;  // the end, or an error: end_problem() tells
          return !buf.empty();
        }
        pos_ = 0;
        len_ = static_cast<std::size_t>(got);
      }
      const char* start = block_.data() + pos_;
      const auto* nl = static_cast<const char*>(std::memchr(start, '\n', len_ - pos_));
      const std::size_t take = nl ? static_cast<std::size_t>(nl - start) : len_ - pos_;
      buf.append(start, take);
      pos_ += take;
      if (nl) {
        ++pos_;
        if (!buf.empty() && buf.back() == '\r') buf.pop_back();
        return true;
      }
    }
  }
  // After the reads stopped at the end: what went wrong, or "" when the file ended cleanly. zlib's
  // gzread/gzgets hand back what they decoded and then report the end; a gzip stream cut short (no
  // trailer, or cut mid-stream) or corrupt shows only here, in gzerror.
  std::string end_problem() {
    int code = Z_OK;
    const char* msg = f_ ? gzerror(f_, &code) : "not open";
    if (code == Z_OK) return {};
    if (code == Z_BUF_ERROR)
      return "truncated: the gzip stream ends early (no trailer); the file is incomplete";
    return msg ? msg : "zlib error " + std::to_string(code);
  }
  std::string error_text() {
    int code = 0;
    const char* msg = f_ ? gzerror(f_, &code) : "not open";
    return msg ? msg : "unknown zlib error";
  }

 private:
  gzFile f_;
  std::vector<char> block_;  // getline's (made by its first call): what gzread gave, from pos_ to len_
  std::size_t pos_ = 0, len_ = 0;
  bool ended_ = false;
};

}  // namespace troupe::nn::detail
