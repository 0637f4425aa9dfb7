// The device embedding: a growing device table whose rows are mapped from ids on the host
// (row_map), gathered in forward, scatter-added (equal ids combined) in backward, and updated
// by the optimizer on the rows the batch touched.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>

#include "check.hpp"
#include "device_layers.hpp"
#include "kernels.hpp"
#include "troupe/gpu/row_map.hpp"

namespace troupe::gpu {
namespace {

class embedding_dl final : public device_layer {
 public:
  explicit embedding_dl(nn::embedding_layer& host)
      : host_(host.table()), dim_(host.dim()), first_(host.first_field()), fields_(host.fields()) {}
  std::string kind() const override { return "embedding"; }

  expected<void> prepare(const device_context& c) override;
  expected<void> forward(const device_context& c, std::span<const float* const>, float* out) override {
    return launched(kernels::gather_rows(table_.data(), occ_rows_.data(), out, occurrences_, dim_, c.stream),
                    "gather_rows");
  }
  expected<void> backward(const device_context& c, std::span<const float* const>, const float*,
                          const float* g, std::span<float* const>) override {
    TROUPE_GPU_TRY(detail::memset_device(grad_acc_.data(), 0, uniques_ * dim_ * sizeof(float), c.stream));
    return launched(
        kernels::scatter_add_rows(g, occ_unique_.data(), grad_acc_.data(), occurrences_, dim_, c.stream),
        "scatter_add_rows");
  }
  expected<void> apply_sparse(const device_optimizer& opt, cuda_stream s) override;
  expected<void> download_table(nn::embedding_table& t, cuda_stream s) override;
  expected<void> upload_table(const nn::embedding_table& t, cuda_stream s) override;
  expected<void> download_sparse_grad(nn::sparse_grad& out, cuda_stream s) override;

 private:
  expected<void> grow(std::size_t rows, cuda_stream s);
  expected<void> upload_new_rows(std::size_t first_new, cuda_stream s);
  expected<void> upload_indices(cuda_stream s);

