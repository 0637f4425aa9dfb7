#include "troupe/job/strategy_traits.hpp"

#include <map>
#include <mutex>

namespace troupe::job {

namespace {
struct table {
  std::mutex mu;
  std::map<std::string, strategy_traits> traits{
      {"async_ps", {.uses_ps = true}},
      {"allreduce", {.global_batch = true}},
      // Each worker's replica drifts between averaging rounds: one worker scores the whole test set.
      {"local_sgd", {.replicas_agree = false, .syncs_every = true}},
      {"predict", {.trains = false}},
  };
};
table& known() {
  static table t;
  return t;
}
}  // namespace

void register_strategy_traits(const std::string& name, strategy_traits t) {
  auto& k = known();
  std::lock_guard lk(k.mu);
  k.traits[name] = t;
}

std::optional<strategy_traits> traits_of(const std::string& name) {
  auto& k = known();
  std::lock_guard lk(k.mu);
  auto it = k.traits.find(name);
  if (it == k.traits.end()) return std::nullopt;
  return it->second;
}

std::vector<std::string> training_strategies() {
  auto& k = known();
  std::lock_guard lk(k.mu);
  std::vector<std::string> out;
  for (const auto& [name, t] : k.traits)
    if (t.trains) out.push_back(name);
  return out;
}

}  // namespace troupe::job
