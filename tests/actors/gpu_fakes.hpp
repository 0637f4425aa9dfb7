// Fakes for the allreduce strategy's device path on a machine without a GPU: the rendezvous in
// memory (every rank of an in-process ring posts to one store) and grad_ops on host memory (the
// "device" buffers of a host fake of gpu::device_trainer are host vectors; the squared norms are
// double sums, the kept gradient a host copy).
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>
#include <numeric>
#include <vector>

#include "master/gpu_rendezvous.hpp"
#include "worker/backends/cuda_backend.hpp"

namespace troupe::actors::fakes {

struct shared_rendezvous {
  gpu_rendezvous store;
  std::mutex mu;
  std::condition_variable cv;
};

class memory_port final : public gpu_rendezvous_port {
 public:
  explicit memory_port(shared_rendezvous& s) : s_(s) {}
  expected<wire::gpu_comm_info> exchange(const wire::gpu_comm_post& mine, bool need_unique_id) override {
    std::unique_lock lk(s_.mu);
    if (auto a = s_.store.add(mine); !a) return a.err();
    s_.cv.notify_all();
    expected<wire::gpu_comm_info> snap = make_unexpected(core_errc::io_error, "unset");
    bool ok = s_.cv.wait_for(lk, std::chrono::seconds(2), [&] {
      snap = s_.store.get(mine.ring_epoch);
      return snap && snap->complete() && (!need_unique_id || !snap->unique_id.empty());
    });
    if (!ok) return make_unexpected(core_errc::io_error, "rendezvous timed out (no unique id?)");
    return snap;
  }

 private:
  shared_rendezvous& s_;
};

// What the device path asked of the ops: norm reductions (sqr_norm and queue_norms), copies kept and
// preconditioner refreshes.
struct host_op_counts {
  int norms = 0, keeps = 0, preconditions = 0;
};
inline grad_ops host_grad_ops(std::shared_ptr<host_op_counts> counts = {}) {
  grad_ops o;
  o.to_host = [](float* h, const float* d, std::size_t n, gpu::cuda_stream) -> expected<void> {
    std::memcpy(h, d, n * sizeof(float));
    return {};
  };
  o.to_device = [](float* d, const float* h, std::size_t n, gpu::cuda_stream) -> expected<void> {
    std::memcpy(d, h, n * sizeof(float));
    return {};
  };
  o.zero = [](float* d, std::size_t n, gpu::cuda_stream) -> expected<void> {
    std::fill(d, d + n, 0.0f);
    return {};
  };
  // Adam's preconditioner once set (norm_reducer's arithmetic: float weights, double sums; each
  // tensor's floor from its sum of v, read back as a float).
  auto w = std::make_shared<std::vector<float>>();
  auto weight = [w](std::size_t i, std::size_t n) -> double { return w->size() == n ? (*w)[i] : 1.0; };
  o.precondition = [w, counts](const float* v, std::size_t n, std::span<const std::size_t> tensors, float c,
                               float eps, float floor_fraction, gpu::cuda_stream) -> expected<void> {
    if (counts) ++counts->preconditions;
    w->resize(n);
    std::vector<std::size_t> parts(tensors.begin(), tensors.end());
    if (std::accumulate(parts.begin(), parts.end(), std::size_t{0}) != n) parts = {n};
    std::size_t at = 0;
    for (auto size : parts) {
      double sum = 0;
      for (std::size_t i = at; i < at + size; ++i) sum += v[i];
      const float floor =
          size ? floor_fraction * c / static_cast<float>(size) * static_cast<float>(sum) : 0.0f;
      for (std::size_t i = at; i < at + size; ++i) {
        const float p = std::sqrt(std::max(v[i] * c, floor)) + eps;
        (*w)[i] = 1.0f / (p * p);
      }
      at += size;
    }
    return {};
  };
  o.sqr_norm = [counts, weight](const float* d, std::size_t n, gpu::cuda_stream) -> expected<double> {
    if (counts) ++counts->norms;
    double s = 0;
    for (std::size_t i = 0; i < n; ++i) s += static_cast<double>(d[i]) * d[i] * weight(i, n);
    return s;
  };
  auto kept = std::make_shared<std::vector<float>>();
  o.keep = [kept, counts](const float* d, std::size_t n, gpu::cuda_stream) -> expected<void> {
    if (counts) ++counts->keeps;
    kept->assign(d, d + n);
    return {};
  };
  // Queued norms computed at once (the host has no stream); queued_norms reads the last.
  auto last = std::make_shared<gpu::norm_reducer::pair>();
  o.queue_norms = [kept, counts, weight, last](const float* d, std::size_t n, bool with_kept,
                                               gpu::cuda_stream) -> expected<void> {
    if (counts) ++counts->norms;
    if (with_kept && kept->size() != n) return make_unexpected(gpu::gpu_errc::unsupported, "nothing kept");
    gpu::norm_reducer::pair p;
    for (std::size_t i = 0; i < n; ++i) {
      const double a = d[i], c = weight(i, n);
      p.sqr += a * a * c;
      if (!with_kept) continue;
      const double b = (*kept)[i];
      p.kept_sqr += b * b * c;
      p.cross += a * b * c;
    }
    *last = p;
    return {};
  };
  o.queued_norms = [last] { return *last; };
  return o;
}

}  // namespace troupe::actors::fakes
