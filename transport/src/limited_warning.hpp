// A warning that peers can make repeat at will (a refused connection, a bad frame, a failed
// accept), rate-limited on the io thread: log_limit's first lines per window, then one summary
// line when the window ends (a timer) or the endpoint shuts down.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include <spdlog/spdlog.h>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include "troupe/core/log_limit.hpp"

namespace troupe::detail {

class limited_warning {
 public:
  static constexpr std::size_t burst = 20;
  static constexpr std::chrono::seconds window{10};

  // `what` names the kind in the summary: "transport: refused connection: ... and K more like this".
  limited_warning(boost::asio::io_context& io, std::string what) : io_(io), what_(std::move(what)) {}

  // (io) Logs `line` at warn level, or counts it.
  void warn(const std::string& line) {
    const auto now = std::chrono::steady_clock::now();
    auto v = limit_.note(now);
    if (!v.summary.empty()) spdlog::warn("transport: {}: {}", what_, v.summary);
    if (v.log) {
      spdlog::warn("{}", line);
      return;
    }
    if (armed_) return;
    armed_ = true;
    if (!timer_) timer_ = std::make_unique<boost::asio::steady_timer>(io_);
    timer_->expires_at(limit_.window_end());
    timer_->async_wait([this](const boost::system::error_code& ec) {
      armed_ = false;
      if (ec) return;
      if (auto s = limit_.flush(std::chrono::steady_clock::now()); !s.empty())
        spdlog::warn("transport: {}: {}", what_, s);
    });
  }

  // (io) At shutdown: what the current window held back, told now.
  void flush() {
    if (timer_) timer_->cancel();
    if (auto s = limit_.flush(std::chrono::steady_clock::now(), true); !s.empty())
      spdlog::warn("transport: {}: {}", what_, s);
  }

 private:
  boost::asio::io_context& io_;
  std::string what_;
  log_limit limit_{burst, window};
  std::unique_ptr<boost::asio::steady_timer> timer_;
  bool armed_ = false;
};

}  // namespace troupe::detail
