// Errors of the supervision module. The same codes travel two ways:
// - as `troupe::error` (std::error_code, category "supervision") from the non-actor API
//   (configuration, the name registry, node_root);
// - as `caf::error` (category atom "supervise", see caf_errors.hpp) in exit reasons and
//   responses, so a parent supervisor or a requester sees why a supervisor gave up.
#pragma once

#include <system_error>

#include "troupe/core/error.hpp"

namespace troupe {

enum class supervision_errc {
  ok = 0,
  intensity_exceeded = 1,  // more than max_restarts restarts within the window: gave up
  start_failed = 2,        // a child factory threw or returned no actor
  duplicate_name = 3,      // a child (or a registered actor) already has that name
  unknown_child = 4,       // no child of that name
  invalid_spec = 5,        // a child spec or supervisor config that makes no sense
  shutting_down = 6,       // the supervisor is stopping and takes no new children
  child_failed = 7,        // an actor exited abnormally (wraps a foreign CAF error)
};

const std::error_category& supervision_category() noexcept;
inline std::error_code make_error_code(supervision_errc e) noexcept {
  return {static_cast<int>(e), supervision_category()};
}

}  // namespace troupe

template <>
struct std::is_error_code_enum<troupe::supervision_errc> : std::true_type {};
