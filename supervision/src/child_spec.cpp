#include "troupe/supervision/child_spec.hpp"

#include "troupe/core/ids.hpp"
#include "troupe/supervision/errc.hpp"

namespace troupe::supervision {

std::string_view to_string(restart_type t) noexcept {
  switch (t) {
    case restart_type::permanent:
      return "permanent";
    case restart_type::transient:
      return "transient";
    case restart_type::temporary:
      return "temporary";
  }
  return "?";
}

expected<void> validate(const child_spec& spec) {
  if (!valid_actor_name(spec.name))
    return make_unexpected(
        supervision_errc::invalid_spec,
        "child name '" + spec.name + "': expected 1-64 of [a-z0-9_/-], starting with a letter");
  if (!spec.start)
    return make_unexpected(supervision_errc::invalid_spec, "child '" + spec.name + "': no factory");
  if (spec.shutdown.count() < 0)
    return make_unexpected(supervision_errc::invalid_spec,
                           "child '" + spec.name + "': negative shutdown timeout");
  return {};
}

}  // namespace troupe::supervision
