#include <map>
#include <mutex>

#include "troupe/actors/strategy.hpp"

namespace troupe::actors {

// The built-in strategies register through these (a static registrar in a static library's
// object file that nothing references would be dropped by the linker).
void register_async_ps_strategy();
void register_allreduce_strategy();
void register_local_sgd_strategy();
void register_predict_strategy();

namespace {
std::map<std::string, strategy_factory>& registry() {
  static std::map<std::string, strategy_factory> r;
  return r;
}
void ensure_builtins() {
  static std::once_flag once;
  std::call_once(once, [] {
    register_async_ps_strategy();
    register_allreduce_strategy();
    register_local_sgd_strategy();
    register_predict_strategy();
  });
}
}  // namespace

strategy_registrar::strategy_registrar(std::string name, strategy_factory f) {
  registry()[std::move(name)] = std::move(f);
}

expected<std::unique_ptr<strategy>> make_strategy(const std::string& name, const job::job_spec& spec) {
  ensure_builtins();
  auto it = registry().find(name);
  if (it == registry().end()) {
    std::string names;
    for (const auto& [n, f] : registry()) names += (names.empty() ? "" : ", ") + n;
    return make_unexpected(core_errc::invalid_argument, "strategy '" + name + "': registered are " + names);
  }
  return it->second(spec);
}

std::vector<std::string> strategy_names() {
  ensure_builtins();
  std::vector<std::string> v;
  for (const auto& [n, f] : registry()) v.push_back(n);
  return v;
}

}  // namespace troupe::actors
