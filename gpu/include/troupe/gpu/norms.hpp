// Squared norms of device vectors for the gradient noise scale (docs/goodput.md, "The GPU path"):
// the allreduce strategy's device path reads |g|^2 of its own gradient and |mean g|^2 of the summed
// one, and a lone replica |g|^2, |g'|^2 and g.g' of this step's gradient and the previous one's,
// without copying the gradients to the host: a reduction on the device and 1 (or 3) floats read back.
//
// The reductions are deterministic (no atomics): the same vector gives the same bits on every
// replica, so replicas that read |mean g|^2 from the same sum add the same value to their estimates.
//
// With Adam the norms are of the preconditioned gradient (grad_norms.hpp's CPU form): after
// precondition(), every norm of as many floats is weighted by
// w = 1 / (sqrt(max(v / (1 - beta2^t), floor)) + eps)^2, computed on the device from Adam's second
// moments, with each tensor's floor (1 - beta2) x its mean of v / (1 - beta2^t) (grad_norms.hpp: the
// bound that keeps an input no example has lit yet from weighing 1 / eps^2).
//
// Contract: every call queues its work on `s` after what is already queued there (the gradient's
// producer). sqr() and with_kept() then wait for `s` (the readback): a stream sync each, meant for the
// rounds that compute norms only. queue() and queued() are the same reductions without the wait: the
// caller reads them after a sync of `s` it makes anyway (the step's loss readback). Device pointers are of
// the device current on the calling thread, which must be the one the reducer was created on. Not
// thread-safe. Errors: gpu_errc (cuda_failed names the call; not_built without CUDA).
#pragma once

#include <cstddef>
#include <span>

#include "troupe/gpu/cuda.hpp"

namespace troupe::gpu {

class norm_reducer {
 public:
  // Scratch on the current device and a pinned readback slot.
  static expected<norm_reducer> create();

  // Weighs the norms of n floats from now on by Adam's preconditioner from its second moments v
  // (device, n floats) at inv_corr = 1 / (1 - beta2^t): w = 1 / (sqrt(max(v inv_corr, floor)) + eps)^2
  // into the reducer's own buffer (allocated on the first call, reallocated when n changes), where
  // `tensors` lays the n floats out as consecutive tensors (sizes; when they do not add up to n: one
  // tensor of n) and each tensor's floor is floor_fraction x its mean of v inv_corr (0: none). Queued;
  // no sync.
  expected<void> precondition(const float* v, std::size_t n, std::span<const std::size_t> tensors,
                              float inv_corr, float eps, float floor_fraction, cuda_stream s);
  bool preconditioned(std::size_t n) const { return weights_n_ == n && n > 0; }

  // sum x[i]^2 (w[i]) over n floats.
  expected<double> sqr(const float* x, std::size_t n, cuda_stream s);

  // Copies x (n floats) into the reducer's own buffer (allocated on the first call, reallocated when
  // n changes): the previous step's gradient, for with_kept(). Queued; no sync.
  expected<void> keep(const float* x, std::size_t n, cuda_stream s);
  bool has_kept(std::size_t n) const { return kept_n_ == n && n > 0; }

  // |x|^2, |kept|^2 and x.kept (weighted when preconditioned(n)); requires has_kept(n).
  struct pair {
    double sqr = 0, kept_sqr = 0, cross = 0;
  };
  expected<pair> with_kept(const float* x, std::size_t n, cuda_stream s);

  // Queues |x|^2 (with_kept: the pair, as with_kept()) and its readback on `s`, without waiting.
  // queued() reads the last queue()'s norms once `s` has been synced since (kept_sqr and cross 0
  // without with_kept); before that they are undefined.
  expected<void> queue(const float* x, std::size_t n, bool with_kept, cuda_stream s);
  pair queued() const;

 private:
  norm_reducer() = default;
  device_buffer<double> scratch_;
  device_buffer<float> out_;
  pinned_buffer<float> host_;
  device_buffer<float> kept_, weights_;
  std::size_t kept_n_ = 0, weights_n_ = 0;
  bool queued_pair_ = false;  // the last queue() was with_kept
  const float* weights_for(std::size_t n) const { return preconditioned(n) ? weights_.data() : nullptr; }
};

}  // namespace troupe::gpu
