// Helpers for strategies that keep a full model replica on every worker (allreduce, local SGD, the
// GPU worker's allreduce): the round's vote, the vote on the most trained replica, resynchronising
// the replicas after a ring is (re)built, packing parameters and optimizer state into one flat
// buffer for a collective, and dropping a round.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "troupe/actors/strategy.hpp"

namespace troupe::actors::replicas {

// The vote every rank appends to a synchronous round's collective buffer: its samples (its
// weight), whether its data is exhausted, and 1 for itself. Summed by the ring it reads as the
// round's samples, how many ranks ran out of data and how many took part.
// A synchronous step's share of a full one: `samples` over a full batch from each of `ranks`, at
// most 1 (the multiple of the learning rate it is taken at).
double step_share(double samples, double ranks, std::size_t batch_size);

// A count (a ring's steps or rounds) in the first two floats of `f`, 24 bits each, for a collective
// or a checkpoint's durable state: one float is exact only to 2^24. unpack_count reads it back; a
// value no pack_count writes (negative, not a number) reads as 0.
void pack_count(std::uint64_t n, std::span<float> f);
std::uint64_t unpack_count(std::span<const float> f);

// The node's clock (the system clock when the context has none), and its time in seconds (the step
// and sync times the goodput controller measures).
troupe::clock& clock_of(worker_context& ctx);
double seconds_now(worker_context& ctx);

struct round_vote {
  static constexpr std::size_t floats = 3;
  // This rank's vote into the first `floats` of `at`.
  static void cast(std::span<float> at, float samples, bool exhausted);
  // The sum read from the first `floats` of `at`, after the allreduce.
  explicit round_vote(std::span<const float> at);
  bool all_exhausted() const { return exhausted == ranks; }
  // A round without samples: `finished` when every rank's data is exhausted, else `idle`.
  step_result::kind empty_round() const;
  // The round's share of a full step, for the optimizer's learning rate: its samples over a full
  // batch from every rank (at most 1). A round where some ranks had no data (the tail of an epoch,
  // where one worker may train the last task alone for a few rounds) is a smaller step; taken at the
  // full rate, a few such rounds of 64 samples left the job's final model 0.02 less accurate.
  double lr_scale(std::size_t batch_size) const;

  float samples = 0, exhausted = 0, ranks = 0;
};

// The rank whose replica has taken the most optimizer steps (the lowest on ties), agreed by an
// allreduce of every rank's `my_steps`, and its step count. Not simply rank 0: ranks follow node
// names, so a fresh replacement of worker-0 would be rank 0 and its initial weights would
// overwrite the trained replicas.
// The replica's optimizer steps: the most of its slot sets' counters (every set counts every step it
// applied; a replica synchronised from another took its counters). What a ring checkpoint's meta
// calls its step.
std::uint64_t optimizer_steps(trainer_backend& b);

struct most_trained {
  int rank = 0;
  std::uint64_t steps = 0;
};
// On `ring`, the ring the caller's step started on: no ensure() here, which could build a newer
// ring mid-way and leave it unsynchronised (its `fresh` seen by no one); a collective of a ring
// that the membership replaced fails, the round is dropped, and the next step syncs the new ring.
expected<most_trained> vote_most_trained(worker_context& ctx, const ring_session::info& ring,
                                         std::uint64_t my_steps);

// The host model's parameters from rank `src` to every replica, span by span along the ring (the
// source goes on to its next step while the others read, when the ring's capacity holds it).
// Adds the floats copied to `floats`.
expected<void> broadcast_parameters(worker_context& ctx, int src, std::size_t& floats);

// After a ring is (re)built: the most trained replica's parameters (and, with_optimizer, the host
// trainer's optimizer slots and step counters, last) to every replica. A ring of one skips it. The
// other ranks call ctx.replica_overwritten first (set: offered_batch_stale when it says so).
// `buf` is scratch, sized by reserve_state. On `ring`, as vote_most_trained. `extra`: the strategy's
// own state (allreduce's goodput controller), which every rank packed into it: the source's goes to
// every rank, last; each rank then reads it back from `extra` (the source too, so all hold the same).
expected<void> sync_from_most_trained(worker_context& ctx, const ring_session::info& ring,
                                      bool with_optimizer, std::vector<float>& buf,
                                      std::span<float> extra = {});
// When no replica of the ring has trained (`steps`, the vote's, is 0: a resumed job's first ring,
// or a fresh job's), the job's latest ring checkpoint (ctx.store) into this replica, if there is
// one; the sync that follows hands it to the others. A checkpoint that cannot be restored is
// logged and training starts from the initial weights. `extra` (as sync_from_most_trained's): the
// strategy's state the checkpoint kept (strategy::durable_state()) is copied into it when it has
// extra's size and finite values; otherwise `extra` stays as it was (logged when the checkpoint kept
// one that does not fit: the strategy starts its own over).
// Returns the steps the replica holds after it: `steps` when it had trained, else the restored
// checkpoint's step (0: none, or one that could not be restored: the initial weights).
std::uint64_t restore_if_untrained(worker_context& ctx, std::uint64_t steps, std::span<float> extra = {});
// No replica had trained: they start again from the ring's checkpoint of `step` (0: none). The
// worker's held tasks with rows kept at a later step lost them (worker_context::replicas_restarted):
// sets ctx.offered_batch_stale when the batch offered to this step is one of them.
void restarted(worker_context& ctx, std::uint64_t step);

// Sizes the optimizer slots (with_optimizer) ahead, and `buf` for sync_from_most_trained.
void reserve_state(worker_context& ctx, bool with_optimizer, std::vector<float>& buf);

// Every parameter value, then (with_optimizer) each trainable parameter's optimizer slots and step.
std::size_t state_size(worker_context& ctx, bool with_optimizer);
void pack_state(worker_context& ctx, bool with_optimizer, std::span<float> out);
void unpack_state(worker_context& ctx, bool with_optimizer, std::span<const float> in);

// After a failed collective: forgets the ring (the next ensure() builds the new one) and returns a
// dropped `retry`. `what` names what was lost in the log ("allreduce: step").
step_result drop_round(worker_context& ctx, const error& e, const char* what);

}  // namespace troupe::actors::replicas
