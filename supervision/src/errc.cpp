#include "troupe/supervision/errc.hpp"

#include <string>

namespace troupe {
namespace {

class supervision_category_impl final : public std::error_category {
 public:
  const char* name() const noexcept override { return "supervision"; }
  std::string message(int c) const override {
    switch (static_cast<supervision_errc>(c)) {
      case supervision_errc::ok:
        return "ok";
      case supervision_errc::intensity_exceeded:
        return "restart intensity exceeded";
      case supervision_errc::start_failed:
        return "child failed to start";
      case supervision_errc::duplicate_name:
        return "duplicate name";
      case supervision_errc::unknown_child:
        return "unknown child";
      case supervision_errc::invalid_spec:
        return "invalid spec";
      case supervision_errc::shutting_down:
        return "supervisor shutting down";
      case supervision_errc::child_failed:
        return "actor failed";
    }
    return "unknown supervision error " + std::to_string(c);
  }
};

}  // namespace

const std::error_category& supervision_category() noexcept {
  static const supervision_category_impl instance;
  return instance;
}

}  // namespace troupe
