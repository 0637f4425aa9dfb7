// Disk faults as errors that say what they are. A full filesystem shows up as ENOSPC or EDQUOT,
// but also as EIO or a short write (LMDB reports a short page write as EIO), so an I/O error on
// a filesystem with (almost) no space left is read as "no space left on device" too. Callers
// that can wait (the task journal's writer, checkpoints) pause on these and retry; others fail
// with the error, which names the path.
#pragma once

#include <optional>
#include <string>

#include "troupe/core/error.hpp"

namespace troupe::storage {

// True when the filesystem holding `path` (or its nearest existing parent) has less than 1 MiB
// available, or cannot be asked.
bool filesystem_full(const std::string& path);

// The error for errno `err` while `doing` something to `path`: disk_full ("no space left on
// device: <path> (<doing>)"), disk_io, or nullopt when `err` is not a disk fault.
std::optional<error> disk_fault(int err, const std::string& path, const std::string& doing);

// Whether `e` is disk_full or disk_io (possibly wrapped: the code is kept).
bool is_disk_fault(const error& e);

}  // namespace troupe::storage
