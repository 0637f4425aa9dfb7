#include "troupe/storage/errc.hpp"

#include <string>

namespace troupe::storage {
namespace {

class storage_category_impl final : public std::error_category {
 public:
  const char* name() const noexcept override { return "storage"; }
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
