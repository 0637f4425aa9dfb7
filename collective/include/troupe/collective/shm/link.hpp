// ring_link between ranks on one machine, over two shared-memory rings: the one this rank creates
// (written by the previous rank) and the next rank's (written by this one). Ring names carry the
// job, epoch and rank, so rings of different epochs never mix.
//
// Fused: a ring all on one host (all_on_host) runs a large allreduce as a pipeline of chunks
// (own_allreduce, shm/pipeline.cpp) that sums what it receives straight into the next rank's ring.
//
// Lanes: one thread copies and sums at one core's memory bandwidth, which bounds a large
// allreduce (each byte goes through a ring and the receiver's buffer several times). A rank may
// make more inbound rings (lanes 1..n-1, made before lane 0, so a rank that finds lane 0 finds them
// all); the previous rank counts them when it links. A transfer of at least 2 x lane_min_bytes is
// then split into one slice per lane, each moved by a thread of its own over its lane's rings
// (NCCL's channels). Small transfers use lane 0 only, on the caller's thread, as before.
#pragma once

#include <sys/types.h>
#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "troupe/collective/liveness.hpp"
#include "troupe/collective/ring.hpp"
#include "troupe/core/clock.hpp"
#include "troupe/core/ids.hpp"

namespace troupe::transport {
class shm_ring;
}

namespace troupe::collective {

namespace shm_detail {
class peer_watch;
class lane_crew;
struct fused_op;
}  // namespace shm_detail

struct shm_link_options {
  std::string job;          // job id (part of the ring names)
  std::uint64_t epoch = 0;  // membership epoch of this ring
  int rank = 0, size = 1;
  pid_t prev_pid = 0, next_pid = 0;           // neighbours' pids, watched while waiting (0: not watched)
  std::size_t capacity = 4 << 20;             // bytes per ring
  std::chrono::milliseconds timeout{10'000};  // per exchange, and for the rendezvous
  // When set and different from `epoch`, operations fail with `cancelled` (membership changed).
  const std::atomic<std::uint64_t>* current_epoch = nullptr;
  // When set: the neighbours' liveness (liveness.hpp), a faster death notice than their pids. Used
  // during connect() and, for the watches it opens, while the link lives.
  liveness* live = nullptr;
  node_id prev_node{}, next_node{};
  // A ring made ahead (populated, of `capacity`) that becomes this rank's inbound ring instead of a
  // fresh one; taken (reset) when used. A joining worker's first ring then takes no page faults
  // while a partner writes the replicas' state into it.
  std::unique_ptr<transport::shm_ring>* spare = nullptr;
  // Inbound rings this rank makes, each with a thread of its own during a large transfer (1: no
  // threads; at most max_lanes). The next rank's count is its own (counted at connect()).
  int lanes = 1;
  // Slice of a large transfer per lane: a transfer of f floats uses min(lanes, 4f / lane_min_bytes)
  // lanes. Every rank of a ring must use the same value (both ends of a ring split alike).
  std::size_t lane_min_bytes = 1 << 20;
  // Every rank of this ring links over shared memory (a ring on one host): an allreduce of at least
  // fused_min_bytes then runs as a pipeline of chunks that sums what it receives straight into the
  // next rank's ring (NCCL's recvReduceSend), on the lanes every rank of the ring has. Every rank of
  // a ring must use the same values (and the same `capacity`, which sets the chunk).
  // (16 MiB: on the dev VM the pipeline was 1.2-1.3x the exchanges at 64 MB and 32 MB, mixed at
  // 16 MB, and behind them at 4-8 MB, where the data stays in the caches.)
  bool all_on_host = false;
  std::size_t fused_min_bytes = 16 << 20;
  // The pipeline's chunk; 0: 256 KiB on 2+ lanes, 1 MiB on one. Never more than a quarter of
  // `capacity` (the rings must hold 4 chunks). Every rank of a ring the same.
  std::size_t fused_chunk_bytes = 0;
  // Timeouts and deadlines are measured on it (a manual clock in tests: a wait fails with `timeout`
  // once that clock passes its deadline, looking at it at least every few milliseconds).
  std::reference_wrapper<troupe::clock> clock{troupe::clock::system()};
};

class shm_ring_link final : public ring_link {
 public:
  static constexpr int max_lanes = 16;
  // Creates this rank's inbound ring and opens the next rank's (waiting up to options.timeout).
  static expected<std::unique_ptr<shm_ring_link>> connect(const shm_link_options& options);
  ~shm_ring_link() override;

