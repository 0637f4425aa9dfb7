#include "shm/stream.hpp"

#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>

namespace troupe::collective::shm_detail {

namespace {

int open_pidfd(pid_t pid) {
  if (pid <= 0) return -1;
#ifdef SYS_pidfd_open
  return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
#else
  return -1;
#endif
}

bool pidfd_exited(int fd) {
  pollfd p{fd, POLLIN, 0};
  return ::poll(&p, 1, 0) > 0 && (p.revents & (POLLIN | POLLHUP)) != 0;
}
}  // namespace

error header_mismatch(const wire_header& hdr, const step_tag& tag, std::size_t floats) {
  auto part = [](std::uint64_t epoch, std::uint64_t op, std::uint32_t step, std::size_t n) {
    return "epoch " + std::to_string(epoch) + " op " + std::to_string(op) + " step " + std::to_string(step) +
           " of " + std::to_string(n) + " floats";
  };
  // The count too: a replica of another layout (its module file replaced while the job ran) sent the
  // same epoch, op and step, and the error read "expected X, got X".
  std::string why = "expected " + part(tag.epoch, tag.op, tag.step, floats) + ", got " +
                    part(hdr.epoch, hdr.op, hdr.step, hdr.floats);
  if (hdr.epoch == tag.epoch && hdr.op == tag.op && hdr.step == tag.step && hdr.floats != floats)
    why += " (the neighbour's model has another size: did its model file change while the job ran?)";
  return error(collective_errc::protocol, why);
}

error receiver::mismatch(const step_tag& tag) const {
  return header_mismatch(hdr, tag, out.size());
}

sender make_sender(const step_tag& tag, const std::span<const float>* send) {
  sender tx{{tag.epoch, tag.op, tag.step, static_cast<std::uint32_t>(send ? send->size() : 0)},
            send ? std::as_bytes(*send) : std::span<const std::byte>()};
  if (!send) tx.sent = tx.total();
  return tx;
}

receiver make_receiver(const std::span<float>* recv, bool accumulate) {
  std::span<float> none;
  receiver rx{recv ? *recv : none, accumulate};
  if (!recv) rx.hdr_got = sizeof(rx.hdr);
  return rx;
}

bool process_dead(pid_t pid) {
  if (pid <= 0) return false;
  if (::kill(pid, 0) != 0 && errno == ESRCH) return true;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string content;
  std::getline(stat, content);
  auto close = content.rfind(')');
  return close != std::string::npos && close + 2 < content.size() && content[close + 2] == 'Z';
}

peer_watch::peer_watch(pid_t pid, liveness* live, const node_id& node)
    : pid_(pid), pidfd_(open_pidfd(pid)), beacon_(live ? live->watch_node(node) : nullptr) {}

peer_watch::~peer_watch() {
  if (pidfd_ >= 0) ::close(pidfd_);
}

bool peer_watch::dead() const {
  if (beacon_ && beacon_->gone()) return true;
  return pidfd_ >= 0 ? pidfd_exited(pidfd_) : process_dead(pid_);
}

expected<std::unique_ptr<transport::shm_ring>> make_inbound_ring(const shm_link_options& o, int lane) {
  auto mine = shm_ring_link::ring_name(o.job, o.epoch, o.rank, lane);
  // Only this rank creates this name: anything there is a leftover of a killed incarnation.
  transport::shm_ring::remove(mine);
  if (lane == 0 && o.spare && *o.spare && (*o.spare)->capacity() >= o.capacity) {
    std::unique_ptr<transport::shm_ring> in;
    // Its pages not yet had are had now (a peer's write into one /dev/shm cannot give: its SIGBUS).
    if ((*o.spare)->populate_some(SIZE_MAX) && (*o.spare)->rename(mine)) in = std::move(*o.spare);
    o.spare->reset();  // used, or unusable
    if (in) return in;
  }
  // Every page reserved: a peer's write into a page /dev/shm cannot give is its SIGBUS.
  auto made = transport::shm_ring::create(mine, o.capacity, true);
  if (!made) return make_unexpected(collective_errc::setup, made.err().to_string());
  return std::move(*made);
}

expected<std::unique_ptr<transport::shm_ring>> open_next_lane(const shm_link_options& o, int lane) {
  auto name = shm_ring_link::ring_name(o.job, o.epoch, (o.rank + 1) % o.size, lane);
  auto r = transport::shm_ring::open(name, o.clock.get().now(), o.clock);
  if (r) return std::move(*r);
  if (r.err() == transport::shm_errc::timeout) return std::unique_ptr<transport::shm_ring>();
  return make_unexpected(collective_errc::setup, r.err().to_string());
}

expected<std::unique_ptr<transport::shm_ring>> open_next_ring(const shm_link_options& o,
                                                              troupe::clock::time_point deadline) {
  auto next = shm_ring_link::ring_name(o.job, o.epoch, (o.rank + 1) % o.size);
  auto next_beacon = o.live ? o.live->watch_node(o.next_node) : nullptr;
  for (;;) {
    // In slices: a membership change or the next rank's death is no event of /dev/shm.
    auto slice = std::min(deadline, o.clock.get().now() + std::chrono::milliseconds(2));
    auto out = transport::shm_ring::open(next, slice, o.clock);
    if (out) return out;
    if (!(out.err() == transport::shm_errc::timeout))
      return make_unexpected(collective_errc::setup, out.err().to_string());
    if (o.current_epoch && o.current_epoch->load(std::memory_order_acquire) != o.epoch)
      return make_unexpected(collective_errc::cancelled,
                             "epoch " + std::to_string(o.epoch) + " is over before /" + next + " appeared");
    if ((next_beacon && next_beacon->gone()) || process_dead(o.next_pid))
      return make_unexpected(collective_errc::peer_dead,
                             "pid " + std::to_string(o.next_pid) + " before /" + next + " appeared");
    if (o.clock.get().now() >= deadline)
      return make_unexpected(collective_errc::setup, out.err().to_string());
  }
}

}  // namespace troupe::collective::shm_detail
