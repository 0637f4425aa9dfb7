// The gradient noise scale from the pushes a PS shard receives (async_ps; docs/goodput.md, "async_ps"):
// two consecutive pushes of equal rows, whichever workers sent them, are a pair as a lone replica's
// two steps are (noise_scale.hpp: B_small = the rows, B_big = twice, biased: the parameters moved
// between them), over this shard's slice of the dense gradient. The squared norms add up over
// coordinates and the estimates are linear in them, so every shard estimates |G_s|^2 and
// tr(Sigma_s) of its own slice and the worker sums the shards' (their pushes' replies carry them):
// no norm crosses shards, no message is added.
//
// On 1 pair in `every` pushes (the shard: [train] noise_scale_every x the job file's workers, as many
// estimates per sample as a ring computes): the push before a due one keeps its dense
// gradients (a copy of what the shard reads anyway), the due one reads |g|^2, |g'|^2 and g.g' in
// one pass before it is applied. A due push that makes no pair (its rows are not the kept push's:
// a task's short last batch) keeps its own gradients and the next push is due: the pushes' rows
// repeat with a period of their own (2 workers of 8 batches a task: 16 pushes, as `every` may be),
// and a fixed phase could land on the short batch for the whole run (seen: a shard's estimate
// frozen at its first pair). With Adam, once its second moments have 5 steps, the norms are of
// the preconditioned gradient (weights 1 / (sqrt(v / (1 - beta2^t)) + eps)^2 from the shard's own
// slots, as grad_norms.hpp's on the worker); the switch starts the averages over.
//
// Embedding rows are left out (a push's rows differ from the next one's), as on the worker.
// Values only: the shard's actor calls it, one push at a time.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "noise_scale.hpp"
#include "troupe/nn/optimizer.hpp"

namespace troupe::actors {

// A shard's estimate, as its push replies carry it: the bias-corrected averages before the floors
// (noise_scale::raw_sqr, raw_var: they are summed over the shards), and how many pairs made them.
struct shard_noise {
  double grad_sqr = 0, grad_var = 0;
  std::uint64_t rounds = 0;
  bool preconditioned = false;
};

class push_noise {
 public:
  // `sizes`: the shard's dense tensors by name (floats each); `base_batch`: M0, the job file's
  // workers x batch_size; `every`: pushes from one pair to the next (each pair stands for as many
  // in the averages).
  push_noise(const std::map<std::string, std::size_t>& sizes, double base_batch, std::size_t every,
             const nn::optimizer_config& opt);

  // A push of `rows` (0: the sender did not say) begins; whether its dense gradients are wanted.
  bool begin(std::uint32_t rows);
  // One of them, before it is applied, with its tensor's optimizer slots.
  void tensor(const std::string& name, std::span<const float> g, const nn::dense_slots& slots);
  // The push ends: a pair that covered every dense tensor of the shard goes into the estimate.
  void end();

  shard_noise report() const;

  // The averages as floats, for the shard's checkpoint (ps_checkpoint.cpp, under
  // `checkpoint_key`): a restarted shard answers with the estimate it had instead of none until it
  // has new pairs. The pair in progress is not kept (the next push starts one).
  static constexpr const char* checkpoint_key = "#noise_scale";
  std::vector<float> state() const;
  // Restores state(); false, and nothing changed, when `in` is not a state this shard could have
  // written: another layout or size, another M0 (the job file's workers x batch_size), non-finite
  // averages, or preconditioned norms without Adam.
  bool restore(std::span<const float> in);

 private:
  struct slice {
    std::size_t offset = 0, size = 0;
    std::uint64_t weights_at = 0;  // the optimizer step its Adam weights are of (0: none yet)
  };
  std::map<std::string, slice> at_;
  std::size_t total_ = 0;
  nn::optimizer_config opt_;
  goodput::noise_scale ns_;
  std::vector<float> prev_, weights_;  // the kept push's dense gradients; Adam's preconditioner
  goodput::pair_schedule schedule_;    // which pushes keep and pair
  // The push in progress.
  bool keep_ = false, pair_ = false, weighted_ = false;
  std::uint32_t rows_ = 0;
  std::size_t kept_ = 0, paired_ = 0;
  double sqr_ = 0, prev_sqr_ = 0, cross_ = 0;
  bool preconditioned_ = false;  // the estimates are of the preconditioned gradient
};

}  // namespace troupe::actors
