#include "record_spill.hpp"

#include <spdlog/spdlog.h>
#include <xxhash.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

namespace troupe::actors {

namespace {
std::string key_of(std::uint64_t first, std::uint64_t count) {
  return storage::be64_key(first) + storage::be64_key(count);
}

// Why `dir` (the spill directory, or its entry for one store: made 0700 when missing) is no place
// for this user's cache: another user owns it or
// may write in it (a sticky directory, like /tmp, lets nobody replace another's entries). Records
// read back from it are trusted as the server's, so a cache another user could write let them feed
// this job labels of theirs (checksums are no proof of who wrote them). Empty: fine.
std::string not_private(const std::string& dir, bool entry) {
  std::error_code ec;
  if (!entry) std::filesystem::create_directories(dir, ec);
  if (ec) return ec.message();
  if (entry && ::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) return std::strerror(errno);
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0) return std::strerror(errno);
  if (!S_ISDIR(st.st_mode)) return "not a directory";
  const bool others_write = (st.st_mode & (S_IWGRP | S_IWOTH)) != 0;
  if (entry && (st.st_uid != ::geteuid() || (st.st_mode & 077) != 0)) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%03o", static_cast<unsigned>(st.st_mode & 0777));
    return "owned by uid " + std::to_string(st.st_uid) + ", mode " + mode +
           ": a cache must be this user's alone (0700)";
  }
  if (!entry && others_write && (st.st_mode & S_ISVTX) == 0)
    return "other users may write in it (mode without the sticky bit): a cache must be this user's alone";
  // Another user's directory (made first at this user's default path) lets its owner rename the
  // entries in it, sticky or not; root's sticky ones (/tmp) do not.
  if (!entry && st.st_uid != ::geteuid() && !(st.st_uid == 0 && (st.st_mode & S_ISVTX) != 0))
    return "owned by uid " + std::to_string(st.st_uid) + ": a cache must be in this user's directory";
  return {};
}
}  // namespace

record_spill::record_spill(const std::string& dir, const std::string& manifest_toml, std::size_t max_bytes) {
  if (max_bytes == 0) return;
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx",
                static_cast<unsigned long long>(XXH64(manifest_toml.data(), manifest_toml.size(), 0)));
  dir_ = (std::filesystem::path(dir) / hex).string();
  if (auto why = not_private(dir, false); !why.empty()) {
    off(dir + ": " + why);
    return;
  }
  if (auto why = not_private(dir_, true); !why.empty()) {
    off(why);
    return;
  }
  storage::env_options o;
  o.initial_map_size = std::min<std::size_t>(max_bytes, std::size_t{64} << 20);
  o.max_map_size = max_bytes;
  o.no_sync = true;  // a cache: a crash may lose the last writes, nothing else
  auto env = storage::lmdb_env::open(dir_, o);
  if (!env) {
    off(env.err().to_string());
    return;
  }
  auto db = (*env)->open_db("ranges", MDB_CREATE);
  if (!db) {
    off(db.err().to_string());
    return;
  }
  env_ = std::move(*env);
  db_ = *db;
}

void record_spill::off(const std::string& why) {
  spdlog::warn("served records: spill cache {} off: {} (records come from the server instead)", dir_, why);
  env_.reset();
}

std::optional<std::string> record_spill::get(std::uint64_t first, std::uint64_t count) const {
  if (!env_) return std::nullopt;
  auto txn = env_->begin_read();
  if (!txn) return std::nullopt;
  auto v = txn->get(db_, key_of(first, count));
  if (!v || !*v) return std::nullopt;
  return std::string(**v);
}

void record_spill::put(std::uint64_t first, std::uint64_t count, const std::string& bytes) {
  if (!env_ || full_) return;
  auto key = key_of(first, count);
  auto w = env_->write([&](storage::write_txn& t) { return t.put(db_, key, bytes); });
  if (w) return;
  if (w.err() == storage::storage_errc::map_full) {
    spdlog::warn("served records: spill cache {} is full ([data] spill_mb): no more tasks spilled", dir_);
    full_ = true;
    return;
  }
  off(w.err().to_string());
}

}  // namespace troupe::actors
