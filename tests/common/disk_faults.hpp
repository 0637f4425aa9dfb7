// Disk faults for tests: a small tmpfs of a test's own (mounting needs root; `mounted` says whether
// it worked, so a test can skip), filled and freed on demand; and garbage over the middle pages
// of an LMDB file. Header-only; every test target has tests/common on its include path.
#pragma once

#include <sys/mount.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

namespace troupe::test_util {

struct small_tmpfs {
  std::string dir;
  bool mounted = false;
  // Mounts a tmpfs of `size` ("64m") on the existing directory `at`.
  small_tmpfs(std::string at, const std::string& size) : dir(std::move(at)) {
    mounted = ::mount("tmpfs", dir.c_str(), "tmpfs", 0, ("size=" + size).c_str()) == 0;
  }
  ~small_tmpfs() {
    if (mounted) ::umount2(dir.c_str(), MNT_DETACH);
  }
  small_tmpfs(const small_tmpfs&) = delete;
  small_tmpfs& operator=(const small_tmpfs&) = delete;
  // Writes zeros into <dir>/filler until the filesystem is full.
  void fill() const {
    std::ofstream f(dir + "/filler", std::ios::binary);
    std::string mb(1 << 20, '\0');
    for (int i = 0; i < 4096 && f.write(mb.data(), static_cast<std::streamsize>(mb.size())); ++i) {
    }
  }
  void free_space() const { std::filesystem::remove(dir + "/filler"); }
};

// Overwrites the 4 KiB pages between 30% and 70% of <store>/data.mdb (never the two meta pages).
inline void corrupt_middle_pages(const std::string& store) {
  auto file = store + "/data.mdb";
  auto size = std::filesystem::file_size(file);
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  std::string junk(4096, '\xa5');
  for (auto at = std::max<std::uintmax_t>(2 * 4096, size * 3 / 10 / 4096 * 4096); at < size * 7 / 10;
       at += 4096) {
    f.seekp(static_cast<std::streamoff>(at));
    f.write(junk.data(), static_cast<std::streamsize>(junk.size()));
  }
}

}  // namespace troupe::test_util
