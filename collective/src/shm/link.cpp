#include "troupe/collective/shm/link.hpp"

#include <unistd.h>

#include <algorithm>

#include "shm/lanes.hpp"
#include "shm/stream.hpp"
#include "troupe/transport/shm_ring.hpp"

namespace troupe::collective {

using namespace shm_detail;

std::string shm_ring_link::ring_name(const std::string& job, std::uint64_t epoch, int rank, int lane) {
  auto name = "troupe-" + job + "-e" + std::to_string(epoch) + "-r" + std::to_string(rank);
  if (lane > 0) name += "-l" + std::to_string(lane);
  return name;
}

shm_ring_link::shm_ring_link(shm_link_options o, std::vector<lane> lanes, int lanes_in, int lanes_out)
    : opt_(std::move(o)), lanes_(std::move(lanes)), lanes_in_(lanes_in), lanes_out_(lanes_out) {
  bool one = opt_.next_node == opt_.prev_node;  // a ring of two: one neighbour, watched once
  for (auto& l : lanes_) {
    l.watch[0] = std::make_unique<peer_watch>(opt_.prev_pid, opt_.live, opt_.prev_node);
    if (!one) l.watch[1] = std::make_unique<peer_watch>(opt_.next_pid, opt_.live, opt_.next_node);
  }
}

shm_ring_link::~shm_ring_link() = default;

bool shm_ring_link::neighbour_dead(const lane& l, pid_t& which) {
  for (const auto& w : l.watch)
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
  if (o.lanes < 1 || o.lanes > max_lanes || o.lane_min_bytes == 0)
    return make_unexpected(collective_errc::setup, std::to_string(o.lanes) + " lanes of " +
                                                       std::to_string(o.lane_min_bytes) + " bytes: needs 1-" +
                                                       std::to_string(max_lanes) + " lanes of 1+ bytes");
  auto deadline = o.clock.get().now() + o.timeout;
  std::vector<lane> lanes(static_cast<std::size_t>(o.lanes));
  // Lanes 1.. before lane 0: the previous rank, once it opens lane 0, finds every other lane there.
  for (int l = o.lanes - 1; l >= 0; --l) {
    auto in = make_inbound_ring(o, l);
    if (!in) return in.err();
    lanes[static_cast<std::size_t>(l)].in = std::move(*in);
  }
  auto out = open_next_ring(o, deadline);
  if (!out) return out.err();
  lanes[0].out = std::move(*out);
  int lanes_out = 1;
  for (; lanes_out < max_lanes; ++lanes_out) {
    auto more = open_next_lane(o, lanes_out);
    if (!more) return more.err();
    if (!*more) break;
    if (lanes.size() <= static_cast<std::size_t>(lanes_out))
      lanes.resize(static_cast<std::size_t>(lanes_out) + 1);
    lanes[static_cast<std::size_t>(lanes_out)].out = std::move(*more);
  }
  for (auto& l : lanes) {
    if (l.in) l.in->unlink_when_attached();
    if (l.out) l.out->unlink_when_attached();
  }
  return std::unique_ptr<shm_ring_link>(new shm_ring_link(o, std::move(lanes), o.lanes, lanes_out));
}

void shm_ring_link::unlink_attached() {
  for (int l = 0; l < lanes_in_; ++l) lanes_[static_cast<std::size_t>(l)].in->unlink_when_attached();
}

bool shm_ring_link::prev_linked() const noexcept {
  for (int l = 0; l < lanes_in_; ++l)
    if (!lanes_[static_cast<std::size_t>(l)].in->opened()) return false;
  return true;
}

bool shm_ring_link::ring_exists(const std::string& job, std::uint64_t epoch, int rank) {
  return ::access(("/dev/shm/" + ring_name(job, epoch, rank)).c_str(), F_OK) == 0;
}

expected<void> shm_ring_link::check_stall(const lane& l, const step_tag& tag,
                                          troupe::clock::time_point deadline,
                                          troupe::clock::time_point& next_probe) const {
  if (opt_.current_epoch && opt_.current_epoch->load(std::memory_order_acquire) != tag.epoch)
    return make_unexpected(collective_errc::cancelled, "epoch " + std::to_string(tag.epoch) + " is over");
  if (abort_.load(std::memory_order_acquire))
    return make_unexpected(collective_errc::cancelled,
                           "another lane of op " + std::to_string(tag.op) + " failed");
  auto now = opt_.clock.get().now();
  // Without pidfds the /proc probe is dearer: every 5 ms.
  bool cheap = l.watch[0]->cheap() && (!l.watch[1] || l.watch[1]->cheap());
  if (cheap || now >= next_probe) {
    next_probe = now + std::chrono::milliseconds(5);
    if (pid_t p = 0; neighbour_dead(l, p))
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

int shm_ring_link::lanes_for(std::size_t floats, int lanes) const noexcept {
  if (lanes <= 1) return 1;
  std::size_t n = floats * sizeof(float) / opt_.lane_min_bytes;
  return static_cast<int>(std::clamp<std::size_t>(n, 1, static_cast<std::size_t>(lanes)));
}

// Either side may be absent (null): that side counts as done from the start. A large side is split
// into one slice per lane (segment_bounds, as the other end splits it), each lane on a thread.
expected<void> shm_ring_link::transfer(const step_tag& tag, const std::span<const float>* send,
                                       std::span<float>* recv, bool accumulate) {
  unlink_attached();
  const int out = send ? lanes_for(send->size(), lanes_out_) : 0;
  const int in = recv ? lanes_for(recv->size(), lanes_in_) : 0;
  const int used = std::max({out, in, 1});
  if (used == 1) return transfer_lane(lanes_[0], tag, send, recv, accumulate);
  return on_lanes(used, [&](int l) {
    auto slice = [l](auto data, int parts) {
      auto [b, e] = segment_bounds(data.size(), parts, l);
      return data.subspan(b, e - b);
    };
    std::span<const float> s;
    std::span<float> r;
    if (l < out) s = slice(*send, out);
    if (l < in) r = slice(*recv, in);
    return transfer_lane(lanes_[static_cast<std::size_t>(l)], tag, l < out ? &s : nullptr,
                         l < in ? &r : nullptr, accumulate);
  });
}

expected<void> shm_ring_link::on_lanes(int used, const std::function<expected<void>(int)>& fn) {
  if (!crew_ || crew_->helpers() < used - 1)
    crew_ = std::make_unique<lane_crew>(static_cast<int>(lanes_.size()) - 1);
  abort_.store(false, std::memory_order_relaxed);
  std::vector<expected<void>> results(static_cast<std::size_t>(used));
  crew_->run(used, [&](int l) {
    auto& res = results[static_cast<std::size_t>(l)];
    res = fn(l);
    if (!res) abort_.store(true, std::memory_order_release);
  });
  // The first failure, not a lane that stopped because of it.
  const expected<void>* first = nullptr;
  for (const auto& r : results)
    if (!r && (!first || (*first).err() == collective_errc::cancelled)) first = &r;
  return first ? *first : expected<void>{};
}

expected<void> shm_ring_link::transfer_lane(lane& l, const step_tag& tag, const std::span<const float>* send,
                                            std::span<float>* recv, bool accumulate) {
  sender tx = make_sender(tag, send);
  receiver rx = make_receiver(recv, accumulate);
  const auto start = opt_.clock.get().now();
  auto deadline = start + opt_.timeout;
  auto next_probe = start + std::chrono::milliseconds(5);
  while (!tx.done() || !rx.done()) {
    bool progressed = !tx.done() && tx.pump(*l.out);
    if (!rx.done()) {
      int r = rx.pump(*l.in, tag);
      if (r < 0) return rx.mismatch(tag);
      progressed |= r > 0;
    }
    if (progressed) continue;
    if (auto s = check_stall(l, tag, deadline, next_probe); !s) return s;
    if (!rx.done())
      l.in->wait_for_data(std::chrono::microseconds(tx.done() ? 250 : 100));
    else
      l.out->wait_for_space(std::chrono::microseconds(250));
  }
  return {};
}

}  // namespace troupe::collective
