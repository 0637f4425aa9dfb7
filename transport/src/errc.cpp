#include "troupe/transport/errc.hpp"

#include <string>

namespace troupe {
namespace {
class transport_category_impl final : public std::error_category {
 public:
  const char* name() const noexcept override { return "transport"; }
  std::string message(int c) const override {
    switch (static_cast<transport_errc>(c)) {
      case transport_errc::ok:
        return "ok";
      case transport_errc::bad_address:
        return "bad address";
      case transport_errc::listen_failed:
        return "listen failed";
      case transport_errc::connect_failed:
        return "connect failed";
      case transport_errc::auth_failed:
        return "authentication failed";
      case transport_errc::handshake_failed:
        return "handshake failed";
      case transport_errc::not_connected:
        return "not connected";
      case transport_errc::queue_full:
        return "send queue full";
      case transport_errc::malformed_frame:
        return "malformed frame";
      case transport_errc::frame_too_large:
        return "frame too large";
      case transport_errc::closed:
        return "closed";
      case transport_errc::name_taken:
        return "name already registered";
      case transport_errc::bad_name:
        return "invalid name";
      case transport_errc::token_error:
        return "cluster token unavailable";
      case transport_errc::timeout:
        return "timed out";
      case transport_errc::wrong_thread:
        return "blocking call on the io thread";
    }
    return "unknown transport error " + std::to_string(c);
  }
};
}  // namespace

const std::error_category& transport_category() noexcept {
  static const transport_category_impl instance;
  return instance;
}

}  // namespace troupe