  nn::embedding_table* host_;
  std::size_t dim_, first_, fields_;
  row_map map_;
  std::vector<std::uint64_t> ids_;
  std::size_t capacity_ = 0, occurrences_ = 0, uniques_ = 0;
  device_buffer<float> table_, slots_, grad_acc_;
  device_buffer<std::uint32_t> steps_;
  std::size_t slot_width_ = 0;  // floats per row in slots_ (0 until the first apply_sparse)
  float slot_init_ = 0;
  device_buffer<std::int32_t> occ_rows_, occ_unique_, unique_rows_;
  pinned_buffer<std::int32_t> stage_idx_;
  pinned_buffer<float> stage_rows_;
  event staged_;  // recorded after the last uploads from the pinned stages
};

// Copies the first `keep` elements of `buf` into a new buffer of `n` elements.
template <class T>
expected<void> regrow(device_buffer<T>& buf, std::size_t keep, std::size_t n, cuda_stream s) {
  auto b = device_buffer<T>::alloc(n);
  if (!b) return std::move(b).err();
  TROUPE_GPU_TRY(detail::copy_on_device(b->data(), buf.data(), keep * sizeof(T), s));
  // The copy must finish before the old buffer is freed.
  TROUPE_GPU_TRY(cuda_check(cudaStreamSynchronize(s), "cudaStreamSynchronize"));
  buf = std::move(*b);
  return {};
}

expected<void> embedding_dl::grow(std::size_t rows, cuda_stream s) {
  if (rows <= capacity_) return {};
  const std::size_t cap = std::max({rows, capacity_ * 2, std::size_t{1024}}), used = map_.size();
  const std::size_t old_rows = used - (map_.new_ids().size());  // rows already on the device
  TROUPE_GPU_TRY(regrow(table_, old_rows * dim_, cap * dim_, s));
  TROUPE_GPU_TRY(regrow(steps_, old_rows, cap, s));
  if (slot_width_) TROUPE_GPU_TRY(regrow(slots_, old_rows * slot_width_, cap * slot_width_, s));
  capacity_ = cap;
  return {};
}

expected<void> embedding_dl::prepare(const device_context& c) {
  const nn::batch& b = *c.input;
  if (staged_.get()) TROUPE_GPU_TRY(staged_.sync());  // the pinned stages are free again
  ids_.resize(b.size() * fields_);
  for (std::size_t i = 0; i < b.size(); ++i)
    std::memcpy(ids_.data() + i * fields_, b.sparse_row(i) + first_, fields_ * sizeof(std::uint64_t));
  const std::size_t before = map_.size();
  map_.map_batch(ids_);
  occurrences_ = ids_.size();
  uniques_ = map_.unique_ids().size();
  TROUPE_GPU_TRY(grow(map_.size(), c.stream));
  TROUPE_GPU_TRY(upload_new_rows(before, c.stream));
  TROUPE_GPU_TRY(upload_indices(c.stream));
  if (!staged_.get()) {
    auto e = event::create();
    if (!e) return std::move(e).err();
    staged_ = std::move(*e);
  }
  return staged_.record(c.stream);
}

// New rows take the host table's row if it has one, else its deterministic init_row; rows are
// assigned contiguously, so they are one range [first_new, size) of the device table.
expected<void> embedding_dl::upload_new_rows(std::size_t first_new, cuda_stream s) {
  const auto& fresh = map_.new_ids();
  if (fresh.empty()) return {};
  if (stage_rows_.size() < fresh.size() * dim_) {
    auto p = pinned_buffer<float>::alloc(std::max(fresh.size() * dim_, stage_rows_.size() * 2));
    if (!p) return std::move(p).err();
    stage_rows_ = std::move(*p);
  }
  for (std::size_t u = 0; u < fresh.size(); ++u) {
    float* dst = stage_rows_.data() + u * dim_;
    if (host_->contains(fresh[u]))
      std::memcpy(dst, host_->row(fresh[u]), dim_ * sizeof(float));
    else
      host_->init_row(fresh[u], dst);
  }
  const std::size_t n = fresh.size();
  TROUPE_GPU_TRY(detail::copy_to_device(table_.data() + first_new * dim_, stage_rows_.data(),
                                        n * dim_ * sizeof(float), s));
  TROUPE_GPU_TRY(detail::memset_device(steps_.data() + first_new, 0, n * sizeof(std::uint32_t), s));
  if (!slot_width_) return {};
  return launched(kernels::fill(slots_.data() + first_new * slot_width_, n * slot_width_, slot_init_, s),
                  "fill");
}

expected<void> embedding_dl::upload_indices(cuda_stream s) {
  const std::size_t need = 2 * occurrences_ + uniques_;
  if (stage_idx_.size() < need) {
    auto p = pinned_buffer<std::int32_t>::alloc(need * 2);
    if (!p) return std::move(p).err();
    stage_idx_ = std::move(*p);
  }
  TROUPE_GPU_TRY(reserve(occ_rows_, occurrences_));
  TROUPE_GPU_TRY(reserve(occ_unique_, occurrences_));
  TROUPE_GPU_TRY(reserve(unique_rows_, uniques_));
  TROUPE_GPU_TRY(reserve(grad_acc_, occurrences_ * dim_));
  std::int32_t* st = stage_idx_.data();
  std::copy(map_.occurrence_rows().begin(), map_.occurrence_rows().end(), st);
  std::copy(map_.occurrence_unique().begin(), map_.occurrence_unique().end(), st + occurrences_);
  std::copy(map_.unique_rows().begin(), map_.unique_rows().end(), st + 2 * occurrences_);
  const std::size_t isz = sizeof(std::int32_t);
  TROUPE_GPU_TRY(detail::copy_to_device(occ_rows_.data(), st, occurrences_ * isz, s));
  TROUPE_GPU_TRY(detail::copy_to_device(occ_unique_.data(), st + occurrences_, occurrences_ * isz, s));
  return detail::copy_to_device(unique_rows_.data(), st + 2 * occurrences_, uniques_ * isz, s);
}

expected<void> embedding_dl::apply_sparse(const device_optimizer& opt, cuda_stream s) {
  if (!slot_width_ && opt.slots_per_element() > 0) {
    slot_width_ = opt.slots_per_element() * dim_;
    slot_init_ = opt.slot_init();
    auto b = device_buffer<float>::alloc(std::max<std::size_t>(capacity_, 1) * slot_width_);
    if (!b) return std::move(b).err();
    slots_ = std::move(*b);
    TROUPE_GPU_TRY(launched(kernels::fill(slots_.data(), slots_.size(), slot_init_, s), "fill"));
  }
  return opt.update_rows(table_.data(), slots_.data(), steps_.data(), unique_rows_.data(), grad_acc_.data(),
                         uniques_, dim_, s);
}

expected<void> embedding_dl::download_table(nn::embedding_table& t, cuda_stream s) {
  std::vector<float> rows(map_.size() * dim_);
  TROUPE_GPU_TRY(detail::copy_to_host(rows.data(), table_.data(), rows.size() * sizeof(float), s));
  TROUPE_GPU_TRY(cuda_check(cudaStreamSynchronize(s), "cudaStreamSynchronize"));
  map_.for_each([&](std::uint64_t id, std::int32_t row) {
    t.write_rows({&id, 1}, rows.data() + static_cast<std::size_t>(row) * dim_);
  });
  return {};
}

// Rows the host has overwrite the device's; ids the host never saw keep their device values.
expected<void> embedding_dl::upload_table(const nn::embedding_table& t, cuda_stream s) {
  std::vector<float> rows(map_.size() * dim_);
  TROUPE_GPU_TRY(detail::copy_to_host(rows.data(), table_.data(), rows.size() * sizeof(float), s));
  TROUPE_GPU_TRY(cuda_check(cudaStreamSynchronize(s), "cudaStreamSynchronize"));
  t.for_each([&](std::uint64_t id, const float* row) {
    const std::int32_t r = map_.find(id);
    if (r >= 0) std::memcpy(rows.data() + static_cast<std::size_t>(r) * dim_, row, dim_ * sizeof(float));
  });
  TROUPE_GPU_TRY(detail::copy_to_device(table_.data(), rows.data(), rows.size() * sizeof(float), s));
  return cuda_check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
}

expected<void> embedding_dl::download_sparse_grad(nn::sparse_grad& out, cuda_stream s) {
  out.dim = dim_;
  out.ids = map_.unique_ids();
  out.rows.resize(uniques_ * dim_);
  TROUPE_GPU_TRY(detail::copy_to_host(out.rows.data(), grad_acc_.data(), out.rows.size() * sizeof(float), s));
  return cuda_check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
}

}  // namespace

std::unique_ptr<device_layer> make_embedding(nn::embedding_layer& host) {
  return std::make_unique<embedding_dl>(host);
}

}  // namespace troupe::gpu
