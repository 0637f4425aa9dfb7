// The TorchScript trainer backend's loader (troupe/actors/torchscript.hpp): the plugin,
// libtroupe_torchscript.so, opened once per process by model::torchscript_symbol on the first job
// that names a TorchScript model (from TROUPE_TORCHSCRIPT_PLUGIN, beside the running binary, or
// where the build put it).
#include "troupe/actors/torchscript.hpp"
#include "troupe/model/plugin.hpp"

namespace troupe::actors {

namespace {

using create_fn = trainer_backend* (*)(int, const torchscript_options*, std::string*);

expected<create_fn> create_symbol() {
  auto s = model::torchscript_symbol("troupe_torchscript_create");
  if (!s)
    return make_unexpected(
        core_errc::io_error,
        "[model] type = \"torchscript\" needs the TorchScript backend: " + s.err().context());
  return reinterpret_cast<create_fn>(*s);
}

}  // namespace

expected<void> open_torchscript_plugin() {
  auto c = create_symbol();
  if (!c) return c.err();
  return {};
}

expected<std::unique_ptr<trainer_backend>> load_torchscript(const torchscript_options& o) {
  auto c = create_symbol();
  if (!c) return c.err();
  std::string text;
  std::unique_ptr<trainer_backend> b((*c)(kTorchscriptAbi, &o, &text));
  if (!b) return make_unexpected(model::plugin_error(text));
  return b;
}

}  // namespace troupe::actors
