#include "troupe/collective/shm/link.hpp"

#include <unistd.h>

#include "shm/stream.hpp"
#include "troupe/transport/shm_ring.hpp"

namespace troupe::collective {

using namespace shm_detail;
using steady = std::chrono::steady_clock;

std::string shm_ring_link::ring_name(const std::string& job, std::uint64_t epoch, int rank) {
  return "troupe-" + job + "-e" + std::to_string(epoch) + "-r" + std::to_string(rank);
}

shm_ring_link::shm_ring_link(shm_link_options o, std::unique_ptr<transport::shm_ring> in,
                             std::unique_ptr<transport::shm_ring> out)
    : opt_(std::move(o)), in_(std::move(in)), out_(std::move(out)) {
  bool one = opt_.next_node == opt_.prev_node;  // a ring of two: one neighbour, watched once
  watch_[0] = std::make_unique<peer_watch>(opt_.prev_pid, opt_.live, opt_.prev_node);
  if (!one) watch_[1] = std::make_unique<peer_watch>(opt_.next_pid, opt_.live, opt_.next_node);
}

shm_ring_link::~shm_ring_link() = default;

bool shm_ring_link::neighbour_dead(pid_t& which) const {
  for (const auto& w : watch_)
    if (w && w->dead()) {
      which = w->pid();
      return true;
    }
  return false;
}

expected<std::unique_ptr<shm_ring_link>> shm_ring_link::connect(const shm_link_options& o) {
  if (o.size < 2 || o.rank < 0 || o.rank >= o.size)
    return make_unexpected(collective_errc::setup, "ring of size " + std::to_string(o.size) + ", rank " +
                                                       std::to_string(o.rank) + ": needs 2+ ranks");
  auto deadline = steady::now() + o.timeout;
  auto in = make_inbound_ring(o);
  if (!in) return in.err();
  auto out = open_next_ring(o, deadline);
  if (!out) return out.err();
  (*in)->unlink_when_attached();
  (*out)->unlink_when_attached();
  return std::unique_ptr<shm_ring_link>(new shm_ring_link(o, std::move(*in), std::move(*out)));
}

bool shm_ring_link::prev_linked() const noexcept {
  return in_->opened();
}

bool shm_ring_link::ring_exists(const std::string& job, std::uint64_t epoch, int rank) {
  return ::access(("/dev/shm/" + ring_name(job, epoch, rank)).c_str(), F_OK) == 0;
}

expected<void> shm_ring_link::check_stall(const step_tag& tag, steady::time_point deadline,
                                          steady::time_point& next_probe) const {
  if (opt_.current_epoch && opt_.current_epoch->load(std::memory_order_acquire) != tag.epoch)
    return make_unexpected(collective_errc::cancelled, "epoch " + std::to_string(tag.epoch) + " is over");
  auto now = steady::now();
  // Without pidfds the /proc probe is dearer: every 5 ms.
  bool cheap = watch_[0]->cheap() && (!watch_[1] || watch_[1]->cheap());
  if (cheap || now >= next_probe) {
    next_probe = now + std::chrono::milliseconds(5);
    if (pid_t p = 0; neighbour_dead(p))
      return make_unexpected(collective_errc::peer_dead,
                             "pid " + std::to_string(p) + " (op " + std::to_string(tag.op) + ")");
  }
  if (now >= deadline)
    return make_unexpected(collective_errc::timeout,
                           "op " + std::to_string(tag.op) + " step " + std::to_string(tag.step));
  return {};
}

expected<void> shm_ring_link::exchange(const step_tag& tag, std::span<const float> send,
                                       std::span<float> recv, bool accumulate) {
  return transfer(tag, &send, &recv, accumulate);
}

expected<void> shm_ring_link::send(const step_tag& tag, std::span<const float> data) {
  return transfer(tag, &data, nullptr, false);
}

expected<void> shm_ring_link::recv(const step_tag& tag, std::span<float> data) {
  return transfer(tag, nullptr, &data, false);
}

// Either side may be absent (null): that side counts as done from the start.
expected<void> shm_ring_link::transfer(const step_tag& tag, const std::span<const float>* send,
                                       std::span<float>* recv, bool accumulate) {
  in_->unlink_when_attached();
  sender tx = make_sender(tag, send);
  receiver rx = make_receiver(recv, accumulate);
  auto deadline = steady::now() + opt_.timeout;
  auto next_probe = steady::now() + std::chrono::milliseconds(5);
  while (!tx.done() || !rx.done()) {
    bool progressed = !tx.done() && tx.pump(*out_);
    if (!rx.done()) {
      int r = rx.pump(*in_, tag);
      if (r < 0) return rx.mismatch(tag);
      progressed |= r > 0;
    }
    if (progressed) continue;
    if (auto s = check_stall(tag, deadline, next_probe); !s) return s;
    if (!rx.done())
      in_->wait_for_data(std::chrono::microseconds(tx.done() ? 250 : 100));
    else
      out_->wait_for_space(std::chrono::microseconds(250));
  }
  return {};
}

}  // namespace troupe::collective
