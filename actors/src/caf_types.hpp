// CAF message types and atoms shared by the role actors (local messages only; nothing here is
// serialised by CAF: remote traffic is Cap'n Proto through the transport).
#pragma once

#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/atom.hpp>

#include "troupe/transport/message.hpp"
#include "troupe/wire/status_codec.hpp"

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::message)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::wire::task_counts)

namespace troupe::actors {
using tick_atom = caf::atom_constant<caf::atom("tick")>;
using peer_down_atom = caf::atom_constant<caf::atom("peer_down")>;
using peer_up_atom = caf::atom_constant<caf::atom("peer_up")>;
using view_atom = caf::atom_constant<caf::atom("view")>;
using requeue_atom = caf::atom_constant<caf::atom("requeue")>;
using restored_atom = caf::atom_constant<caf::atom("restored")>;
using counts_atom = caf::atom_constant<caf::atom("counts")>;
// master -> dispenser: a disk fault of the master's own files (empty: it is over); the dispenser
// hands out no task while one lasts.
using fault_atom = caf::atom_constant<caf::atom("fault")>;
using evaluate_atom = caf::atom_constant<caf::atom("evaluate")>;
}  // namespace troupe::actors
