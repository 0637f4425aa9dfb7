#include <string>

#include "troupe/supervision/errc.hpp"
#include "troupe/supervision/supervisor.hpp"

namespace troupe::supervision {
namespace {

std::chrono::milliseconds ms(std::int64_t v) {
  return std::chrono::milliseconds(v);
}
std::int64_t to_ms(duration d) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(d).count();
}

strategy parse_strategy(const std::string& s) {
  if (s == "one_for_all") return strategy::one_for_all;
  if (s == "rest_for_one") return strategy::rest_for_one;
  return strategy::one_for_one;
}

}  // namespace

std::string_view to_string(strategy s) noexcept {
  switch (s) {
    case strategy::one_for_one:
      return "one_for_one";
    case strategy::one_for_all:
      return "one_for_all";
    case strategy::rest_for_one:
      return "rest_for_one";
  }
  return "?";
}

std::string_view to_string(supervisor_event::kind k) noexcept {
  using kind = supervisor_event::kind;
  switch (k) {
    case kind::child_started:
      return "child_started";
    case kind::child_exited:
      return "child_exited";
    case kind::restart_scheduled:
      return "restart_scheduled";
    case kind::child_killed:
      return "child_killed";
    case kind::start_failed:
      return "start_failed";
    case kind::gave_up:
      return "gave_up";
    case kind::stopped:
      return "stopped";
  }
  return "?";
}

supervisor_config supervisor_config::read(config_section s, supervisor_config d) {
  constexpr std::int64_t day_ms = 86'400'000;
  auto strat =
      s.get_enum("strategy", std::string(to_string(d.strat)), {"one_for_one", "one_for_all", "rest_for_one"});
  d.strat = parse_strategy(strat);
  d.max_restarts = static_cast<std::uint32_t>(s.get_int("max_restarts", d.max_restarts, 0, 1'000'000));
  d.window = ms(s.get_int("window_ms", to_ms(d.window), 1, day_ms));
  d.backoff.base = ms(s.get_int("backoff_base_ms", to_ms(d.backoff.base), 0, day_ms));
  d.backoff.max = ms(s.get_int("backoff_max_ms", to_ms(d.backoff.max), 0, day_ms));
  d.backoff.jitter = s.get_double("backoff_jitter", d.backoff.jitter, 0.0, 1.0);
  d.backoff_reset_after = ms(s.get_int("backoff_reset_ms", to_ms(d.backoff_reset_after), 0, day_ms));
  d.seed = static_cast<std::uint64_t>(s.get_int("seed", static_cast<std::int64_t>(d.seed), 0));
  if (d.backoff.base > d.backoff.max)
    s.fail("backoff_base_ms", core_errc::out_of_range, "must not exceed backoff_max_ms");
  return d;
}

expected<void> supervisor_config::validate() const {
  auto bad = [this](const std::string& what) {
    return make_unexpected(supervision_errc::invalid_spec, "supervisor '" + name + "': " + what);
  };
  if (window <= duration::zero()) return bad("window must be positive");
  if (backoff.base < duration::zero() || backoff.max < duration::zero()) return bad("negative backoff");
  if (backoff.base > backoff.max) return bad("backoff base exceeds backoff max");
  if (!(backoff.jitter >= 0.0 && backoff.jitter <= 1.0)) return bad("backoff jitter must be in [0, 1]");
  if (backoff_reset_after < duration::zero()) return bad("negative backoff reset");
  return {};
}

}  // namespace troupe::supervision
