// The TorchScript trainer backend (troupe/actors/torchscript.hpp), built into the plugin
// libtroupe_torchscript.so with its helpers (torch_module, torch_settings; builtin_loss, which needs
// no libtorch; the batch's embedding rows through nn::sparse_batch): the only code of troupe that
// includes libtorch.
//
// The module's parameters alias troupe's flat buffers: each parameter's data is set to a view of
// `values_` and its .grad to a view of `grads_`, so backward accumulates straight into the flat
// gradient buffer (zeroed in place before each batch) and what the ring or the PS writes into
// parameters() is what the next forward reads. troupe's optimizers update them (nn::apply_dense on
// troupe tensors viewing the same memory). For data with sparse fields, `emb` is gathered from
// troupe's own embedding table ([batch, fields, embedding_dim]) and its gradient is combined into
// the table's sparse gradient, which async_ps pushes to the shards (nn/sparse_batch.hpp). Built-in
// losses and their gradient are computed on the host (builtin_loss.hpp): backward starts from the
// logits. Where a step's time goes: docs/benchmarks.md.
//
// On a GPU ([train] device = "gpu") the module's tensors cannot alias host memory: they alias two
// flat tensors on the device instead, and the host buffers stay what the strategies, the ring, the
// PS and the checkpoints see. Between calls the host is the truth: a step uploads the parameters
// (and buffers), runs forward and backward on the GPU, and downloads the gradients (and the
// buffers forward updated); troupe's optimizer then updates the host parameters, as on the CPU
// (one parameter copy each way per step: ~1 MB for the MLP of the examples). The device is the
// first visible GPU (CUDA_VISIBLE_DEVICES chooses it). device = "cpu-mirror" takes the same path on
// the CPU, for the tests of a machine without a GPU.
//
// Private to the plugin: torchscript_backend.cpp defines it, troupe_torchscript_create makes it.
#pragma once

#include <torch/script.h>

#include <optional>

#include "torch_module.hpp"
#include "troupe/actors/torchscript.hpp"
#include "troupe/nn/sparse_batch.hpp"

namespace troupe::actors {

class torchscript_backend final : public trainer_backend {
 public:
  static expected<std::unique_ptr<torchscript_backend>> create(const torchscript_options& o);

  std::string_view name() const override { return "torchscript"; }
  std::string placement() const override {
    return dev_.is_cuda() ? dev_.str() : mirrored_ ? "cpu-mirror" : "cpu";
  }
  expected<float> compute_gradients(const nn::batch& b) override;
  void apply_gradients(double lr_scale) override;
  std::span<float> parameters() override { return values_; }
  std::span<float> gradients() override { return grads_; }
  const std::vector<param_slice>& layout() const override { return layout_; }
  const std::vector<nn::dense_param*>& dense_parameters() override { return param_ptrs_; }
  std::vector<std::span<float>> buffers() override { return buffers_; }
  std::vector<std::string> buffer_names() override { return buffer_names_; }
  const nn::optimizer& optimizer() const override { return *opt_; }
  std::vector<nn::dense_slots>& optimizer_state() override { return state_; }
  std::vector<nn::embedding_table*> embedding_tables() override {
    if (!table_) return {};
    return {&*table_};
  }
  std::vector<std::uint64_t> batch_ids(const nn::batch& b, std::size_t t) override;
  expected<float> predict(const nn::batch& b) override;
  std::span<const float> probabilities() const override { return probs_; }
  std::size_t output_width() const override { return width_; }

 private:
  explicit torchscript_backend(const torchscript_options& o) : o_(o) {}
  // The module on its device, checked (torch_module.hpp).
  expected<void> load();
  expected<void> alias_parameters();
  void alias_buffers();
  expected<void> probe();
  // The mirror of a device replica: parameters and buffers up before a forward, gradients and
  // buffers down after a step. No-ops when the module aliases the host buffers.
  void upload();
  void download_after_step();
  // The batch's inputs as tensors over troupe's staging buffers.
  std::vector<c10::IValue> inputs(const nn::batch& b, bool training);
  at::Tensor labels(const nn::batch& b);
  expected<at::Tensor> logits(const nn::batch& b, bool training);
  at::Tensor loss(const at::Tensor& logits, const at::Tensor& labels);
  // The loss of `logits` and backward from it: the built-in loss and its gradient on the host
  // (builtin_loss.hpp) for float32 logits of the data's shape on the CPU, else libtorch's (a
  // module's own loss method, a GPU).
  expected<float> backward(const nn::batch& b, const at::Tensor& logits);
  unexpected fail(const std::string& what, const nn::batch& b, const std::exception& e) const {
    return step_error(o_.path, what, b, o_.embedding_dim, e);
  }

  torchscript_options o_;
  torch::Device dev_{torch::kCPU};
  bool mirrored_ = false;  // the module's tensors live apart from values_ / grads_
  // The flat tensors the module's parameters and their .grad view: over values_ and grads_ on the
  // CPU; when mirrored, their copies on dev_.
  at::Tensor mod_values_, mod_grads_;
  std::vector<at::Tensor> dbuffers_;          // when mirrored: the module's float buffers on dev_
  std::vector<std::vector<float>> hbuffers_;  // and their host copies (buffers_ spans them)
  // Buffers of another dtype (int64 counters, BatchNorm's num_batches_tracked, float64): carried
  // as float32 host copies (buffers_ spans them), read back after each step and written into the
  // module only when someone else changed them (a replica's sync, a restore: `wshadow_` is what the
  // module last had), on the CPU too; an integer buffer with a value float32 cannot hold (beyond
  // 2^24: a constant such as 1000000007) is left out, as every one was: never copied between
  // replicas, checkpointed or exported, the exported model scoring otherwise.
  std::vector<at::Tensor> wide_;
  std::vector<std::vector<float>> wbuffers_, wshadow_;
  // Every buffer carried: its module name, the (sub)module holding it and its name there (resolved at
  // load), and the tensor that carries it (the module's own at load; a forward that reassigns the
  // attribute is set back to it after the step: rebind_buffers).
  struct bound_buffer {
    std::string name;
    torch::jit::Module owner;
    std::string attr;
    at::Tensor held;
  };
  std::vector<bound_buffer> bound_;
  void bind(const std::string& name, const at::Tensor& held);
  void rebind_buffers();
  torch::jit::Module mod_;
  bool custom_loss_ = false;
  std::size_t classes_ = 0, width_ = 0;
  std::vector<float> values_, grads_;
  std::vector<param_slice> layout_;
  std::vector<nn::dense_param> params_;  // troupe views of the same memory (optimizer, PS)
  std::vector<nn::dense_param*> param_ptrs_;
  std::vector<std::span<float>> buffers_;
  std::vector<std::string> buffer_names_;  // the module's names of buffers_, index for index
  std::unique_ptr<nn::optimizer> opt_;
  std::vector<nn::dense_slots> state_;
  std::optional<nn::embedding_table> table_;
  std::optional<nn::row_slots> table_state_;
  // Staging: the batch's dense rows, its embedding rows and ids, its labels, the loss' gradient.
  std::vector<float> dense_, emb_rows_, label_f_, probs_, loss_grad_;
  std::vector<std::int64_t> label_i_;
  std::vector<std::uint64_t> ids_;
  nn::sparse_batch rows_;  // emb's rows gathered, their gradient combined per id
  at::Tensor emb_;
};

}  // namespace troupe::actors
