// Opens libtroupe_torchscript.so for its predictor factory (predictor.hpp): once per process, on
// the first load_predictor().
#include <dlfcn.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <vector>

#include "troupe/model/model_dir.hpp"
#include "troupe/model/predictor.hpp"

namespace troupe::model {

namespace {

using create_fn = predictor* (*)(int, const predictor_options*, std::string*);

std::vector<std::string> candidates() {
  if (const char* env = std::getenv("TROUPE_TORCHSCRIPT_PLUGIN"); env && *env) return {env};
  std::vector<std::string> out;
  std::error_code ec;
  auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) out.push_back((exe.parent_path() / "libtroupe_torchscript.so").string());
#ifdef TROUPE_TORCHSCRIPT_PLUGIN_BUILT
  if (out.empty() || out.front() != TROUPE_TORCHSCRIPT_PLUGIN_BUILT)
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
    auto note = [&](const std::string& path, const std::string& why) {
      tried += (tried.empty() ? "" : ", ") + path + " (" + why + ")";
    };
    for (const auto& path : candidates()) {
      if (!std::filesystem::exists(path)) {
        note(path, "missing");
        continue;
      }
      // RTLD_LOCAL: libtorch's symbols stay inside; the plugin binds its own copies of troupe's.
      void* h = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (!h) {
        note(path, ::dlerror());
        continue;
      }
      p.create = reinterpret_cast<create_fn>(::dlsym(h, "troupe_torchscript_create_predictor"));
      if (!p.create) {
        note(path, "no troupe_torchscript_create_predictor: a plugin of an older troupe");
        continue;
      }
      auto ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();
      spdlog::info("TorchScript predictor: {} loaded in {:.0f} ms", path, ms);
      return;
    }
    p.error =
        "a model.pt needs the TorchScript plugin, libtroupe_torchscript.so (built when libtorch-dev is "
        "installed: scripts/install-deps.sh), tried: " +
        tried;
  });
  return p;
}

}  // namespace

predictor_options options_for(const model_info& m) {
  predictor_options o;
  o.path = m.pt_path;
  o.takes_ids = m.takes_ids;
  o.dense_dim = m.dense_dim;
  o.fields = m.fields;
  o.width = m.logits;
  return o;
}

expected<std::unique_ptr<predictor>> load_predictor(const predictor_options& o) {
  const auto& p = open_plugin();
  if (!p.create) return make_unexpected(core_errc::io_error, p.error);
  std::string error;
  std::unique_ptr<predictor> made(p.create(kPredictorAbi, &o, &error));
  if (!made) return make_unexpected(core_errc::invalid_argument, error);
  return made;
}

}  // namespace troupe::model
