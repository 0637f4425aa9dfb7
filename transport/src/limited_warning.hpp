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

#include "troupe/core/clock.hpp"
#include "troupe/core/log_limit.hpp"

namespace troupe::detail {

class limited_warning {
 public:
  static constexpr std::size_t burst = 20;
  static constexpr std::chrono::seconds window{10};

  // `what` names the kind in the summary: "transport: refused connection: ... and K more like this".
  // Windows are measured on `clk`; the timer that tells a window's summary waits in real time
  // until the window's end as `clk` sees it at arming.
  limited_warning(boost::asio::io_context& io, troupe::clock& clk, std::string what)
      : io_(io), clock_(clk), what_(std::move(what)) {}

  // (io) Logs `line` at warn level, or counts it.
  void warn(const std::string& line) {
    const auto now = clock_.now();
    auto v = limit_.note(now);
    if (!v.summary.empty()) spdlog::warn("transport: {}: {}", what_, v.summary);
    if (v.log) {
      spdlog::warn("{}", line);
      return;
    }
    if (armed_) return;
    armed_ = true;
    if (!timer_) timer_ = std::make_unique<boost::asio::steady_timer>(io_);
    timer_->expires_after(limit_.window_end() - now);
    timer_->async_wait([this](const boost::system::error_code& ec) {
      armed_ = false;
      if (ec) return;
      if (auto s = limit_.flush(clock_.now()); !s.empty()) spdlog::warn("transport: {}: {}", what_, s);
    });
  }

  // (io) At shutdown: what the current window held back, told now.
  void flush() {
    if (timer_) timer_->cancel();
    if (auto s = limit_.flush(clock_.now(), true); !s.empty()) spdlog::warn("transport: {}: {}", what_, s);
  }

 private:
  boost::asio::io_context& io_;
  troupe::clock& clock_;
  std::string what_;
  log_limit limit_{burst, window};
  std::unique_ptr<boost::asio::steady_timer> timer_;
  bool armed_ = false;
};

}  // namespace troupe::detail
