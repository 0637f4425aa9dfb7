#include "troupe/model/plugin.hpp"

#include <dlfcn.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <future>
#include <mutex>
#include <string>
#include <vector>

#include "troupe/core/clock.hpp"
#include "troupe/nn/errc.hpp"
#include "troupe/storage/errc.hpp"

namespace troupe::model {

namespace {

std::vector<std::string> candidates() {
  if (const char* env = std::getenv("TROUPE_TORCHSCRIPT_PLUGIN"); env && *env) return {env};
  std::vector<std::string> out;
  std::error_code ec;
  auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) out.push_back((exe.parent_path() / "libtroupe_torchscript.so").string());
#ifdef TROUPE_TORCHSCRIPT_PLUGIN_BUILT
  // Where the build put it: often beside the binary already (then named once).
  if (out.empty() || out.front() != TROUPE_TORCHSCRIPT_PLUGIN_BUILT)
    out.push_back(TROUPE_TORCHSCRIPT_PLUGIN_BUILT);
#endif
  return out;
}

struct plugin {
  void* handle = nullptr;
  std::string error;
  bool absent = false;  // no candidate exists: this troupe was built without it
};

const plugin& open_plugin() {
  static plugin p;
  static std::once_flag once;
  std::call_once(once, [] {
    const auto started = clock::system().now();
    std::string tried;
    p.absent = true;
    for (const auto& path : candidates()) {
      std::error_code ec;
      if (!std::filesystem::exists(path, ec)) {
        tried += (tried.empty() ? "" : ", ") + path + " (missing)";
        continue;
      }
      p.absent = false;
      p.handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (!p.handle) {
        tried += (tried.empty() ? "" : ", ") + path + " (" + ::dlerror() + ")";
        continue;
      }
      spdlog::info("TorchScript plugin: {} loaded in {:.0f} ms", path,
                   std::chrono::duration<double, std::milli>(clock::system().now() - started).count());
      return;
    }
    p.error =
        "TorchScript models need the plugin libtroupe_torchscript.so (built when libtorch-dev is installed: "
        "scripts/install-deps.sh), tried: " +
        tried;
  });
  return p;
}

}  // namespace

void preload_torchscript() {
  static std::once_flag once;
  static std::future<void> loading;  // its destructor, at exit, waits for the load
  std::call_once(once, [] { loading = std::async(std::launch::async, [] { (void)open_plugin(); }); });
}

expected<void*> torchscript_symbol(const char* name) {
  const auto& p = open_plugin();
  if (!p.handle) return make_unexpected(p.absent ? core_errc::not_built : core_errc::io_error, p.error);
  void* s = ::dlsym(p.handle, name);
  if (!s)
    return make_unexpected(core_errc::io_error, std::string("libtroupe_torchscript.so has no ") + name +
                                                    " (a plugin of another troupe build?)");
  return s;
}

error plugin_error(const std::string& text) {
  for (const std::error_category* cat :
       {&core_category(), &nn::nn_category(), &storage::storage_category()}) {
    const std::string prefix = std::string(cat->name()) + ": ";
    if (!text.starts_with(prefix)) continue;
    for (int c = 1; c < 64; ++c) {
      const std::string head = prefix + cat->message(c);
      if (text == head) return error(std::error_code(c, *cat), "");
      if (text.starts_with(head + ": ")) return error(std::error_code(c, *cat), text.substr(head.size() + 2));
    }
  }
  return error(core_errc::invalid_argument, text);
}

}  // namespace troupe::model
