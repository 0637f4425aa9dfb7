#include "record_spill.hpp"

#include "troupe/cluster/own_path.hpp"

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

// Why `dir` (the spill directory) or `entry` (its entry for one store, made 0700 when missing) is no
// place for this user's cache (cluster/own_path.hpp): records read back from it are trusted as the
// server's, so a cache another user could write let them feed this job labels of theirs (checksums
// are no proof of who wrote them). Empty: fine.
std::string not_private(const std::string& dir, const std::string& entry) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return dir + ": " + ec.message();
  if (auto why = cluster::shared_parent_problem(dir); !why.empty()) return dir + ": " + why;
  if (::mkdir(entry.c_str(), 0700) != 0 && errno != EEXIST) return entry + ": " + std::strerror(errno);
  if (auto why = cluster::not_own_directory(entry); !why.empty())
    return entry + ": " + why + ": a cache must be this user's alone";
  return {};
}
}  // namespace

record_spill::record_spill(const std::string& dir, const std::string& manifest_toml, std::size_t max_bytes) {
  if (max_bytes == 0) return;
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx",
                static_cast<unsigned long long>(XXH64(manifest_toml.data(), manifest_toml.size(), 0)));
  dir_ = (std::filesystem::path(dir) / hex).string();
  if (auto why = not_private(dir, dir_); !why.empty()) {
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
