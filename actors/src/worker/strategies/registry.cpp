#include <map>
#include <mutex>

#include "troupe/actors/strategy.hpp"

namespace troupe::actors {

// The built-in strategies register through these (a static registrar in a static library's
// object file that nothing references would be dropped by the linker). A new strategy's file
// defines one more, called below (docs/strategies.md, "Adding one").
void register_async_ps_strategy();
void register_allreduce_strategy();
void register_local_sgd_strategy();
void register_predict_strategy();

namespace {
std::map<std::string, strategy_factory>& registry() {
  static std::map<std::string, strategy_factory> r;
  return r;
}
}  // namespace

void register_strategies() {
  static std::once_flag once;
  std::call_once(once, [] {
    register_async_ps_strategy();
    register_allreduce_strategy();
    register_local_sgd_strategy();
    register_predict_strategy();
  });
}

strategy_registrar::strategy_registrar(std::string name, strategy_factory f,
                                       std::optional<job::strategy_traits> traits) {
  if (traits || !job::traits_of(name))
    job::register_strategy_traits(name, traits.value_or(job::strategy_traits{}));
  registry()[std::move(name)] = std::move(f);
}

expected<std::unique_ptr<strategy>> make_strategy(const std::string& name, const job::job_spec& spec) {
  register_strategies();
  auto it = registry().find(name);
  if (it == registry().end()) {
    std::string names;
    for (const auto& [n, f] : registry()) names += (names.empty() ? "" : ", ") + n;
    return make_unexpected(core_errc::invalid_argument, "strategy '" + name + "': registered are " + names);
  }
  return it->second(spec);
}

std::vector<std::string> strategy_names() {
  register_strategies();
  std::vector<std::string> v;
  for (const auto& [n, f] : registry()) v.push_back(n);
  return v;
}

}  // namespace troupe::actors
