// Errors of the storage module. Every storage error's context names the directory and, where
// there is one, the record index, task id or checkpoint version.
#pragma once

#include <system_error>

namespace troupe::storage {

enum class storage_errc {
  ok = 0,
  lmdb_error = 1,           // LMDB returned an unexpected error code (message in the context)
  map_full = 2,             // the map could not be grown (max size reached, or readers pinned it)
  not_found = 3,            // a store, key, record, task or checkpoint does not exist
  corrupt_record = 4,       // a record's bytes fail its checksum or have the wrong length
  bad_manifest = 5,         // a dataset manifest is missing, malformed or disagrees with the data
  version_mismatch = 6,     // an on-disk format version this build does not read
  already_exists = 7,       // creating something that is already there
  stale_lease = 8,          // a task transition by a holder that no longer holds the lease
  invalid_argument = 9,     // a call that makes no sense (zero records per task, wrong schema...)
  corrupt_checkpoint = 10,  // checkpoint data fails its checksum, or its chain is broken
  io_error = 11,            // a plain file (import input, sidecar) could not be read or written
  writer_stopped = 12,      // a write was submitted after the environment's writer shut down
  disk_full = 13,           // no space left on the device (ENOSPC, EDQUOT, or EIO on a full filesystem)
  disk_io = 14,             // the device failed a read or write (EIO) with space left
};

const std::error_category& storage_category() noexcept;
inline std::error_code make_error_code(storage_errc e) noexcept {
  return {static_cast<int>(e), storage_category()};
}

}  // namespace troupe::storage

template <>
struct std::is_error_code_enum<troupe::storage::storage_errc> : std::true_type {};
