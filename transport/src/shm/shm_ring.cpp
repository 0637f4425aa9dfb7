#include "troupe/transport/shm_ring.hpp"

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>

namespace troupe::transport {

namespace {
constexpr std::uint64_t magic = 0x74726f7570657368ull;  // "troupesh"
constexpr std::size_t header_bytes = 512;

std::size_t round_pow2(std::size_t v) {
  std::size_t p = 4096;
  while (p < v) p <<= 1;
  return p;
}

long futex(std::uint32_t* addr, int op, std::uint32_t val, const timespec* ts) {
  return syscall(SYS_futex, addr, op, val, ts, nullptr, 0);
}

error sys_error(const std::string& what, const std::string& name) {
  return error(shm_errc::system_error, what + " /" + name + ": " + std::strerror(errno));
}
class shm_category_impl final : public std::error_category {
 public:
  const char* name() const noexcept override { return "shm"; }
  std::string message(int c) const override {
    switch (static_cast<shm_errc>(c)) {
      case shm_errc::ok:
        return "ok";
      case shm_errc::system_error:
        return "shared-memory system call failed";
      case shm_errc::timeout:
        return "timed out";
    }
    return "unknown shm error " + std::to_string(c);
  }
};
}  // namespace

const std::error_category& shm_category() noexcept {
  static const shm_category_impl instance;
  return instance;
}

// Shared layout. head/tail are byte counters (never wrap in practice: 2^64 bytes); the futex words
// count publications so a sleeper never misses a wake-up between its check and its wait.
struct shm_ring::header {
  std::uint64_t magic;
  std::uint64_t capacity;
  std::atomic<std::uint32_t> attached;
  std::uint32_t populated;  // the creator allocated every page: the opener maps them all at once
  alignas(64) std::atomic<std::uint64_t> head;      // written by the producer
  alignas(64) std::atomic<std::uint64_t> tail;      // written by the consumer
  alignas(64) std::atomic<std::uint32_t> data_seq;  // bumped after head moves
  std::atomic<std::uint32_t> reader_waiting;
  alignas(64) std::atomic<std::uint32_t> space_seq;  // bumped after tail moves
  std::atomic<std::uint32_t> writer_waiting;
};
static_assert(sizeof(shm_ring::header) <= header_bytes);

shm_ring::shm_ring(std::string name, void* base, std::size_t mapped, bool creator)
    : name_(std::move(name)),
      base_(base),
      mapped_(mapped),
      hdr_(static_cast<header*>(base)),
      data_(static_cast<std::byte*>(base) + header_bytes),
      capacity_(hdr_->capacity),
      creator_(creator) {}

namespace {
expected<void> size_and_reserve(int fd, std::size_t total, std::size_t reserve, const std::string& name) {
  if (::ftruncate(fd, static_cast<off_t>(total)) != 0) return sys_error("ftruncate", name);
  int rc = 0;
  do rc = ::posix_fallocate(fd, 0, static_cast<off_t>(reserve));
  while (rc == EINTR);  // tmpfs gives up on a pending signal
  if (rc == 0) return {};
  errno = rc;
  return sys_error("allocate " + std::to_string(reserve) + " bytes of shared memory (is /dev/shm full?) for",
                   name);
}
}  // namespace

expected<std::unique_ptr<shm_ring>> shm_ring::create(const std::string& name, std::size_t capacity,
                                                     bool populate) {
  std::size_t cap = round_pow2(capacity);
  std::size_t total = header_bytes + cap;
  int fd = ::shm_open(("/" + name).c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) return sys_error("shm_open(create)", name);
  // Its pages reserved now (all, or the header's where the caller populates in slices): a full
  // /dev/shm is this error, not a SIGBUS at a first write, the creator's or its peer's (workers
  // died of it at each relaunch, 11 times, and failed their job).
  if (auto r = size_and_reserve(fd, total, populate ? total : header_bytes, name); !r) {
    ::close(fd);
    ::shm_unlink(("/" + name).c_str());
    return r.err();
  }
  void* base =
      ::mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED | (populate ? MAP_POPULATE : 0), fd, 0);
  ::close(fd);
  if (base == MAP_FAILED) {
    auto e = sys_error("mmap", name);
    ::shm_unlink(("/" + name).c_str());
    return e;
  }
  auto* h = new (base) header{};
  h->capacity = cap;
  h->populated = populate ? 1 : 0;
  std::atomic_thread_fence(std::memory_order_release);
  std::atomic_ref<std::uint64_t>(h->magic).store(magic, std::memory_order_release);
  return std::unique_ptr<shm_ring>(new shm_ring(name, base, total, true));
}

