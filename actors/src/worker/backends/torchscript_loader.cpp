// Opens libtroupe_torchscript.so (troupe/actors/torchscript.hpp) once per process, on the first
// job that names a TorchScript model: from TROUPE_TORCHSCRIPT_PLUGIN, beside the running binary,
// or where the build put it.
#include <dlfcn.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <mutex>

#include "troupe/actors/torchscript.hpp"

namespace troupe::actors {

namespace {

using create_fn = trainer_backend* (*)(int, const torchscript_options*, std::string*);

std::vector<std::string> candidates() {
  std::vector<std::string> out;
  if (const char* env = std::getenv("TROUPE_TORCHSCRIPT_PLUGIN"); env && *env) return {env};
  std::error_code ec;
  auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) out.push_back((exe.parent_path() / "libtroupe_torchscript.so").string());
#ifdef TROUPE_TORCHSCRIPT_PLUGIN_BUILT
  out.push_back(TROUPE_TORCHSCRIPT_PLUGIN_BUILT);
#endif
  return out;
}

struct plugin {
  create_fn create = nullptr;
  std::string error;
};

const plugin& open_plugin() {
  static plugin p;
  static std::once_flag once;
  std::call_once(once, [] {
    auto started = std::chrono::steady_clock::now();
    std::string tried;
    for (const auto& path : candidates()) {
      if (!std::filesystem::exists(path)) {
        tried += (tried.empty() ? "" : ", ") + path + " (missing)";
        continue;
      }
      void* h = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (!h) {
        tried += (tried.empty() ? "" : ", ") + path + " (" + ::dlerror() + ")";
        continue;
      }
      p.create = reinterpret_cast<create_fn>(::dlsym(h, "troupe_torchscript_create"));
      if (!p.create) {
        tried += (tried.empty() ? "" : ", ") + path + " (no troupe_torchscript_create)";
        continue;
      }
      auto ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();
      spdlog::info("TorchScript backend: {} loaded in {:.0f} ms", path, ms);
      return;
    }
    p.error =
        "[model] type = \"torchscript\" needs the TorchScript backend plugin, libtroupe_torchscript.so "
        "(built when libtorch-dev is installed: scripts/install-deps.sh), tried: " +
        tried;
  });
  return p;
}

}  // namespace

expected<void> open_torchscript_plugin() {
  const auto& p = open_plugin();
  if (!p.create) return make_unexpected(core_errc::io_error, p.error);
  return {};
}

expected<std::unique_ptr<trainer_backend>> load_torchscript(const torchscript_options& o) {
  const auto& p = open_plugin();
  if (!p.create) return make_unexpected(core_errc::io_error, p.error);
  std::string error;
  std::unique_ptr<trainer_backend> b(p.create(kTorchscriptAbi, &o, &error));
  if (!b) return make_unexpected(core_errc::invalid_argument, error);
  return b;
}

}  // namespace troupe::actors
