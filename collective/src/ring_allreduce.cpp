#include "troupe/collective/ring.hpp"

namespace troupe::collective {

namespace {
class collective_category_impl final : public std::error_category {
 public:
  const char* name() const noexcept override { return "collective"; }
  std::string message(int c) const override {
    switch (static_cast<collective_errc>(c)) {
      case collective_errc::ok:
        return "ok";
      case collective_errc::timeout:
        return "timed out waiting for a ring neighbour";
      case collective_errc::cancelled:
        return "membership changed during the collective";
      case collective_errc::peer_dead:
        return "ring neighbour died";
      case collective_errc::protocol:
        return "ring neighbour sent unexpected data";
      case collective_errc::setup:
        return "ring setup failed";
    }
    return "unknown collective error " + std::to_string(c);
  }
};
}  // namespace

const std::error_category& collective_category() noexcept {
  static const collective_category_impl instance;
  return instance;
}

std::pair<std::size_t, std::size_t> segment_bounds(std::size_t n, int parts, int index) {
  std::size_t p = static_cast<std::size_t>(parts), i = static_cast<std::size_t>(index);
  std::size_t base = n / p, extra = n % p;
  std::size_t begin = i * base + std::min(i, extra);
  return {begin, begin + base + (i < extra ? 1 : 0)};
}

expected<void> ring_allreduce(ring_link& link, int rank, int size, std::span<float> data, std::uint64_t epoch,
                              std::uint64_t op) {
  if (size <= 1) return {};
  if (auto own = link.own_allreduce(rank, size, data, epoch, op)) return *own;
  return ring_allreduce_exchanges(link, rank, size, data, epoch, op);
}

expected<void> ring_allreduce_exchanges(ring_link& link, int rank, int size, std::span<float> data,
                                        std::uint64_t epoch, std::uint64_t op) {
  if (size <= 1) return {};
  auto seg = [&](int i) {
    auto [b, e] = segment_bounds(data.size(), size, ((i % size) + size) % size);
    return data.subspan(b, e - b);
  };
  std::uint32_t step = 0;
  // Reduce-scatter: after n-1 steps rank r holds the full sum of segment r+1.
  for (int s = 0; s < size - 1; ++s, ++step) {
    if (auto r = link.exchange({epoch, op, step}, seg(rank - s), seg(rank - s - 1), true); !r) return r;
  }
  // Allgather: pass the reduced segments around.
  for (int s = 0; s < size - 1; ++s, ++step) {
    if (auto r = link.exchange({epoch, op, step}, seg(rank - s + 1), seg(rank - s), false); !r) return r;
  }
  return {};
}

expected<void> ring_broadcast(ring_link& link, int rank, int size, std::span<float> data, int root,
                              std::uint64_t epoch, std::uint64_t op) {
  if (size <= 1) return {};
  step_tag tag{epoch, op, 0};
  if (rank != root)
    if (auto r = link.recv(tag, data); !r) return r;
  if ((rank + 1) % size != root)
    if (auto r = link.send(tag, data); !r) return r;
  return {};
}

}  // namespace troupe::collective
