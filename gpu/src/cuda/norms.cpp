#include "troupe/gpu/norms.hpp"

#include "check.hpp"
#include "kernels.hpp"

namespace troupe::gpu {

expected<norm_reducer> norm_reducer::create() {
  norm_reducer r;
  auto scratch = device_buffer<double>::alloc(kernels::norm_scratch);
  if (!scratch) return scratch.err();
  auto out = device_buffer<float>::alloc(3);
  if (!out) return out.err();
  auto host = pinned_buffer<float>::alloc(3);
  if (!host) return host.err();
  r.scratch_ = std::move(*scratch);
  r.out_ = std::move(*out);
  r.host_ = std::move(*host);
  return r;
}

expected<double> norm_reducer::sqr(const float* x, std::size_t n, cuda_stream s) {
  if (auto q = queue(x, n, false, s); !q) return q.err();
  if (auto w = sync_stream(s); !w) return w.err();
  return queued().sqr;
}

expected<void> norm_reducer::keep(const float* x, std::size_t n, cuda_stream s) {
  if (kept_.size() != n) {
    kept_n_ = 0;
    auto b = device_buffer<float>::alloc(n);
    if (!b) return b.err();
    kept_ = std::move(*b);
  }
  if (auto c = detail::copy_on_device(kept_.data(), x, n * sizeof(float), s); !c) return c;
  kept_n_ = n;
  return {};
}

expected<void> norm_reducer::precondition(const float* v, std::size_t n, std::span<const std::size_t> tensors,
                                          float inv_corr, float eps, float floor_fraction, cuda_stream s) {
  if (weights_.size() != n) {
    weights_n_ = 0;
    auto b = device_buffer<float>::alloc(n);
    if (!b) return b.err();
    weights_ = std::move(*b);
  }
  std::size_t covered = 0;
  for (auto t : tensors) covered += t;
  const std::size_t whole[] = {n};
  if (covered != n) tensors = whole;  // no layout of these n floats: one tensor
  weights_n_ = 0;
  std::size_t at = 0;
  for (auto size : tensors) {
    if (size == 0) continue;
    // The tensor's sum of v into out_[0], read there by the weights' kernel: queued, no readback.
    if (auto k = launched(kernels::sum(v + at, size, scratch_.data(), out_.data(), s), "sum"); !k) return k;
    const float scale = floor_fraction * inv_corr / static_cast<float>(size);
    if (auto k = launched(
            kernels::adam_weights(weights_.data() + at, v + at, size, inv_corr, eps, out_.data(), scale, s),
            "adam_weights");
        !k)
      return k;
    at += size;
  }
  weights_n_ = n;
  return {};
}

expected<norm_reducer::pair> norm_reducer::with_kept(const float* x, std::size_t n, cuda_stream s) {
  if (auto q = queue(x, n, true, s); !q) return q.err();
  if (auto w = sync_stream(s); !w) return w.err();
  return queued();
}

expected<void> norm_reducer::queue(const float* x, std::size_t n, bool with_kept, cuda_stream s) {
  if (with_kept && !has_kept(n))
    return make_unexpected(gpu_errc::unsupported,
                           "norm_reducer::with_kept: no kept vector of " + std::to_string(n) + " floats");
  const float* w = weights_for(n);
  auto rc = with_kept ? kernels::pair_norms(x, kept_.data(), w, n, scratch_.data(), out_.data(), s)
                      : kernels::sqr_norm(x, w, n, scratch_.data(), out_.data(), s);
  if (auto k = launched(rc, with_kept ? "pair_norms" : "sqr_norm"); !k) return k;
  queued_pair_ = with_kept;
  return detail::copy_to_host(host_.data(), out_.data(), (with_kept ? 3 : 1) * sizeof(float), s);
}

norm_reducer::pair norm_reducer::queued() const {
  const float* h = host_.data();
  if (!queued_pair_) return pair{h[0], 0, 0};
  return pair{h[0], h[1], h[2]};
}

}  // namespace troupe::gpu