  expected<void> exchange(const step_tag& tag, std::span<const float> send, std::span<float> recv,
                          bool accumulate) override;
  expected<void> send(const step_tag& tag, std::span<const float> data) override;
  expected<void> recv(const step_tag& tag, std::span<float> data) override;
  std::optional<expected<void>> own_allreduce(int rank, int size, std::span<float> data, std::uint64_t epoch,
                                              std::uint64_t op) override;

  // Lane 0's name carries no lane ("...-r<rank>"), so the rank's first ring is found as ever.
  static std::string ring_name(const std::string& job, std::uint64_t epoch, int rank, int lane = 0);
  // Lanes this rank reads from (its own rings) and writes to (the next rank's).
  int lanes_in() const noexcept { return lanes_in_; }
  int lanes_out() const noexcept { return lanes_out_; }
  // Whether the previous rank has opened this rank's inbound rings (it is done linking).
  bool prev_linked() const noexcept;
  // Whether `rank`'s inbound ring of `epoch` exists (that rank is linking, or linked and its
  // neighbour not attached yet).
  static bool ring_exists(const std::string& job, std::uint64_t epoch, int rank);

 private:
  // One lane: this rank's inbound ring and the next rank's (either null past that side's count),
  // and the watches on the neighbours its thread checks while it waits (each lane's own: a watch is
  // used by one thread at a time).
  struct lane {
    std::unique_ptr<transport::shm_ring> in, out;
    std::unique_ptr<shm_detail::peer_watch> watch[2];  // prev, next (next null when it is prev)
  };
  shm_ring_link(shm_link_options o, std::vector<lane> lanes, int lanes_in, int lanes_out);
  expected<void> check_stall(const lane& l, const step_tag& tag, troupe::clock::time_point deadline,
                             troupe::clock::time_point& next_probe) const;
  // A neighbour that has exited (a zombie included); pidfds make this one cheap poll(2), so it runs
  // at every stall: a SIGKILLed neighbour ends a wait within one wait slice.
  static bool neighbour_dead(const lane& l, pid_t& which);
  // Unlinks the names of this rank's inbound rings that the previous rank has opened.
  void unlink_attached();
  expected<void> transfer(const step_tag& tag, const std::span<const float>* send, std::span<float>* recv,
                          bool accumulate);
  expected<void> transfer_lane(lane& l, const step_tag& tag, const std::span<const float>* send,
                               std::span<float>* recv, bool accumulate);
  // Lanes a transfer of `floats` uses on a side with `lanes` rings.
  int lanes_for(std::size_t floats, int lanes) const noexcept;
  // Runs fn(lane) for lanes 0..used-1, lane 0 on this thread, the others on the crew; the first
  // failure (not a lane it stopped), once all have returned.
  expected<void> on_lanes(int used, const std::function<expected<void>(int)>& fn);
  // own_allreduce's pipeline over one lane's rings, of that lane's slice of the data, one of `lanes`
  // (pipeline.cpp).
  expected<void> fused_lane(lane& l, std::span<float> data, int lanes, std::uint64_t epoch, std::uint64_t op);
  // One op of the pipeline on lane `l`: until its header and payload are through, or it fails.
  expected<void> run_fused_op(lane& l, shm_detail::fused_op& f) const;
  // The pipeline's chunk when it runs on `lanes` lanes (equal on every rank: the lanes are agreed).
  std::size_t fused_chunk_bytes(int lanes) const noexcept;
  int ring_lanes_ = 0;  // lanes every rank of the ring has (agreed at the first fused allreduce; 0: not yet)
  shm_link_options opt_;
  std::vector<lane> lanes_;  // max(lanes_in_, lanes_out_) of them
  int lanes_in_ = 1, lanes_out_ = 1;
  std::unique_ptr<shm_detail::lane_crew> crew_;  // the threads of lanes 1..; made at the first large transfer
  std::atomic<bool> abort_{false};               // a lane failed: the others of its transfer stop
};

}  // namespace troupe::collective
