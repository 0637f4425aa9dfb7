// device_trainer on CUDA: construction, parameter layout, host <-> device.
#include <cuda_runtime.h>

#include <cstring>

#include "check.hpp"
#include "device_layers.hpp"
#include "kernels.hpp"
#include "trainer_impl.hpp"
#include "troupe/nn/errc.hpp"

namespace troupe::gpu {

expected<void> trainer_impl::init(const nn::train_config& c) {
  if (model_.output_node() < 0)
    return make_unexpected(nn::nn_errc::bad_config, "device_trainer: the host model is not finished");
  TROUPE_GPU_TRY(set_device(device_));
  auto s = gpu::stream::create();
  if (!s) return std::move(s).err();
  stream_ = std::move(*s);
  auto h = blas_handle::create(stream_.get());
  if (!h) return std::move(h).err();
  blas_ = std::move(*h);
  auto o = device_optimizer::create(c.optimizer);
  if (!o) return std::move(o).err();
  opt_ = std::move(*o);
  adam_ = c.optimizer.type == "adam";
  TROUPE_GPU_TRY(build_nodes());
  TROUPE_GPU_TRY(layout_params());
  auto l = pinned_buffer<float>::alloc(1);
  if (!l) return std::move(l).err();
  loss_host_ = std::move(*l);
  TROUPE_GPU_TRY(upload(model_));
  return sync();
}

expected<void> trainer_impl::build_nodes() {
  std::vector<nn::shape> in_shapes;
  for (std::size_t i = 0; i < model_.node_count(); ++i) {
    const auto v = model_.node_at(i);
    gpu_node n;
    n.host = v.op;
    n.inputs = *v.inputs;
    n.width = v.out_shape.size();
    in_shapes.clear();
    for (int j : n.inputs) {
      in_shapes.push_back(model_.node_at(static_cast<std::size_t>(j)).out_shape);
      n.needs_grad = n.needs_grad || nodes_[static_cast<std::size_t>(j)].needs_grad;
    }
    n.needs_grad = n.needs_grad || !v.op->params().empty() || v.op->table() != nullptr;
    auto op = make_device_layer(*v.op, in_shapes, v.out_shape);
    if (!op) return std::move(op).err().wrap("model '" + model_.type() + "'");
    n.op = std::move(*op);
    n.in_ptrs.resize(n.inputs.size());
    n.grad_ptrs.resize(n.inputs.size());
    nodes_.push_back(std::move(n));
  }
  output_ = static_cast<std::size_t>(model_.output_node());
  out_width_ = nodes_[output_].width;
  loss_ = model_.loss();
  classes_ = model_.num_classes();
  dense_dim_ = model_.data_info().dense_dim;
  return {};
}

// One offset per trainable parameter, node by node in params() order: the host model's
// trainable-parameter order.
expected<void> trainer_impl::layout_params() {
  std::size_t total = 0;
  for (auto& n : nodes_)
    for (nn::dense_param* p : n.host->params()) {
      if (!p->trainable)
        return make_unexpected(gpu_errc::unsupported, "layer '" + n.host->name() + "' (" + n.host->kind() +
                                                          ") has state-only parameters");
      ranges_.push_back({total, p->value.size()});
      total += p->value.size();
    }
  for (auto* b : {&params_, &grads_}) {
    auto a = device_buffer<float>::alloc(total);
    if (!a) return std::move(a).err();
    *b = std::move(*a);
  }
  auto sl = device_buffer<float>::alloc(total * opt_->slots_per_element());
  if (!sl) return std::move(sl).err();
  slots_ = std::move(*sl);
  if (slots_.size())
    TROUPE_GPU_TRY(
        launched(kernels::fill(slots_.data(), slots_.size(), opt_->slot_init(), stream_.get()), "fill"));
  TROUPE_GPU_TRY(grads_.zero(stream_.get()));
  std::size_t k = 0;
  std::vector<float*> v, g;
  for (auto& n : nodes_) {
    v.clear(), g.clear();
    for (std::size_t j = 0, np = n.host->params().size(); j < np; ++j, ++k) {
      v.push_back(params_.data() + ranges_[k].offset);
      g.push_back(grads_.data() + ranges_[k].offset);
    }
    if (!v.empty()) n.op->bind(v, g);
  }
  return {};
}

}  // namespace troupe::gpu

