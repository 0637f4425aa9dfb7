// What a strategy trains: one model replica and its optimizer, behind one interface whatever runs
// it. Backends: the native CPU model (nn/), the CUDA device trainer (gpu/), a user's TorchScript
// module through libtorch (a plugin, torch/). A new backend is a new file, not a new role.
//
// The contract:
// - The trainable dense parameters are ONE flat host buffer, parameters(), and their gradients
//   another, gradients(), both laid out by layout() (name, offset, size per tensor, the order every
//   replica of the job shares). The model's own tensors alias them: what the ring or the PS writes
//   into parameters() is what the next forward reads, with no copy; what compute_gradients leaves
//   in gradients() is what a strategy sums and what apply_gradients applies.
// - Sparse rows (embedding tables served by the PS shards) are troupe's nn::embedding_tables: a
//   pull writes the batch's rows into them, compute_gradients leaves their sparse gradient in
//   table->grad(), apply_gradients updates the touched rows locally (sync strategies).
// - State-only tensors (batch norm's running statistics) are buffers(): replicas copy them with
//   the parameters; no optimizer touches them.
// - A device backend keeps its replica elsewhere; its host buffers are a mirror that to_host()
//   refreshes and from_host() writes back. Host backends keep both as no-ops.
//
// Threading: one thread at a time (the worker's). Errors are values; a backend never lets an
// exception of the library under it escape.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "troupe/core/error.hpp"
#include "troupe/nn/data/dataset.hpp"
#include "troupe/nn/embedding_table.hpp"
#include "troupe/nn/layer.hpp"
#include "troupe/nn/optimizer.hpp"

namespace troupe::actors {

// One trainable tensor of the flat buffer.
struct param_slice {
  std::string name;  // the PS shards place and store dense tensors by this name
  std::size_t offset = 0, size = 0;
};

// The host mirror a device backend keeps (to_host / from_host).
enum class host_copy {
  parameters,  // the flat parameters and buffers()
  gradients,   // the flat gradients of the last compute_gradients
};

// A GPU worker's device side (the CUDA backend's; backends/cuda_backend.hpp).
struct gpu_replica;

class trainer_backend {
 public:
  virtual ~trainer_backend() = default;
  virtual std::string_view name() const = 0;  // "native", "cuda", "torchscript"
  // Where the model's tensors live and its steps run: "cpu", or the device ("cuda:0"); a backend
  // that mirrors host buffers on the CPU for its tests says "cpu-mirror". Logged and reported.
  virtual std::string placement() const { return "cpu"; }

  // --- a step ---
  // Forward (training) and backward of `b`: the batch's mean loss; gradients() and the tables'
  // grad() hold its gradients. Data that does not fit the model is an error naming the shapes.
  virtual expected<float> compute_gradients(const nn::batch& b) = 0;
  // The optimizer on gradients() (and the touched rows), at lr_scale times the learning rate.
  virtual void apply_gradients(double lr_scale = 1.0) = 0;
  // Both halves.
  virtual expected<float> step(const nn::batch& b) {
    auto loss = compute_gradients(b);
    if (loss) apply_gradients();
    return loss;
  }

  // --- the dense state ---
  virtual std::span<float> parameters() = 0;
  virtual std::span<float> gradients() = 0;
  virtual const std::vector<param_slice>& layout() const = 0;
  // The same tensors as troupe's dense_params (value and grad alias the flat buffers), index for
  // index with layout(): what a PS shard stores and applies its optimizer to.
  virtual const std::vector<nn::dense_param*>& dense_parameters() = 0;
  virtual std::vector<std::span<float>> buffers() { return {}; }
  // The names of buffers(), index for index: what a checkpoint or an exported model keys them by
  // (the model's own names: "batchnorm/running_mean", a TorchScript module's "norm.running_var").
  virtual std::vector<std::string> buffer_names() {
    std::vector<std::string> out;
    for (std::size_t i = 0; i < buffers().size(); ++i) out.push_back("buffer/" + std::to_string(i));
    return out;
  }
  // The optimizer and its state: one dense_slots per layout() entry, index for index. Slots are
  // created on a tensor's first update; reserve_optimizer_state() sizes them now (replicas that
  // copy the state must agree on its size first).
  virtual const nn::optimizer& optimizer() const = 0;
  virtual std::vector<nn::dense_slots>& optimizer_state() = 0;
  void reserve_optimizer_state() {
    const auto& opt = optimizer();
    const auto& l = layout();
    auto& state = optimizer_state();
    for (std::size_t i = 0; i < l.size(); ++i) {
      std::size_t want = opt.slots_per_element() * l[i].size;
      if (state[i].values.size() != want) state[i].values.assign(want, opt.slot_init());
    }
  }

  // --- sparse rows ---
  virtual std::vector<nn::embedding_table*> embedding_tables() { return {}; }
  // The distinct ids table `t` looks up for `b`, sorted (what a worker pulls before forward).
  virtual std::vector<std::uint64_t> batch_ids(const nn::batch& b, std::size_t t) = 0;

  // --- evaluation ---
  // Forward without training: the batch's mean loss; probabilities() then holds [n, width]
  // (width 1: the positive class's probability of a binary label).
  virtual expected<float> predict(const nn::batch& b) = 0;
  virtual std::span<const float> probabilities() const = 0;
  virtual std::size_t output_width() const = 0;

  // --- device backends ---
  virtual expected<void> to_host(host_copy) { return {}; }
  virtual expected<void> from_host(host_copy) { return {}; }
  // The device side, for strategies with a device path of their own (allreduce over NCCL); null
  // on host backends.
  virtual gpu_replica* device() { return nullptr; }
};

// Re-points every tensor of `params` (their values, and their gradients when the tensor has one)
// into two new flat buffers, copying the current values in, and returns the layout. For backends
// whose model keeps one tensor per parameter (nn::model): afterwards the model reads and writes
// the flat buffers. `values` and `grads` must not be resized while the model lives.
inline std::vector<param_slice> alias_flat(const std::vector<nn::dense_param*>& params,
                                           std::vector<float>& values, std::vector<float>& grads) {
  std::vector<param_slice> layout;
  std::size_t total = 0;
  for (auto* p : params) {
    layout.push_back({p->name, total, p->value.size()});
    total += p->value.size();
  }
  values.assign(total, 0.0f);
  grads.assign(total, 0.0f);
  for (std::size_t i = 0; i < params.size(); ++i) {
    auto* p = params[i];
    float* v = values.data() + layout[i].offset;
    std::copy(p->value.begin(), p->value.end(), v);
    p->value = nn::tensor::view(v, p->value.dims());
    if (p->grad.size() == p->value.size())
      p->grad = nn::tensor::view(grads.data() + layout[i].offset, p->value.dims());
  }
  return layout;
}

}  // namespace troupe::actors
