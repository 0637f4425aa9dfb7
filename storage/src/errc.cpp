#include "troupe/storage/errc.hpp"

#include "troupe/core/error.hpp"

#include <string>

namespace troupe::storage {
namespace {

class storage_category_impl final : public error_category {
 public:
  const char* name() const noexcept override { return "storage"; }
  // Their contexts are sentences naming what is missing: "jobs/r1/journal: no task journal", "no
  // model state in jobs/r1 (the job wrote no checkpoint yet)", "the state has no tensor 'w'".
  bool context_says_it(int c) const noexcept override {
    return c == static_cast<int>(storage_errc::not_found);
  }
  std::string message(int c) const override {
    switch (static_cast<storage_errc>(c)) {
      case storage_errc::ok:
        return "ok";
      case storage_errc::lmdb_error:
        return "LMDB error";
      case storage_errc::map_full:
        return "map full";
      case storage_errc::not_found:
        return "not found";
      case storage_errc::corrupt_record:
        return "corrupt record";
      case storage_errc::bad_manifest:
        return "bad manifest";
      case storage_errc::version_mismatch:
        return "format version mismatch";
      case storage_errc::already_exists:
        return "already exists";
      case storage_errc::stale_lease:
        return "stale lease";
      case storage_errc::invalid_argument:
        return "invalid argument";
      case storage_errc::corrupt_checkpoint:
        return "corrupt checkpoint";
      case storage_errc::io_error:
        return "I/O error";
      case storage_errc::writer_stopped:
        return "writer stopped";
      case storage_errc::disk_full:
        return "no space left on device";
      case storage_errc::disk_io:
        return "input/output error on device";
    }
    return "unknown storage error " + std::to_string(c);
  }
};

}  // namespace

const std::error_category& storage_category() noexcept {
  static const storage_category_impl instance;
  return instance;
}

}  // namespace troupe::storage
