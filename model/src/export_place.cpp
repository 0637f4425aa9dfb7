#include "export_place.hpp"

#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <random>

namespace troupe::model {

namespace fs = std::filesystem;

export_place::export_place(std::string dir) : dir_(fs::path(std::move(dir)).lexically_normal().string()) {
  while (dir_.size() > 1 && dir_.back() == '/') dir_.pop_back();
  std::random_device rd;
  char suffix[16];
  std::snprintf(suffix, sizeof suffix, "%08x", rd());
  tmp_ = dir_ + ".tmp-" + suffix;
}

export_place::~export_place() {
  if (committed_) return;
  std::error_code ec;
  fs::remove_all(tmp_, ec);
}

expected<void> export_place::begin() {
  std::error_code ec;
  fs::create_directories(fs::path(dir_).parent_path(), ec);
  if (ec || !fs::create_directory(tmp_, ec))
    return make_unexpected(core_errc::io_error, tmp_ + ": cannot make the directory: " +
                                                    (ec ? ec.message() : std::string("it exists")));
  return {};
}

expected<void> export_place::commit() {
  // The files' data first: the rename must not publish a directory whose files a crash could empty.
  for (const auto& e : fs::directory_iterator(tmp_)) {
    int fd = ::open(e.path().c_str(), O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
      ::fsync(fd);
      ::close(fd);
    }
  }
  std::error_code ec;
  const bool exists = fs::exists(dir_, ec);
  const unsigned flags = exists ? RENAME_EXCHANGE : RENAME_NOREPLACE;
  if (::renameat2(AT_FDCWD, tmp_.c_str(), AT_FDCWD, dir_.c_str(), flags) != 0)
    return make_unexpected(core_errc::io_error,
                           "moving " + tmp_ + " to " + dir_ + ": " + std::strerror(errno));
  committed_ = true;
  if (exists) fs::remove_all(tmp_, ec);  // the old model, swapped out
  int parent = ::open(fs::path(dir_).parent_path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (parent >= 0) {
    ::fsync(parent);
    ::close(parent);
  }
  return {};
}

}  // namespace troupe::model
