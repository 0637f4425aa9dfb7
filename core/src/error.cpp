#include "troupe/core/error.hpp"

#include <stdexcept>

namespace troupe {

std::string error::to_string() const {
  if (!code_) return "no error";
  std::string s = code_.category().name();
  s += ": ";
  s += code_.message();
  if (!context_.empty()) {
    s += ": ";
    s += context_;
  }
  return s;
}

std::string error::describe() const {
  if (!code_ || context_.empty()) return to_string();
  if (code_.category() == core_category()) return context_;
  const auto* own = dynamic_cast<const error_category*>(&code_.category());
  return own && own->context_says_it(code_.value()) ? context_ : to_string();
}

error& error::wrap(const std::string& outer) {
  context_ = context_.empty() ? outer : outer + ": " + context_;
  return *this;
}

void throw_bad_expected_access(const error& e) {
  throw std::logic_error("expected<T>::value() on an error: " + e.to_string());
}

namespace {
class core_category_impl final : public std::error_category {
 public:
  const char* name() const noexcept override { return "core"; }
  std::string message(int c) const override {
    switch (static_cast<core_errc>(c)) {
      case core_errc::ok:
        return "ok";
      case core_errc::io_error:
        return "I/O error";
      case core_errc::parse_error:
        return "parse error";
      case core_errc::missing_key:
        return "missing key";
      case core_errc::wrong_type:
        return "wrong type";
      case core_errc::out_of_range:
        return "value out of range";
      case core_errc::unknown_key:
        return "unknown key";
      case core_errc::invalid_argument:
        return "invalid argument";
      case core_errc::not_built:
        return "not built";
    }
    return "unknown core error " + std::to_string(c);
  }
};
}  // namespace

const std::error_category& core_category() noexcept {
  static const core_category_impl instance;
  return instance;
}

}  // namespace troupe
