// Little-endian field packing for the journal and checkpoint values. The reader never reads past
// its buffer: a short or garbled value makes ok() false instead of crashing.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace troupe::storage {

class byte_writer {
 public:
  template <class T>
  byte_writer& pod(T v) {
    out_.append(reinterpret_cast<const char*>(&v), sizeof(T));
    return *this;
  }
  byte_writer& str(std::string_view s) {
    pod(static_cast<std::uint32_t>(s.size()));
    out_.append(s);
    return *this;
  }
  std::string& bytes() { return out_; }

 private:
  std::string out_;
};

class byte_reader {
 public:
  explicit byte_reader(std::string_view in) : in_(in) {}
  template <class T>
  T pod() {
    T v{};
    if (in_.size() < sizeof(T)) {
      ok_ = false;
      return v;
    }
    std::memcpy(&v, in_.data(), sizeof(T));
    in_.remove_prefix(sizeof(T));
    return v;
  }
  std::string str() {
    auto n = pod<std::uint32_t>();
    if (!ok_ || in_.size() < n) {
      ok_ = false;
      return {};
    }
    std::string s(in_.substr(0, n));
    in_.remove_prefix(n);
    return s;
  }
  std::string_view rest() const { return in_; }
  bool ok() const { return ok_; }
  bool done() const { return ok_ && in_.empty(); }

 private:
  std::string_view in_;
  bool ok_ = true;
};

}  // namespace troupe::storage
