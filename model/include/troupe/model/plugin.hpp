// libtroupe_torchscript.so, the one part of troupe that links libtorch, opened with dlopen once per
// process by whatever needs it first (a TorchScript job's trainer backend, a predictor, an export):
// from TROUPE_TORCHSCRIPT_PLUGIN, else beside the running binary, else where the build put it. A
// process that never asks never pays libtorch's ~0.4 s start.
#pragma once

#include <string>

#include "troupe/core/error.hpp"

namespace troupe::model {

// The plugin's symbol `name`. Errors (core_errc::io_error): the plugin missing or not loadable
// (every path tried and why), or without that symbol (a plugin of another build).
expected<void*> torchscript_symbol(const char* name);

// Starts opening the plugin on a thread of its own, once; the first torchscript_symbol waits for it.
// For a process that will need it anyway (`troupe train --local` writes its model through it): its
// ~0.4 s start then runs beside the data's load and the training, not after them. A process that
// ends before the load does waits for it at exit.
void preload_torchscript();

// The plugin hands an error over as text (error::to_string: "<category>: <message>: <context>"):
// the same error again, its category (core, nn, storage) and code read back, so that it reads once
// rather than wrapped in another ("core: invalid argument: core: I/O error: ..."). Text of another
// form: core_errc::invalid_argument with the text as its context.
error plugin_error(const std::string& text);

}  // namespace troupe::model
