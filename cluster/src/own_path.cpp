#include "troupe/cluster/own_path.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace troupe::cluster {

namespace {
bool others_may_write(const struct stat& st) {
  return (st.st_mode & S_IWOTH) != 0 || ((st.st_mode & S_IWGRP) != 0 && st.st_gid != ::getegid());
}

std::string mode_text(const struct stat& st) {
  char mode[8];
  std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
  return mode;
}
}  // namespace

std::string not_own(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return errno == ENOENT ? "" : std::strerror(errno);
  if (S_ISLNK(st.st_mode)) return "a link stands there, not a file of this user's";
  if (st.st_uid != ::geteuid()) return "another user's (uid " + std::to_string(st.st_uid) + ")";
  if (others_may_write(st)) return "other users may write in it (mode " + mode_text(st) + ")";
  return {};
}

std::string not_own_directory(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0 && !S_ISDIR(st.st_mode) && !S_ISLNK(st.st_mode))
    return "not a directory";
  return not_own(path);
}

std::string shared_parent_problem(const std::string& dir) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) return errno == ENOENT ? "" : std::strerror(errno);
  if (!S_ISDIR(st.st_mode)) return "not a directory";
  if (others_may_write(st) && (st.st_mode & S_ISVTX) == 0)
    return "other users may write in it without the sticky bit (mode " + mode_text(st) +
           "): they could replace what troupe keeps there";
  if (st.st_uid != ::geteuid() && st.st_uid != 0)
    return "another user's (uid " + std::to_string(st.st_uid) +
           "): its owner could replace what troupe keeps there";
  return {};
}

std::string own_subdir(const std::string& root, const std::string& name) {
  std::string dir = root + "/" + name;
  if (!not_own(dir).empty()) dir.append("-").append(std::to_string(::geteuid()));
  return dir;
}

bool is_own_subdir_name(std::string_view file, std::string_view name) {
  if (file.substr(0, name.size()) != name) return false;
  if (file.size() == name.size()) return true;
  const auto uid = file.substr(name.size());
  return uid.size() > 1 && uid[0] == '-' && uid.find_first_not_of("0123456789", 1) == std::string_view::npos;
}

}  // namespace troupe::cluster
