// An in-process ring of N ranks for the ring strategies' tests and benches: each rank's
// ring_session (rank_ring) sums into one shared buffer (shared_ring) under a mutex; the last rank to
// arrive publishes the sum to all. A rank that waits 20 s for the others gets an io_error.
#pragma once

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <span>
#include <vector>

#include "troupe/collective/ring_session.hpp"
#include "troupe/core/error.hpp"

namespace troupe::testing {

struct shared_ring {
  explicit shared_ring(int n) : size(n) {}
  int size;
  std::mutex mu;
  std::condition_variable cv;
  std::vector<float> acc, result;
  int arrived = 0;
  std::uint64_t generation = 0;

  expected<void> allreduce(std::span<float> d) {
    std::unique_lock lk(mu);
    if (arrived == 0) acc.assign(d.size(), 0.0f);
    if (acc.size() != d.size())
      return make_unexpected(core_errc::invalid_argument, "allreduce of different sizes");
    for (std::size_t i = 0; i < d.size(); ++i) acc[i] += d[i];
    std::uint64_t mine = generation;
    if (++arrived == size) {
      result = acc;
      arrived = 0;
      ++generation;
      cv.notify_all();
    } else if (!cv.wait_for(lk, std::chrono::seconds(20), [&] { return generation != mine; })) {
      return make_unexpected(core_errc::io_error, "fake ring: a rank never came");
    }
    std::copy(result.begin(), result.end(), d.begin());
    return {};
  }
};

// Rank `rank` of `r`, at ring epoch `epoch`; fresh on its first ensure() and after reset(). A ring
// of one sums and broadcasts nothing.
class rank_ring final : public collective::ring_session {
 public:
  rank_ring(shared_ring& r, int rank, std::uint64_t epoch = 5) : r_(r), rank_(rank), epoch_(epoch) {}
  expected<info> ensure() override {
    info i{rank_, r_.size, epoch_, fresh_};
    fresh_ = false;
    return i;
  }
  expected<void> allreduce(std::span<float> d) override {
    if (r_.size == 1) return {};
    return r_.allreduce(d);
  }
  expected<void> broadcast(std::span<float> d, int root) override {
    if (r_.size == 1) return {};
    if (rank_ != root) std::fill(d.begin(), d.end(), 0.0f);
    return r_.allreduce(d);
  }
  void reset() override { fresh_ = true; }

 private:
  shared_ring& r_;
  int rank_;
  std::uint64_t epoch_;
  bool fresh_ = true;
};

}  // namespace troupe::testing
