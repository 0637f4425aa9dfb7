#include "membership_client.hpp"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include "troupe/wire/messages.hpp"

namespace troupe::actors {

membership_client::membership_client(node_identity who, std::string address, node_view& view, links l)
    : who_(std::move(who)), address_(std::move(address)), view_(view), links_(std::move(l)) {}

void membership_client::send_join() {
  auto j = wire::join(who_.id, who_.role, address_, static_cast<int>(::getpid()), links_.ring_address());
  if (auto r = links_.to_master(std::move(j)); !r) spdlog::warn("join: {}", r.err().to_string());
}

void membership_client::mark_ready() {
  // A second join (master_up raced with this) is harmless: the master ignores a member it has.
  if (leaving()) return;  // a leaving node never joins again
  if (!ready_.exchange(true) && links_.master_up()) send_join();
}

void membership_client::request_view() {
  if (ready_.load() && !leaving() && links_.master_up()) send_join();
}

void membership_client::master_up() {
  if (ready_.load() && !leaving()) send_join();
}

void membership_client::master_down() {
  view_.master_down();
  std::lock_guard lk(mu_);
  if (!leaving()) return;
  master_lost_ = true;  // a master that went away (the whole job stopping) will not answer
  left_cv_.notify_all();
}

void membership_client::start_rejoining() {
  rejoin_ = std::jthread([this](std::stop_token stop) { rejoin(stop); });
}

void membership_client::stop() {
  rejoin_ = {};
}

// Joins again while no view of the master lists this incarnation: a node that is not a member has
// its leases taken back and its reports refused.
void membership_client::rejoin(std::stop_token stop) {
  std::mutex mu;
  std::unique_lock lk(mu);
  std::condition_variable_any cv;
  for (int unanswered = 0;;) {
    // With a stop token, wait_for returns the predicate's value whether or not stop was requested.
    cv.wait_for(lk, stop, std::chrono::milliseconds(250), [] { return false; });
    if (stop.stop_requested()) return;
    if (view_.joined() || !ready_.load() || leaving() || !links_.master_up()) {
      unanswered = 0;
      continue;
    }
    // The first tick may race the join sent on master_up and the master's answer to it.
    if (++unanswered < 2) continue;
    spdlog::info("no membership view from the master lists {} yet: joining again", who_.id.to_string());
    send_join();
  }
}

bool membership_client::leave(const std::string& reason) {
  if (!leaving_.request_stop()) return true;  // already leaving
  if (!links_.master_up()) return false;
  if (auto s = links_.to_master(wire::node_exited(who_.id, reason)); !s) {
    spdlog::warn("{}: cannot tell the master it leaves: {}", who_.id.to_string(), s.err().to_string());
    return false;
  }
  return true;
}

void membership_client::left() {
  std::lock_guard lk(mu_);
  left_ = true;
  left_cv_.notify_all();
}

bool membership_client::await_left(std::chrono::milliseconds limit) {
  std::unique_lock lk(mu_);
  left_cv_.wait_for(lk, limit, [this] { return left_ || master_lost_; });
  return left_;
}

}  // namespace troupe::actors