namespace {
// Maps the ring `name` into `base` if its creator has made it whole: false when it does not exist
// yet or its creator has not written its magic yet.
expected<bool> try_open(const std::string& name, void*& base, std::size_t& total) {
  int fd = ::shm_open(("/" + name).c_str(), O_RDWR, 0600);
  if (fd < 0) {
    if (errno == ENOENT) return false;
    return sys_error("shm_open", name);
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || static_cast<std::size_t>(st.st_size) <= header_bytes) {
    ::close(fd);
    return false;
  }
  total = static_cast<std::size_t>(st.st_size);
  base = ::mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (base == MAP_FAILED) return sys_error("mmap", name);
  auto* h = static_cast<shm_ring::header*>(base);
  if (std::atomic_ref<std::uint64_t>(h->magic).load(std::memory_order_acquire) == magic &&
      h->capacity + header_bytes == total)
    return true;
  ::munmap(base, total);
  return false;
}

}  // namespace

expected<std::unique_ptr<shm_ring>> shm_ring::open(const std::string& name, clock::time_point deadline,
                                                   clock& clk) {
  for (;;) {
    void* base = nullptr;
    std::size_t total = 0;
    auto r = try_open(name, base, total);
    if (!r) return std::move(r).err();
    if (*r) {
      auto* h = static_cast<header*>(base);
      // Pages the creator allocated are mapped now, not faulted in one by one by the first writes
      // (nothing is allocated here; an unpopulated ring is left to fault, as populating it here
      // would allocate all of it on this side).
      if (h->populated) ::madvise(base, total, MADV_POPULATE_WRITE);
      h->attached.store(1, std::memory_order_release);
      return std::unique_ptr<shm_ring>(new shm_ring(name, base, total, false));
    }
    const auto now = clk.now();
    if (now >= deadline)
      return make_unexpected(shm_errc::timeout, "shared-memory ring /" + name + " did not appear");
    // Must poll: the ring is another process's, and becomes whole by a store into the shared
    // mapping (its magic), which nothing signals. inotify on /dev/shm would tell the name's creation,
    // but an inotify instance costs its closer an RCU grace period (~20 ms): a ring link took 20-29 ms
    // instead of 1-2 ms with one per open (bench/recovery, issue #45). A 200 us pause on the clock.
    clk.sleep_for(std::min<clock::duration>(deadline - now, std::chrono::microseconds(200)));
  }
}

void shm_ring::remove(const std::string& name) noexcept {
  ::shm_unlink(("/" + name).c_str());
}

expected<void> shm_ring::rename(const std::string& name) {
  if (!creator_ || unlinked_ || opened())
    return make_unexpected(shm_errc::system_error,
                           "ring /" + name_ + ": only its creator renames it, before it is opened");
  if (::rename(("/dev/shm/" + name_).c_str(), ("/dev/shm/" + name).c_str()) != 0)
    return sys_error("rename", name);
  name_ = name;
  return {};
}

shm_ring::~shm_ring() {
  if (creator_ && !unlinked_) ::shm_unlink(("/" + name_).c_str());
  ::munmap(base_, mapped_);
}

std::optional<std::size_t> shm_ring::populate_some(std::size_t max_bytes) noexcept {
  if (!creator_ || hdr_->populated || opened()) return 0;
  std::size_t n = std::min(max_bytes, capacity_ - populated_);
  std::byte* p = data_ + populated_;
  if (n > 0 && ::madvise(p, n, MADV_POPULATE_WRITE) != 0) {
    // A page that cannot be had (/dev/shm full: EFAULT, "a SIGBUS would have been generated"; or
    // ENOMEM): the ring is not to be used. Touching the pages then was the SIGBUS.
    if (errno != EINVAL) return std::nullopt;
    // Kernels before 5.14: touch every page (nobody else has the ring yet, nothing is in it).
    volatile std::byte* v = p;
    for (std::size_t i = 0; i < n; i += 4096) v[i] = std::byte{0};
  }
  populated_ += n;
  if (populated_ == capacity_) hdr_->populated = 1;
  return capacity_ - populated_;
}

bool shm_ring::opened() const noexcept {
  return hdr_->attached.load(std::memory_order_acquire) != 0;
}