namespace troupe::gpu {

trainer_impl::~trainer_impl() {
  (void)cudaSetDevice(device_);
}

expected<void> trainer_impl::select() const {
  return cuda_check(cudaSetDevice(device_), ("cudaSetDevice(" + std::to_string(device_) + ")").c_str());
}

// The trainable parameters of `m`, checked against the device layout.
expected<std::vector<nn::dense_param*>> trainer_impl::matching_params(nn::model& m) const {
  std::vector<nn::dense_param*> out;
  for (nn::dense_param* p : m.parameters())
    if (p->trainable) out.push_back(p);
  bool same = out.size() == ranges_.size();
  for (std::size_t i = 0; same && i < out.size(); ++i) same = out[i]->value.size() == ranges_[i].size;
  if (!same)
    return make_unexpected(nn::nn_errc::bad_shape, "device_trainer: model '" + m.type() +
                                                       "' does not match the device replica's parameters");
  return out;
}

expected<void> trainer_impl::download(nn::model& m) {
  TROUPE_GPU_TRY(take_pending());
  TROUPE_GPU_TRY(select());
  auto ps = matching_params(m);
  if (!ps) return std::move(ps).err();
  for (std::size_t i = 0; i < ps->size(); ++i)
    TROUPE_GPU_TRY(detail::copy_to_host((*ps)[i]->value.data(), params_.data() + ranges_[i].offset,
                                        ranges_[i].size * sizeof(float), stream_.get()));
  auto tables = m.embedding_tables();
  std::size_t t = 0;
  for (auto& n : nodes_)
    if (n.host->table() && t < tables.size())
      TROUPE_GPU_TRY(n.op->download_table(*tables[t++], stream_.get()));
  return stream_.sync();
}

expected<void> trainer_impl::download_optimizer(std::span<float> slots, std::uint64_t& step) {
  TROUPE_GPU_TRY(take_pending());
  TROUPE_GPU_TRY(select());
  if (slots_.size()) TROUPE_GPU_TRY(slots_.download(slots, stream_.get()));
  TROUPE_GPU_TRY(stream_.sync());
  step = dense_step_;
  return {};
}

expected<void> trainer_impl::upload_optimizer(std::span<const float> slots, std::uint64_t step) {
  TROUPE_GPU_TRY(take_pending());
  TROUPE_GPU_TRY(select());
  if (slots_.size()) TROUPE_GPU_TRY(slots_.upload(slots, stream_.get()));
  TROUPE_GPU_TRY(stream_.sync());  // `slots` may change as soon as this returns
  dense_step_ = step;
  return {};
}

// nn::model's accessors are non-const; nothing of `m` is modified here.
expected<void> trainer_impl::upload(const nn::model& cm) {
  TROUPE_GPU_TRY(take_pending());
  TROUPE_GPU_TRY(select());
  auto& m = const_cast<nn::model&>(cm);
  auto ps = matching_params(m);
  if (!ps) return std::move(ps).err();
  for (std::size_t i = 0; i < ps->size(); ++i)
    TROUPE_GPU_TRY(detail::copy_to_device(params_.data() + ranges_[i].offset, (*ps)[i]->value.data(),
                                          ranges_[i].size * sizeof(float), stream_.get()));
  auto tables = m.embedding_tables();
  std::size_t t = 0;
  for (auto& n : nodes_)
    if (n.host->table() && t < tables.size()) TROUPE_GPU_TRY(n.op->upload_table(*tables[t++], stream_.get()));
  return stream_.sync();  // the host tensors may change as soon as this returns
}

void trainer_impl::apply_gradients(double lr_scale) {
  if (pending_) return;
  opt_->set_lr_scale(lr_scale);
  auto run = [&]() -> expected<void> {
    TROUPE_GPU_TRY(select());
    TROUPE_GPU_TRY(opt_->update_dense(params_.data(), grads_.data(), slots_.data(), params_.size(),
                                      dense_step_, stream_.get()));
    for (auto& n : nodes_) TROUPE_GPU_TRY(n.op->apply_sparse(*opt_, stream_.get()));
    return {};
  };
  if (auto r = run(); !r) pending_ = std::move(r).err();
}

expected<void> trainer_impl::take_pending() {
  if (!pending_) return {};
  error e = std::move(pending_);
  pending_ = error();
  return e;
}

expected<void> trainer_impl::sync() {
  TROUPE_GPU_TRY(take_pending());
  TROUPE_GPU_TRY(select());
  return stream_.sync();
}

expected<std::unique_ptr<device_trainer>> device_trainer::create(int device, nn::model& host_model,
                                                                 const nn::train_config& config) {
  auto t = std::make_unique<trainer_impl>(device, host_model);
  if (auto r = t->init(config); !r) return std::move(r).err();
  return std::unique_ptr<device_trainer>(std::move(t));
}

}  // namespace troupe::gpu
