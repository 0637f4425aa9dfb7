#include "troupe/collective/shm/link.hpp"

#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include "troupe/transport/shm_ring.hpp"

namespace troupe::collective {

namespace {
using steady = std::chrono::steady_clock;

// Every message on a ring: this header, then `floats` float32 values. 24 bytes keeps every offset
// a multiple of 4, so a float never straddles the wrap point.
struct wire_header {
  std::uint64_t epoch;
  std::uint64_t op;
  std::uint32_t step;
  std::uint32_t floats;
};
static_assert(sizeof(wire_header) == 24);

// A pid that is gone, or a zombie nobody reaped yet, is dead.
bool process_dead(pid_t pid) {
  if (pid <= 0) return false;
  if (::kill(pid, 0) != 0 && errno == ESRCH) return true;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string content;
  std::getline(stat, content);
  auto close = content.rfind(')');
  return close != std::string::npos && close + 2 < content.size() && content[close + 2] == 'Z';
}

// A pidfd (Linux >= 5.3) polls readable once the process has exited, before it is reaped.
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

// Streams one message (header + payload) into a ring, a piece at a time.
struct sender {
  wire_header hdr;
  std::span<const std::byte> payload;
  std::size_t sent = 0;  // over header + payload
  std::size_t total() const { return sizeof(hdr) + payload.size(); }
  bool done() const { return sent == total(); }
  bool pump(transport::shm_ring& ring) {
    std::size_t before = sent;
    while (!done()) {
      std::span<const std::byte> src =
          sent < sizeof(hdr) ? std::span<const std::byte>(reinterpret_cast<const std::byte*>(&hdr) + sent,
                                                          sizeof(hdr) - sent)
                             : payload.subspan(sent - sizeof(hdr));
      std::size_t n = ring.write_some(src);
      if (n == 0) break;
      sent += n;
    }
    return sent != before;
  }
};

// Reads one message, checking the header, reducing or copying the payload straight out of the ring.
struct receiver {
  std::span<float> out;
  bool accumulate;
  wire_header hdr{};
  std::size_t hdr_got = 0;
  std::size_t floats_got = 0;
  bool done() const { return hdr_got == sizeof(hdr) && floats_got == out.size(); }
  // Returns -1 on a protocol error, else whether it progressed.
  int pump(transport::shm_ring& ring, const step_tag& tag) {
    bool progressed = false;
    if (hdr_got < sizeof(hdr)) {
      hdr_got += ring.read_some({reinterpret_cast<std::byte*>(&hdr) + hdr_got, sizeof(hdr) - hdr_got});
      progressed = hdr_got > 0;
      if (hdr_got < sizeof(hdr)) return progressed;
      if (hdr.epoch != tag.epoch || hdr.op != tag.op || hdr.step != tag.step || hdr.floats != out.size())
        return -1;
    }
    while (floats_got < out.size()) {
      auto region = ring.peek();
      std::size_t n = std::min(region.size() / sizeof(float), out.size() - floats_got);
      if (n == 0) break;
      const float* src = reinterpret_cast<const float*>(region.data());
      float* dst = out.data() + floats_got;
      if (accumulate) {
        for (std::size_t i = 0; i < n; ++i) dst[i] += src[i];
      } else {
        std::memcpy(dst, src, n * sizeof(float));
      }
      ring.consume(n * sizeof(float));
      floats_got += n;
      progressed = true;
    }
    return progressed;
  }
};
}  // namespace

std::string shm_ring_link::ring_name(const std::string& job, std::uint64_t epoch, int rank) {
  return "troupe-" + job + "-e" + std::to_string(epoch) + "-r" + std::to_string(rank);
}

shm_ring_link::shm_ring_link(shm_link_options o, std::unique_ptr<transport::shm_ring> in,
                             std::unique_ptr<transport::shm_ring> out)
    : opt_(std::move(o)), in_(std::move(in)), out_(std::move(out)) {
  pidfd_[0] = open_pidfd(opt_.prev_pid);
  pidfd_[1] = opt_.next_pid == opt_.prev_pid ? -1 : open_pidfd(opt_.next_pid);
  if (opt_.live) {
    beacon_[0] = opt_.live->watch_node(opt_.prev_node);
    if (opt_.next_node != opt_.prev_node) beacon_[1] = opt_.live->watch_node(opt_.next_node);
  }
}

shm_ring_link::~shm_ring_link() {
  for (int fd : pidfd_)
    if (fd >= 0) ::close(fd);
}

bool shm_ring_link::neighbour_dead(pid_t& which) const {
  const pid_t pids[2] = {opt_.prev_pid, opt_.next_pid};
  for (int i = 0; i < 2; ++i)
    if (beacon_[i] && beacon_[i]->gone()) {
      which = pids[i];
      return true;
    }
  for (int i = 0; i < 2; ++i) {
    bool dead =
        pidfd_[i] >= 0 ? pidfd_exited(pidfd_[i]) : (i == 0 || pids[1] != pids[0]) && process_dead(pids[i]);
    if (dead) {
      which = pids[i];
      return true;
    }
  }
  return false;
}

expected<std::unique_ptr<shm_ring_link>> shm_ring_link::connect(const shm_link_options& o) {
  if (o.size < 2 || o.rank < 0 || o.rank >= o.size)
    return make_unexpected(collective_errc::setup, "ring of size " + std::to_string(o.size) + ", rank " +
                                                       std::to_string(o.rank) + ": needs 2+ ranks");
  auto deadline = steady::now() + o.timeout;
  auto mine = ring_name(o.job, o.epoch, o.rank);
  // Only this rank creates this name: anything there is a leftover of a killed incarnation.
  transport::shm_ring::remove(mine);
  std::unique_ptr<transport::shm_ring> in;
  if (o.spare && *o.spare && (*o.spare)->capacity() >= o.capacity) {
    if (auto r = (*o.spare)->rename(mine); r) in = std::move(*o.spare);
    o.spare->reset();  // used, or unusable
  }
  if (!in) {
    auto made = transport::shm_ring::create(mine, o.capacity);
    if (!made) return make_unexpected(collective_errc::setup, made.err().to_string());
    in = std::move(*made);
  }
  // Wait for the next rank's ring in short slices, so that a membership change (the ring this
  // rendezvous is for will never form) or a dead neighbour ends the wait at once.
  auto next = ring_name(o.job, o.epoch, (o.rank + 1) % o.size);
  auto next_beacon = o.live ? o.live->watch_node(o.next_node) : nullptr;
  expected<std::unique_ptr<transport::shm_ring>> out = make_unexpected(collective_errc::setup, "");
  for (;;) {
    auto slice = std::min(deadline, steady::now() + std::chrono::milliseconds(2));
    out = transport::shm_ring::open(next, slice);
    if (out) break;
    if (!(out.err() == transport::shm_errc::timeout))
      return make_unexpected(collective_errc::setup, out.err().to_string());
    if (o.current_epoch && o.current_epoch->load(std::memory_order_acquire) != o.epoch)
      return make_unexpected(collective_errc::cancelled,
                             "epoch " + std::to_string(o.epoch) + " is over before /" + next + " appeared");
    if ((next_beacon && next_beacon->gone()) || process_dead(o.next_pid))
      return make_unexpected(collective_errc::peer_dead,
                             "pid " + std::to_string(o.next_pid) + " before /" + next + " appeared");
    if (steady::now() >= deadline) return make_unexpected(collective_errc::setup, out.err().to_string());
  }
  in->unlink_when_attached();
  (*out)->unlink_when_attached();
  return std::unique_ptr<shm_ring_link>(new shm_ring_link(o, std::move(in), std::move(*out)));
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
  bool cheap = (opt_.prev_pid <= 0 || pidfd_[0] >= 0) &&
               (opt_.next_pid <= 0 || opt_.next_pid == opt_.prev_pid || pidfd_[1] >= 0);
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
  sender tx{{tag.epoch, tag.op, tag.step, static_cast<std::uint32_t>(send ? send->size() : 0)},
            send ? std::as_bytes(*send) : std::span<const std::byte>()};
  if (!send) tx.sent = tx.total();
  std::span<float> none;
  receiver rx{recv ? *recv : none, accumulate};
  if (!recv) rx.hdr_got = sizeof(rx.hdr);
  auto deadline = steady::now() + opt_.timeout;
  auto next_probe = steady::now() + std::chrono::milliseconds(5);
  while (!tx.done() || !rx.done()) {
    bool progressed = !tx.done() && tx.pump(*out_);
    if (!rx.done()) {
      int r = rx.pump(*in_, tag);
      if (r < 0)
        return make_unexpected(collective_errc::protocol,
                               "expected epoch " + std::to_string(tag.epoch) + " op " +
                                   std::to_string(tag.op) + " step " + std::to_string(tag.step) +
                                   ", got epoch " + std::to_string(rx.hdr.epoch) + " op " +
                                   std::to_string(rx.hdr.op) + " step " + std::to_string(rx.hdr.step));
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