void shm_ring::unlink_when_attached(bool force) {
  if (!creator_ || unlinked_) return;
  if (force || hdr_->attached.load(std::memory_order_acquire)) {
    ::shm_unlink(("/" + name_).c_str());
    unlinked_ = true;
  }
}

std::size_t shm_ring::writable() const noexcept {
  return capacity_ -
         (hdr_->head.load(std::memory_order_relaxed) - hdr_->tail.load(std::memory_order_acquire));
}
std::size_t shm_ring::readable() const noexcept {
  return hdr_->head.load(std::memory_order_acquire) - hdr_->tail.load(std::memory_order_relaxed);
}

std::size_t shm_ring::write_some(std::span<const std::byte> data) noexcept {
  std::uint64_t head = hdr_->head.load(std::memory_order_relaxed);
  std::size_t n = std::min(data.size(), writable());
  if (n == 0) return 0;
  std::size_t pos = head & (capacity_ - 1);
  std::size_t first = std::min(n, capacity_ - pos);
  std::memcpy(data_ + pos, data.data(), first);
  if (n > first) std::memcpy(data_, data.data() + first, n - first);
  commit(n);
  return n;
}

std::span<std::byte> shm_ring::reserve() const noexcept {
  std::uint64_t head = hdr_->head.load(std::memory_order_relaxed);
  std::size_t pos = head & (capacity_ - 1);
  return {data_ + pos, std::min(writable(), capacity_ - pos)};
}

void shm_ring::commit(std::size_t n) noexcept {
  hdr_->head.store(hdr_->head.load(std::memory_order_relaxed) + n, std::memory_order_release);
  hdr_->data_seq.fetch_add(1, std::memory_order_release);
  if (hdr_->reader_waiting.load(std::memory_order_seq_cst))
    futex(reinterpret_cast<std::uint32_t*>(&hdr_->data_seq), FUTEX_WAKE, 1, nullptr);
}

std::span<const std::byte> shm_ring::peek() const noexcept {
  std::uint64_t tail = hdr_->tail.load(std::memory_order_relaxed);
  std::size_t avail = readable();
  std::size_t pos = tail & (capacity_ - 1);
  return {data_ + pos, std::min(avail, capacity_ - pos)};
}

void shm_ring::consume(std::size_t n) noexcept {
  hdr_->tail.fetch_add(n, std::memory_order_release);
  hdr_->space_seq.fetch_add(1, std::memory_order_release);
  if (hdr_->writer_waiting.load(std::memory_order_seq_cst))
    futex(reinterpret_cast<std::uint32_t*>(&hdr_->space_seq), FUTEX_WAKE, 1, nullptr);
}

std::size_t shm_ring::read_some(std::span<std::byte> out) noexcept {
  std::size_t done = 0;
  while (done < out.size()) {
    auto region = peek();
    std::size_t n = std::min(region.size(), out.size() - done);
    if (n == 0) break;
    std::memcpy(out.data() + done, region.data(), n);
    consume(n);
    done += n;
  }
  return done;
}

bool shm_ring::wait_on(std::uint32_t* word, bool want_space, std::chrono::microseconds timeout) noexcept {
  auto ready = [&] { return want_space ? writable() > 0 : readable() > 0; };
  for (int i = 0; i < 256; ++i) {
    if (ready()) return true;
    __builtin_ia32_pause();
  }
  auto& waiting = want_space ? hdr_->writer_waiting : hdr_->reader_waiting;
  std::uint32_t seq = std::atomic_ref<std::uint32_t>(*word).load(std::memory_order_acquire);
  waiting.store(1, std::memory_order_seq_cst);
  if (ready()) {
    waiting.store(0, std::memory_order_relaxed);
    return true;
  }
  timespec ts{static_cast<time_t>(timeout.count() / 1'000'000),
              static_cast<long>(timeout.count() % 1'000'000) * 1000};
  futex(word, FUTEX_WAIT, seq, &ts);
  waiting.store(0, std::memory_order_relaxed);
  return ready();
}

bool shm_ring::wait_for_space(std::chrono::microseconds timeout) noexcept {
  return wait_on(reinterpret_cast<std::uint32_t*>(&hdr_->space_seq), true, timeout);
}
bool shm_ring::wait_for_data(std::chrono::microseconds timeout) noexcept {
  return wait_on(reinterpret_cast<std::uint32_t*>(&hdr_->data_seq), false, timeout);
}

}  // namespace troupe::transport
