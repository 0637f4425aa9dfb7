// The data of one checkpoint version in a file of its own beside the store's LMDB environment
// (docs/storage_format.md, "checkpoint data files"): written with large sequential writes straight
// from the caller's arrays, checksummed per block, fsynced and renamed into place; the version's
// header in LMDB is committed after the rename, so a file without a complete header is a leftover.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "troupe/storage/checkpoint_store.hpp"

namespace troupe::storage::ckpt_file {

// DIR/v<version, 20 digits>.ckpt
std::string path_of(const std::string& dir, std::uint64_t version);

// Writes `s` as the data of `version` to path_of(dir, version) (through a temporary, fsynced,
// renamed, the directory fsynced); sets info.entries (blocks) and info.bytes (floats * 4).
expected<void> write(const std::string& dir, std::uint64_t version, const flat_state& s,
                     checkpoint_info& info);

// Applies the data of `info.version` onto `s` (dense tensors replaced, rows upserted). Every block
// is checked (checksum, count against the header); corrupt_checkpoint names what failed.
expected<void> apply(const std::string& dir, const checkpoint_info& info, shard_state& s);

struct file_entry {
  std::uint64_t version = 0;
  bool temporary = false;  // a write that did not reach its rename
  std::string path;
};
// The data files and temporaries in `dir`.
std::vector<file_entry> list(const std::string& dir);

}  // namespace troupe::storage::ckpt_file
