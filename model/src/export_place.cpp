#include "export_place.hpp"

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <string_view>

namespace troupe::model {

namespace fs = std::filesystem;

namespace {

std::string host_name() {
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0) return "host";
  std::string h(host);
  for (auto& ch : h)
    if (ch == '/' || ch == '-') ch = '_';
  return h;
}

// "<dir>.tmp-<host>-<pid>-<random>": whose it was, for the sweep of those a killed export left.
std::string tmp_prefix(const std::string& dir) {
  return dir + ".tmp-";
}

// The temporary directories of exports to `dir` that were killed (their runner SIGKILLed as it wrote
// the model: each --resume left one more): on this host, of a process gone; of another host's, or
// named as before 2026-12-03 (".tmp-<random>"), unchanged for an hour.
void sweep_killed_exports(const std::string& dir) {
  const auto prefix = fs::path(tmp_prefix(dir)).filename().string();
  const std::string here = host_name() + "-";
  std::error_code ec;
  for (const auto& e :
       fs::directory_iterator(fs::path(dir).parent_path().empty() ? "." : fs::path(dir).parent_path(), ec)) {
    const auto name = e.path().filename().string();
    if (name.rfind(prefix, 0) != 0 || !e.is_directory(ec)) continue;
    const auto rest = name.substr(prefix.size());
    // Only the shapes an export names them by: "<8 hex>" (before), "<host>-<pid>-<8 hex>".
    auto hex8 = [](std::string_view t) {
      return t.size() == 8 && t.find_first_not_of("0123456789abcdef") == std::string_view::npos;
    };
    const auto dash = rest.rfind('-');
    const bool old_shape = hex8(rest);
    if (!old_shape && (dash == std::string::npos || !hex8(std::string_view(rest).substr(dash + 1)))) continue;
    bool gone = false;
    if (!old_shape && rest.rfind(here, 0) == 0) {
      const long pid = std::strtol(rest.c_str() + here.size(), nullptr, 10);
      gone = pid > 0 && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH;
    } else {
      const auto age = fs::file_time_type::clock::now() - fs::last_write_time(e.path(), ec);
      gone = !ec && age > std::chrono::hours(1);
    }
    if (gone) fs::remove_all(e.path(), ec);
  }
}

}  // namespace

export_place::export_place(std::string dir) : dir_(fs::path(std::move(dir)).lexically_normal().string()) {
  while (dir_.size() > 1 && dir_.back() == '/') dir_.pop_back();
  std::random_device rd;
  char suffix[16];
  std::snprintf(suffix, sizeof suffix, "%08x", rd());
  tmp_ = tmp_prefix(dir_) + host_name() + "-" + std::to_string(::getpid()) + "-" + suffix;
}

export_place::~export_place() {
  if (committed_) return;
  std::error_code ec;
  fs::remove_all(tmp_, ec);
}

namespace {

// What an export may replace: nothing, an empty directory, or a model directory holding only what
// an export writes. Anything else (a user's directory given as --out by mistake) is refused.
expected<void> replaceable(const std::string& dir) {
  std::error_code ec;
  const auto st = fs::symlink_status(dir, ec);
  if (ec || st.type() == fs::file_type::not_found) return {};
  auto refuse = [&](const std::string& why) {
    return make_unexpected(core_errc::invalid_argument,
                           dir + ": " + why + "; an export replaces only a model directory: give a new path");
  };
  if (st.type() != fs::file_type::directory) return refuse("exists and is not a directory");
  bool model_json = false;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const auto name = e.path().filename().string();
    if (name != "model.json" && name != "model.pt" && name != "state")
      return refuse("exists and holds '" + name + "', which no model directory has");
    model_json |= name == "model.json";
  }
  if (ec) return refuse("cannot be read (" + ec.message() + ")");
  if (!model_json && !fs::is_empty(dir, ec)) return refuse("exists and has no model.json");
  return {};
}

std::string parent_of(const std::string& dir) {
  auto p = fs::path(dir).parent_path().string();
  return p.empty() ? "." : p;
}

}  // namespace

expected<void> export_place::begin() {
  if (auto r = replaceable(dir_); !r) return r;
  sweep_killed_exports(dir_);
  std::error_code ec;
  fs::create_directories(parent_of(dir_), ec);
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
  int parent = ::open(parent_of(dir_).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (parent >= 0) {
    ::fsync(parent);
    ::close(parent);
  }
  return {};
}

}  // namespace troupe::model
