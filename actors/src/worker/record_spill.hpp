// The second tier of a worker's served-records cache (record_fetch.hpp): tasks pushed out of the
// memory cache are written to a local LMDB file, shared by the job's workers on this host (and by
// later jobs over the same data: the directory is named after the store's manifest), up to a size
// bound. The file is only ever a cache: a directory that cannot be opened (read-only, missing
// permission), a full disk or a full map turns spilling off with one warning naming the directory
// and the reason, and the worker fetches from the server as without it.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "troupe/storage/lmdb.hpp"

namespace troupe::actors {

class record_spill {
 public:
  // `dir`/<hash of the manifest's text>, at most `max_bytes` (its map size); max_bytes 0: off.
  record_spill(const std::string& dir, const std::string& manifest_toml, std::size_t max_bytes);
  bool on() const { return env_ != nullptr; }
  const std::string& dir() const { return dir_; }
  // The encoded records of [first, first + count) when spilled.
  std::optional<std::string> get(std::uint64_t first, std::uint64_t count) const;
  // Writes them (blocking). A full map stops the writes (what is there is still read); any other
  // failure turns spilling off.
  void put(std::uint64_t first, std::uint64_t count, const std::string& bytes);

 private:
  void off(const std::string& why);
  std::string dir_;
  bool full_ = false;
  std::shared_ptr<storage::lmdb_env> env_;
  storage::dbi db_ = 0;
};

}  // namespace troupe::actors
