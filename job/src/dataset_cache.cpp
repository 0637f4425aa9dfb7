#include "troupe/job/dataset_cache.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "troupe/cluster/own_path.hpp"
#include "troupe/storage/record_store.hpp"

namespace troupe::job {

namespace fs = std::filesystem;

namespace {

constexpr const char* pin_file = "in_use";

unexpected io_error(const std::string& path, const std::string& what, int e) {
  return make_unexpected(core_errc::io_error, path + ": " + what + ": " + std::strerror(e));
}

std::int64_t unix_ms(const struct timespec& t) {
  return static_cast<std::int64_t>(t.tv_sec) * 1000 + t.tv_nsec / 1'000'000;
}

// The entry's size, the source of its train store, and its last use: its pin file's time, else (no
// job pinned it: an entry of an earlier troupe) its newest data file's.
void measure(cache_entry& e) {
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(e.dir, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    struct stat st {};
    if (::lstat(it->path().c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    e.bytes += static_cast<std::uint64_t>(st.st_size);
    // Lock files change when anyone opens the entry (this listing too): not a use.
    const auto name = it->path().filename().string();
    if (name != pin_file && name != "lock" && name != "lock.mdb")
      e.last_used_ms = std::max(e.last_used_ms, unix_ms(st.st_mtim));
  }
  struct stat st {};
  if (::lstat((e.dir + "/" + pin_file).c_str(), &st) == 0) e.last_used_ms = unix_ms(st.st_mtim);
  if (!e.ours) return;  // another user's store is not opened (its files could be links anywhere)
  auto store = storage::record_store::open_read_only(e.dir + "/train");
  if (store) e.source = store->info().source;
}

// An exclusive, non-blocking lock on the entry's pin file and its preparation lock: no job uses it
// and none prepares it while the descriptors are held. Listing opens only the files that exist
// (no side effect); pruning makes a missing pin file, so that a job starting meanwhile waits on it,
// dated the entry's last use (else the listing would read it as used now).
struct exclusive {
  int pin = -1, prep = -1;
  ~exclusive() {
    for (int fd : {pin, prep})
      if (fd >= 0) ::close(fd);
  }
  // False: a job pins the entry or prepares it (or its pin file cannot be made).
  bool take(const cache_entry& e, bool create) {
    const std::string pin_path = e.dir + "/" + pin_file;
    pin = ::open(pin_path.c_str(), O_RDWR | O_NOFOLLOW | O_CLOEXEC);
    if (pin < 0 && errno == ENOENT && create) {
      pin = ::open(pin_path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
      const struct timespec t { e.last_used_ms / 1000, (e.last_used_ms % 1000) * 1'000'000 };
      const struct timespec times[2] = {t, t};
      if (pin >= 0) ::futimens(pin, times);
    }
    if (pin < 0 && (create || errno != ENOENT)) return false;
    if (pin >= 0 && ::flock(pin, LOCK_EX | LOCK_NB) != 0) return false;
    prep = ::open((e.dir + "/lock").c_str(), O_RDWR | O_NOFOLLOW | O_CLOEXEC);
    return prep < 0 ? errno == ENOENT : ::flock(prep, LOCK_EX | LOCK_NB) == 0;
  }
};

// cache_entry::made_by_a_job: named as a job names entries, holding what a job puts there first
// (the pin, the preparation lock) or, an earlier troupe's, a train store.
bool made_by_a_job(const fs::path& d) {
  if (!is_cache_entry_name(d.filename().string())) return false;
  std::error_code ec;
  return fs::is_regular_file(d / pin_file, ec) || fs::is_regular_file(d / "lock", ec) ||
         fs::is_regular_file(d / "train" / "data.mdb", ec);
}

}  // namespace

std::string cache_entry_name(std::string_view source, std::uint64_t hash) {
  std::string name(source);
  for (auto& ch : name)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '-';
  char hex[18];
  std::snprintf(hex, sizeof hex, "-%016llx", static_cast<unsigned long long>(hash));
  return name + hex;
}

bool is_cache_entry_name(std::string_view name) {
  const auto dash = name.rfind('-');
  return dash != std::string_view::npos && dash > 0 && name.size() - dash - 1 == 16 &&
         name.find_first_not_of("0123456789abcdef", dash + 1) == std::string_view::npos &&
         std::all_of(name.begin(), name.end(),
                     [](char ch) { return std::isalnum(static_cast<unsigned char>(ch)) || ch == '-'; });
}

std::string default_dataset_cache(const std::string& root) {
  return cluster::own_subdir(root, "datasets");
}

std::string entry_problem(const std::string& entry_dir) {
  const auto parent = fs::path(entry_dir).parent_path().string();
  if (auto why = cluster::shared_parent_problem(parent); !why.empty())
    return "its cache directory " + parent + " is no place for this user's cache: " + why +
           " (set [job] dataset_cache to a directory of yours)";
  if (auto why = cluster::not_own_directory(entry_dir); !why.empty())
    return why +
           ": a job reads only cache entries that are its own user's alone (set [job] dataset_cache "
           "to a directory of yours)";
  return {};
}

expected<std::shared_ptr<cache_pin>> cache_pin::take(const std::string& entry_dir) {
  std::error_code ec;
  const std::string path = entry_dir + "/" + pin_file;
  // The entry may be removed between the open and the lock (a prune holding it): then the lock is on
  // a file no longer there, and the pin is taken again on the new one.
  for (int attempt = 0; attempt < 100; ++attempt) {
    fs::create_directories(fs::path(entry_dir).parent_path(), ec);
    if (ec) return make_unexpected(core_errc::io_error, entry_dir + ": " + ec.message());
    // Checked before the entry is made (nothing made in another user's cache) and after (made by
    // another user meanwhile).
    for (int made = 0; made < 2; ++made) {
      if (auto why = entry_problem(entry_dir); !why.empty())
        return make_unexpected(core_errc::invalid_argument, entry_dir + ": " + why);
      if (made == 0 && ::mkdir(entry_dir.c_str(), 0700) != 0 && errno != EEXIST)
        return make_unexpected(core_errc::io_error, entry_dir + ": " + std::strerror(errno));
    }
    // Owner-only: another user able to open it could hold its lock (a job hung, a prune refused).
    int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) return io_error(path, "cannot open", errno);
    if (::flock(fd, LOCK_SH) != 0) {
      int e = errno;
      ::close(fd);
      return io_error(path, "cannot lock", e);
    }
    struct stat held {
    }, now{};
    if (::fstat(fd, &held) == 0 && ::stat(path.c_str(), &now) == 0 && held.st_ino == now.st_ino &&
        held.st_dev == now.st_dev) {
      ::futimens(fd, nullptr);  // the last use: now (an entry of another user's keeps its time)
      return std::shared_ptr<cache_pin>(new cache_pin(fd));
    }
    ::close(fd);
  }
  return make_unexpected(core_errc::io_error, path + ": removed again and again while a job pinned it");
}

cache_pin::~cache_pin() {
  if (fd_ >= 0) ::close(fd_);
}

expected<std::vector<cache_entry>> list_cache(const std::string& cache) {
  std::vector<cache_entry> out;
  std::error_code ec;
  if (!fs::exists(cache, ec)) return out;
  for (const auto& d : fs::directory_iterator(cache, ec)) {
    if (!d.is_directory(ec) || d.is_symlink(ec)) continue;
    cache_entry e;
    e.key = d.path().filename().string();
    e.dir = d.path().string();
    e.made_by_a_job = made_by_a_job(d.path());
    e.ours = entry_problem(e.dir).empty();
    if (!e.made_by_a_job) {
      out.push_back(std::move(e));
      continue;
    }
    measure(e);
    exclusive x;
    e.in_use = e.ours && !x.take(e, false);
    out.push_back(std::move(e));
  }
  if (ec) return make_unexpected(core_errc::io_error, cache + ": " + ec.message());
  std::sort(out.begin(), out.end(),
            [](const auto& a, const auto& b) { return a.last_used_ms > b.last_used_ms; });
  return out;
}

expected<std::vector<cache_entry>> prune_cache(const std::string& cache, std::int64_t used_before_ms,
                                               bool dry_run, std::vector<cache_entry>* kept_in_use,
                                               std::vector<cache_entry>* theirs) {
  auto entries = list_cache(cache);
  if (!entries) return entries.err();
  std::vector<cache_entry> removed;
  for (auto& e : *entries) {
    if (!e.ours || !e.made_by_a_job) {  // another user's: theirs to prune; no job's: not the cache's
      if (theirs) theirs->push_back(e);
      continue;
    }
    if (e.last_used_ms >= used_before_ms) continue;
    exclusive x;  // held while the entry goes: a job starting on it waits, then prepares it anew
    if (!x.take(e, !dry_run)) {
      if (kept_in_use) kept_in_use->push_back(e);
      continue;
    }
    std::error_code ec;
    if (!dry_run) fs::remove_all(e.dir, ec);
    if (ec) return make_unexpected(core_errc::io_error, e.dir + ": " + ec.message());
    removed.push_back(std::move(e));
  }
  return removed;
}

}  // namespace troupe::job
