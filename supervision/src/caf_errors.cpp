#include "troupe/supervision/caf_errors.hpp"

#include <caf/actor_system_config.hpp>
#include <caf/error.hpp>
#include <caf/exit_reason.hpp>
#include <caf/make_message.hpp>

namespace troupe::supervision {
namespace {

constexpr caf::atom_value category = caf::atom("supervise");

// The context string of an error made by make_caf_error ("" if there is none).
std::string context_of(const caf::message& ctx) {
  if (ctx.size() == 1 && ctx.match_element<std::string>(0)) return ctx.get_as<std::string>(0);
  return ctx.empty() ? std::string{} : caf::to_string(ctx);
}

}  // namespace

caf::atom_value caf_error_category() noexcept {
  return category;
}

caf::error make_caf_error(supervision_errc code, const std::string& context) {
  if (context.empty()) return caf::error{static_cast<std::uint8_t>(code), category};
  return caf::error{static_cast<std::uint8_t>(code), category, caf::make_message(context)};
}

void add_supervision_error_category(caf::actor_system_config& cfg) {
  cfg.add_error_category(category, [](std::uint8_t code, caf::atom_value, const caf::message& ctx) {
    std::string out = "supervise: ";
    out += make_error_code(static_cast<supervision_errc>(code)).message();
    auto extra = context_of(ctx);
    if (!extra.empty()) out += ": " + extra;
    return out;
  });
}

supervision_errc supervision_code(const caf::error& err) noexcept {
  if (!err || err.category() != category) return supervision_errc::ok;
  return static_cast<supervision_errc>(err.code());
}

error to_troupe_error(const caf::error& err, const std::string& rendered) {
  if (!err) return {};
  if (err.category() == category)
    return error(make_error_code(static_cast<supervision_errc>(err.code())), context_of(err.context()));
  return error(make_error_code(supervision_errc::child_failed), rendered);
}

bool is_normal_exit(const caf::error& reason) noexcept {
  return !reason || reason == caf::exit_reason::normal || reason == caf::exit_reason::user_shutdown;
}

}  // namespace troupe::supervision
