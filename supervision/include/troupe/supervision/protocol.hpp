// Messages a supervisor understands. Include this where an actor talks to a supervisor (the
// master adding and removing workers, `troupe status`); it pulls in a few CAF headers.
//
//   self->request(sup, 5s, start_child_atom::value, spec).then([](caf::actor& child) {...},
//                                                             [](caf::error& e) {...});
//   self->request(sup, 5s, terminate_child_atom::value, std::string{"worker/7"}).then([] {...});
//   self->request(sup, 5s, which_children_atom::value).then([](std::vector<child_info>& v) {...});
//   self->request(sup, 5s, count_children_atom::value).then([](child_counts& c) {...});
//
// Errors come back as caf::error of category "supervise" (see caf_errors.hpp): duplicate_name,
// invalid_spec, shutting_down (start_child); unknown_child (terminate_child).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <caf/actor.hpp>
#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/atom.hpp>

#include "troupe/supervision/child_spec.hpp"

namespace troupe::supervision {

using start_child_atom = caf::atom_constant<caf::atom("sup_start")>;
using terminate_child_atom = caf::atom_constant<caf::atom("sup_term")>;
using which_children_atom = caf::atom_constant<caf::atom("sup_which")>;
using count_children_atom = caf::atom_constant<caf::atom("sup_count")>;

enum class child_status {
  running,
  restarting,  // down, waiting for its backoff or for siblings to stop
  stopping,    // asked to stop, not down yet
  stopped,     // down for good (supervisor shutting down)
};
std::string_view to_string(child_status s) noexcept;

struct child_info {
  std::string name;
  caf::actor actor;  // invalid unless running or stopping
  restart_type restart = restart_type::permanent;
  child_status status = child_status::running;
  std::uint32_t restarts = 0;
};

struct child_counts {
  std::size_t specs = 0;       // children the supervisor knows
  std::size_t active = 0;      // running
  std::size_t restarting = 0;  // waiting to be restarted
};

}  // namespace troupe::supervision

// Local messages only (never serialised): a spec carries a std::function.
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::supervision::child_spec)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::supervision::child_counts)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(std::vector<troupe::supervision::child_info>)
