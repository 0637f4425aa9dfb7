// libtroupe_torchscript.so, the one part of troupe that links libtorch, opened with dlopen once per
// process by whatever needs it first (a TorchScript job's trainer backend, a predictor, an export):
// from TROUPE_TORCHSCRIPT_PLUGIN, else beside the running binary, else where the build put it. A
// process that never asks never pays libtorch's ~0.4 s start.
#pragma once

#include "troupe/core/error.hpp"

namespace troupe::model {

// The plugin's symbol `name`. Errors (core_errc::io_error): the plugin missing or not loadable
// (every path tried and why), or without that symbol (a plugin of another build).
expected<void*> torchscript_symbol(const char* name);

}  // namespace troupe::model
