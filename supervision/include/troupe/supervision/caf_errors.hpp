// supervision_errc as caf::error: exit reasons of supervisors that give up and error responses
// to start_child/terminate_child. Register the renderer once per actor system config so
// `system.render(err)` prints "supervise: intensity exceeded: <context>".
#pragma once

#include <cstdint>
#include <string>

#include <caf/fwd.hpp>

#include "troupe/supervision/errc.hpp"

namespace troupe::supervision {

// The CAF error category of supervision_errc: caf::atom("supervise").
caf::atom_value caf_error_category() noexcept;

// A caf::error with category "supervise"; `context` travels in the error's context message.
caf::error make_caf_error(supervision_errc code, const std::string& context = {});

// Adds the renderer for the "supervise" category. Call before constructing the actor_system.
void add_supervision_error_category(caf::actor_system_config& cfg);

// The supervision_errc carried by `err`; `ok` when `err` is empty or of another category.
supervision_errc supervision_code(const caf::error& err) noexcept;

// Converts any caf::error to a troupe::error: our own category keeps its code, anything else
// becomes child_failed with CAF's rendering as context. `rendered` is what the actor system
// printed for it (system.render(err)); pass it to keep the original wording.
error to_troupe_error(const caf::error& err, const std::string& rendered);

// True for the reasons that mean "stopped on purpose": none (normal) and user_shutdown.
// A transient child that exits with one of them is not restarted.
bool is_normal_exit(const caf::error& reason) noexcept;

}  // namespace troupe::supervision
