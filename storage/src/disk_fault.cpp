#include "troupe/storage/disk_fault.hpp"

#include <sys/statvfs.h>

#include <cerrno>
#include <filesystem>

#include "troupe/storage/errc.hpp"

namespace troupe::storage {

bool filesystem_full(const std::string& path) {
  std::filesystem::path p(path);
  std::error_code ec;
  while (!p.empty() && !std::filesystem::exists(p, ec) && p.has_parent_path() && p.parent_path() != p)
    p = p.parent_path();
  struct statvfs st {};
  if (::statvfs(p.c_str(), &st) != 0) return true;
  return static_cast<unsigned long long>(st.f_bavail) * st.f_frsize < (1ull << 20);
}

std::optional<error> disk_fault(int err, const std::string& path, const std::string& doing) {
  std::string where = path + " (" + doing + ")";
  if (err == ENOSPC || err == EDQUOT || (err == EIO && filesystem_full(path)))
    return error(std::error_code(storage_errc::disk_full), where);
  if (err == EIO) return error(std::error_code(storage_errc::disk_io), where);
  return std::nullopt;
}

bool is_disk_fault(const error& e) {
  return e == storage_errc::disk_full || e == storage_errc::disk_io;
}

}  // namespace troupe::storage
