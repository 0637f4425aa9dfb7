// The TorchScript trainer backend (troupe/actors/torchscript.hpp), built into the plugin
// libtroupe_torchscript.so: the only translation unit of troupe that includes libtorch.
//
// The module's parameters alias troupe's flat buffers: each parameter's data is set to a view of
// `values_` and its .grad to a view of `grads_`, so backward accumulates straight into the flat
// gradient buffer (zeroed in place before each batch) and what the ring or the PS writes into
// parameters() is what the next forward reads. troupe's optimizers update them (nn::apply_dense on
// troupe tensors viewing the same memory). For data with sparse fields, `emb` is gathered from
// troupe's own embedding table ([batch, fields, embedding_dim]) and its gradient is combined into
// the table's sparse gradient, which async_ps pushes to the shards.
//
// On a GPU ([train] device = "gpu") the module's tensors cannot alias host memory: they alias two
// flat tensors on the device instead, and the host buffers stay what the strategies, the ring, the
// PS and the checkpoints see. Between calls the host is the truth: a step uploads the parameters
// (and buffers), runs forward and backward on the GPU, and downloads the gradients (and the
// buffers forward updated); troupe's optimizer then updates the host parameters, as on the CPU
// (one parameter copy each way per step: ~1 MB for the MLP of the examples). The device is the
// first visible GPU (CUDA_VISIBLE_DEVICES chooses it). device = "cpu-mirror" takes the same path on
// the CPU, for the tests of a machine without a GPU.
#include <ATen/Parallel.h>
#include <malloc.h>
#include <torch/csrc/jit/runtime/graph_executor.h>
#include <torch/cuda.h>
#include <torch/script.h>

#include <filesystem>
#include <mutex>
#include <optional>
#include <sstream>
#include <unordered_map>

#include "troupe/actors/torchscript.hpp"
#include "troupe/nn/errc.hpp"
#include "troupe/nn/trainer.hpp"

namespace troupe::actors {

namespace {

// A CPU tensor over `s` (no copy).
at::Tensor host_view(std::span<float> s) {
  return torch::from_blob(s.data(), {static_cast<std::int64_t>(s.size())},
                          at::TensorOptions().dtype(at::kFloat));
}

std::string shape_of(const at::Tensor& t) {
  std::ostringstream s;
  s << t.sizes();
  return s.str();
}

// Process-wide libtorch settings, once: the profiling executor's first runs are slow; the thread
// count must be set before any work.
void configure_once(int threads) {
  static std::once_flag once;
  std::call_once(once, [threads] {
    torch::jit::getProfilingMode() = false;
    if (std::getenv("TROUPE_TORCH_SIMPLE_EXECUTOR")) torch::jit::getExecutorMode() = false;
    if (threads > 0) at::set_num_threads(threads);
    // libtorch's matrix products run on OpenBLAS, whose own thread pool at::set_num_threads does
    // not size: left at its default it spins a thread per core against the workers beside it.
    nn::set_blas_threads(threads);
    // libtorch allocates each step's activations and gradients anew (hundreds of KiB each): above
    // glibc's mmap threshold, or trimmed off the heap's top when freed, every step page-faults
    // them in again (14% of a step's time in a profile of the MLP). Keep them in the heap.
    ::mallopt(M_MMAP_THRESHOLD, 64 << 20);
    ::mallopt(M_TRIM_THRESHOLD, 256 << 20);
    ::mallopt(M_TOP_PAD, 64 << 20);
  });
}

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
  expected<void> choose_device();
  expected<void> load();
  expected<void> check_signature();
  expected<std::vector<std::pair<std::string, at::Tensor>>> trainable();
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
  unexpected fail(const std::string& what, const nn::batch& b, const std::exception& e) const;

  torchscript_options o_;
  torch::Device dev_{torch::kCPU};
  bool mirrored_ = false;  // the module's tensors live apart from values_ / grads_
  // The flat tensors the module's parameters and their .grad view: over values_ and grads_ on the
  // CPU; when mirrored, their copies on dev_.
  at::Tensor mod_values_, mod_grads_;
  std::vector<at::Tensor> dbuffers_;          // when mirrored: the module's float buffers on dev_
  std::vector<std::vector<float>> hbuffers_;  // and their host copies (buffers_ spans them)
  torch::jit::Module mod_;
  bool custom_loss_ = false;
  std::size_t classes_ = 0, width_ = 0;
  std::vector<float> values_, grads_;
  std::vector<param_slice> layout_;
  std::vector<nn::dense_param> params_;  // troupe views of the same memory (optimizer, PS)
  std::vector<nn::dense_param*> param_ptrs_;
  std::vector<std::span<float>> buffers_;
  std::unique_ptr<nn::optimizer> opt_;
  std::vector<nn::dense_slots> state_;
  std::optional<nn::embedding_table> table_;
  std::optional<nn::row_slots> table_state_;
  // Staging: the batch's dense rows, its embedding rows and ids, its labels.
  std::vector<float> dense_, emb_rows_, label_f_, probs_;
  std::vector<std::int64_t> label_i_;
  std::vector<std::uint64_t> ids_;
  at::Tensor emb_;
  std::unordered_map<std::uint64_t, std::uint32_t> slot_;
};

expected<std::unique_ptr<torchscript_backend>> torchscript_backend::create(const torchscript_options& o) {
  configure_once(o.threads);
  std::unique_ptr<torchscript_backend> b(new torchscript_backend(o));
  b->classes_ = o.data.num_classes;
  b->width_ = o.data.num_classes == 2 ? 1 : o.data.num_classes;
  if (auto d = b->choose_device(); !d) return d.err();
  if (auto l = b->load(); !l) return l.err();
  if (auto s = b->check_signature(); !s) return s.err();
  if (auto a = b->alias_parameters(); !a) return a.err();
  auto opt = nn::make_optimizer(o.optimizer);
  if (!opt) return opt.err();
  b->opt_ = std::move(*opt);
  b->state_.resize(b->layout_.size());
  if (o.data.sparse_fields > 0) {
    b->table_.emplace(
        "embedding", o.embedding_dim, o.seed,
        nn::embedding_init{nn::embedding_init::kind::normal, static_cast<float>(o.embedding_scale)});
    b->table_state_.emplace(o.embedding_dim, *b->opt_);
  }
  if (auto p = b->probe(); !p) return p.err();
  return b;
}

// "cpu": the module aliases the host buffers; "gpu": the first visible CUDA device, mirrored;
// "cpu-mirror": the GPU's path on the CPU (tests).
expected<void> torchscript_backend::choose_device() {
  if (o_.device == "cpu") return {};
  if (o_.device == "cpu-mirror") {
    mirrored_ = true;
    return {};
  }
  if (o_.device != "gpu")
    return make_unexpected(core_errc::invalid_argument, "[job] device = \"" + o_.device +
                                                            "\": the TorchScript backend runs on cpu or gpu");
  if (!at::hasCUDA())
    return make_unexpected(
        core_errc::invalid_argument,
        "[job] device = \"gpu\" with model type \"torchscript\": this build's libtorch has no CUDA");
  if (!torch::cuda::is_available())
    return make_unexpected(
        core_errc::invalid_argument,
        "[job] device = \"gpu\" with model type \"torchscript\": libtorch sees no CUDA device");
  dev_ = torch::Device(torch::kCUDA, 0);
  mirrored_ = true;
  return {};
}

expected<void> torchscript_backend::load() {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(o_.path, ec))
    return make_unexpected(core_errc::io_error, o_.path + ": no such file (model.path)");
  try {
    mod_ = torch::jit::load(o_.path, torch::Device(torch::kCPU));
    if (dev_ != torch::Device(torch::kCPU)) mod_.to(dev_);
  } catch (const std::exception& e) {
    std::string msg = e.what();
    msg = msg.substr(0, msg.find('\n'));
    return make_unexpected(
        core_errc::invalid_argument,
        o_.path + ": not a TorchScript archive (save it with torch.jit.script(module).save(path)): " + msg);
  }
  mod_.train();
  return {};
}

// forward(self, dense) for dense data, forward(self, dense, emb) with sparse fields; an optional
// loss(self, logits, labels).
expected<void> torchscript_backend::check_signature() {
  auto fwd = mod_.find_method("forward");
  if (!fwd)
    return make_unexpected(core_errc::invalid_argument, o_.path + ": the module has no forward method");
  const std::size_t want = o_.data.sparse_fields > 0 ? 3 : 2;
  const auto& args = fwd->function().getSchema().arguments();
  if (args.size() != want) {
    std::string got;
    for (std::size_t i = 1; i < args.size(); ++i) got += (got.empty() ? "" : ", ") + args[i].name();
    return make_unexpected(
        core_errc::invalid_argument,
        o_.path + ": forward(" + got + ") takes " + std::to_string(args.size() - 1) +
            " inputs; the data has " +
            (want == 3 ? "sparse fields: forward(dense, emb)" : "dense features only: forward(dense)"));
  }
  if (auto l = mod_.find_method("loss")) {
    if (l->function().getSchema().arguments().size() != 3)
      return make_unexpected(core_errc::invalid_argument, o_.path + ": loss must take (logits, labels)");
    custom_loss_ = true;
  }
  return {};
}

// The module's trainable parameters, by name; an error for one troupe cannot train.
expected<std::vector<std::pair<std::string, at::Tensor>>> torchscript_backend::trainable() {
  std::vector<std::pair<std::string, at::Tensor>> train;
  for (const auto& p : mod_.named_parameters(true)) {
    if (p.value.scalar_type() != at::kFloat || !p.value.is_contiguous())
      return make_unexpected(core_errc::invalid_argument,
                             o_.path + ": parameter '" + p.name + "' is " +
                                 std::string(c10::toString(p.value.scalar_type())) +
                                 (p.value.is_contiguous() ? "" : ", not contiguous") +
                                 ": troupe trains contiguous float32 parameters only");
    if (p.value.requires_grad()) train.emplace_back(p.name, p.value);
  }
  return train;
}

// Every trainable parameter into the flat buffers; buffers (running statistics) as spans.
expected<void> torchscript_backend::alias_parameters() {
  auto trained = trainable();
  if (!trained) return trained.err();
  auto& train = *trained;
  std::size_t total = 0;
  for (auto& [n, t] : train) {
    layout_.push_back({n, total, static_cast<std::size_t>(t.numel())});
    total += static_cast<std::size_t>(t.numel());
  }
  values_.assign(total, 0.0f);
  grads_.assign(total, 0.0f);
  auto opts = at::TensorOptions().dtype(at::kFloat);
  const auto n_total = static_cast<std::int64_t>(total);
  mod_values_ = mirrored_ ? torch::zeros({n_total}, opts.device(dev_)) : host_view(values_);
  mod_grads_ = mirrored_ ? torch::zeros({n_total}, opts.device(dev_)) : host_view(grads_);
  torch::NoGradGuard no_grad;
  params_.reserve(train.size());
  for (std::size_t i = 0; i < train.size(); ++i) {
    auto& t = train[i].second;
    const auto off = static_cast<std::int64_t>(layout_[i].offset),
               n = static_cast<std::int64_t>(layout_[i].size);
    float* v = values_.data() + layout_[i].offset;
    float* g = grads_.data() + layout_[i].offset;
    auto host = t.to(torch::kCPU).contiguous();
    std::memcpy(v, host.data_ptr<float>(), layout_[i].size * sizeof(float));
    if (mirrored_) mod_values_.narrow(0, off, n).copy_(t.reshape({n}));
    t.set_data(mod_values_.narrow(0, off, n).view(t.sizes()));
    t.mutable_grad() = mod_grads_.narrow(0, off, n).view(t.sizes());
    nn::shape s{layout_[i].size};
    params_.push_back({layout_[i].name, nn::tensor::view(v, s), nn::tensor::view(g, s), true});
  }
  for (auto& p : params_) param_ptrs_.push_back(&p);
  alias_buffers();
  return {};
}

// Running statistics and the like: spans of the module's own memory on the CPU; on a device,
// spans of host copies that upload() and download_after_step() keep in step.
void torchscript_backend::alias_buffers() {
  for (const auto& b : mod_.named_buffers(true)) {
    if (b.value.scalar_type() != at::kFloat || !b.value.is_contiguous()) continue;
    if (!mirrored_) {
      buffers_.emplace_back(b.value.data_ptr<float>(), static_cast<std::size_t>(b.value.numel()));
      continue;
    }
    auto host = b.value.to(torch::kCPU).contiguous();
    hbuffers_.emplace_back(host.data_ptr<float>(), host.data_ptr<float>() + host.numel());
    dbuffers_.push_back(b.value);
  }
  for (auto& h : hbuffers_) buffers_.emplace_back(h);
}

void torchscript_backend::upload() {
  if (!mirrored_) return;
  torch::NoGradGuard no_grad;
  mod_values_.copy_(host_view(values_));
  for (std::size_t i = 0; i < dbuffers_.size(); ++i) dbuffers_[i].view({-1}).copy_(host_view(hbuffers_[i]));
}

void torchscript_backend::download_after_step() {
  if (!mirrored_) return;
  torch::NoGradGuard no_grad;
  host_view(grads_).copy_(mod_grads_);
  for (std::size_t i = 0; i < dbuffers_.size(); ++i) host_view(hbuffers_[i]).copy_(dbuffers_[i].view({-1}));
}

// One forward on probe_rows rows of zeros: logits of the data's width, before any training starts.
expected<void> torchscript_backend::probe() {
  const std::size_t rows = std::max<std::size_t>(1, o_.probe_rows);
  nn::dataset d;
  d.info = o_.data;
  d.rows = rows;
  d.dense.assign(rows * o_.data.dense_dim, 0.0f);
  d.sparse.assign(rows * o_.data.sparse_fields, 0);
  d.labels.assign(rows, 0.0f);
  torch::NoGradGuard no_grad;
  // In evaluation mode: a training forward would move running statistics (batch norm's).
  mod_.eval();
  auto l = logits(nn::batch(d, 0, rows), false);
  mod_.train();
  if (!l) return l.err();
  const auto n = static_cast<std::int64_t>(rows);
  if (l->dim() != 2 || l->size(0) != n || static_cast<std::size_t>(l->size(1)) != width_)
    return make_unexpected(nn::nn_errc::bad_shape,
                           o_.path + ": forward returns logits of shape " + shape_of(*l) +
                               " for a batch of " + std::to_string(rows) + "; the data has " +
                               std::to_string(classes_) + " classes, so the logits need " +
                               std::to_string(width_) + " column" + (width_ == 1 ? "" : "s") + " ([" +
                               std::to_string(rows) + ", " + std::to_string(width_) + "])");
  return {};
}

std::vector<c10::IValue> torchscript_backend::inputs(const nn::batch& b, bool training) {
  const auto n = static_cast<std::int64_t>(b.size());
  const std::size_t dd = o_.data.dense_dim, fields = o_.data.sparse_fields;
  dense_.resize(b.size() * dd);
  for (std::size_t i = 0; i < b.size(); ++i)
    std::memcpy(dense_.data() + i * dd, b.dense_row(i), dd * sizeof(float));
  auto opts = at::TensorOptions().dtype(at::kFloat);
  std::vector<c10::IValue> in{
      torch::from_blob(dense_.data(), {n, static_cast<std::int64_t>(dd)}, opts).to(dev_)};
  if (fields == 0) return in;
  const std::size_t dim = o_.embedding_dim;
  ids_.resize(b.size() * fields);
  emb_rows_.resize(ids_.size() * dim);
  for (std::size_t i = 0; i < b.size(); ++i)
    for (std::size_t f = 0; f < fields; ++f) {
      ids_[i * fields + f] = b.sparse_row(i)[f];
      std::memcpy(emb_rows_.data() + (i * fields + f) * dim, table_->row(b.sparse_row(i)[f]),
                  dim * sizeof(float));
    }
  emb_ = torch::from_blob(emb_rows_.data(),
                          {n, static_cast<std::int64_t>(fields), static_cast<std::int64_t>(dim)}, opts)
             .to(dev_);
  if (training) emb_.requires_grad_(true);
  in.emplace_back(emb_);
  return in;
}

at::Tensor torchscript_backend::labels(const nn::batch& b) {
  const auto n = static_cast<std::int64_t>(b.size());
  if (width_ == 1) {
    label_f_.resize(b.size());
    for (std::size_t i = 0; i < b.size(); ++i) label_f_[i] = b.label(i);
    return torch::from_blob(label_f_.data(), {n}, at::TensorOptions().dtype(at::kFloat)).to(dev_);
  }
  label_i_.resize(b.size());
  for (std::size_t i = 0; i < b.size(); ++i) label_i_[i] = static_cast<std::int64_t>(b.label(i));
  return torch::from_blob(label_i_.data(), {n}, at::TensorOptions().dtype(at::kLong)).to(dev_);
}

unexpected torchscript_backend::fail(const std::string& what, const nn::batch& b,
                                     const std::exception& e) const {
  std::string msg = e.what();
  // libtorch's messages carry the TorchScript call stack after the first lines: keep the cause.
  if (auto cut = msg.find("\nException raised from"); cut != std::string::npos) msg.resize(cut);
  std::string shapes = "dense [" + std::to_string(b.size()) + ", " + std::to_string(o_.data.dense_dim) + "]";
  if (o_.data.sparse_fields > 0)
    shapes += ", emb [" + std::to_string(b.size()) + ", " + std::to_string(o_.data.sparse_fields) + ", " +
              std::to_string(o_.embedding_dim) + "]";
  return make_unexpected(nn::nn_errc::bad_shape,
                         o_.path + ": " + what + " failed on inputs " + shapes + ": " + msg);
}

expected<at::Tensor> torchscript_backend::logits(const nn::batch& b, bool training) {
  try {
    auto out = mod_.forward(inputs(b, training));
    if (!out.isTensor())
      return make_unexpected(nn::nn_errc::bad_shape, o_.path + ": forward must return one tensor of logits");
    auto t = out.toTensor();
    if (!t.is_floating_point())
      return make_unexpected(nn::nn_errc::bad_shape, o_.path + ": forward returns logits of dtype " +
                                                         std::string(c10::toString(t.scalar_type())) +
                                                         " for a batch of " + std::to_string(b.size()) +
                                                         "; logits must be floating point (float32)");
    if (t.scalar_type() != at::kFloat) t = t.to(at::kFloat);
    if (t.dim() == 1 && width_ == 1) t = t.unsqueeze(1);
    return t;
  } catch (const std::exception& e) {
    return fail("forward", b, e);
  }
}

at::Tensor torchscript_backend::loss(const at::Tensor& logits, const at::Tensor& y) {
  if (custom_loss_) return mod_.run_method("loss", logits, y).toTensor();
  if (width_ == 1) return at::binary_cross_entropy_with_logits(logits.reshape({-1}), y);
  return at::nll_loss(at::log_softmax(logits, 1), y);
}

expected<float> torchscript_backend::compute_gradients(const nn::batch& b) {
  try {
    upload();
    mod_grads_.zero_();  // backward accumulates into it
  } catch (const std::exception& e) {
    return fail("copying the parameters to " + dev_.str(), b, e);
  }
  auto l = logits(b, true);
  if (!l) return l.err();
  try {
    auto lo = loss(*l, labels(b));
    lo.backward();
    download_after_step();
    if (table_) {
      auto g = emb_.grad().to(torch::kCPU).contiguous();
      nn::combine_sparse_rows(ids_, g.data_ptr<float>(), o_.embedding_dim, table_->grad(), slot_);
    }
    return lo.item<float>();
  } catch (const std::exception& e) {
    return fail("loss or backward", b, e);
  }
}

void torchscript_backend::apply_gradients(double lr_scale) {
  const double lr = opt_->learning_rate();
  if (lr_scale != 1.0) opt_->set_learning_rate(lr * lr_scale);
  for (std::size_t i = 0; i < params_.size(); ++i)
    nn::apply_dense(*opt_, params_[i].value, params_[i].grad, state_[i]);
  if (table_) nn::apply_sparse(*opt_, *table_, table_->grad(), *table_state_);
  opt_->set_learning_rate(lr);
}

std::vector<std::uint64_t> torchscript_backend::batch_ids(const nn::batch& b, std::size_t t) {
  std::vector<std::uint64_t> ids;
  if (!table_ || t != 0) return ids;
  for (std::size_t i = 0; i < b.size(); ++i)
    ids.insert(ids.end(), b.sparse_row(i), b.sparse_row(i) + o_.data.sparse_fields);
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

expected<float> torchscript_backend::predict(const nn::batch& b) {
  torch::NoGradGuard no_grad;
  try {
    upload();
  } catch (const std::exception& e) {
    return fail("copying the parameters to " + dev_.str(), b, e);
  }
  mod_.eval();
  auto l = logits(b, false);
  mod_.train();
  if (!l) return l.err();
  try {
    auto lo = loss(*l, labels(b));
    auto p = (width_ == 1 ? at::sigmoid(*l) : at::softmax(*l, 1)).to(torch::kCPU).contiguous();
    probs_.assign(p.data_ptr<float>(), p.data_ptr<float>() + p.numel());
    return lo.item<float>();
  } catch (const std::exception& e) {
    return fail("loss", b, e);
  }
}

}  // namespace

extern "C" trainer_backend* troupe_torchscript_create(int abi, const torchscript_options* o,
                                                      std::string* error) {
  if (abi != kTorchscriptAbi) {
    *error = "libtroupe_torchscript.so was built for another troupe (ABI " + std::to_string(kTorchscriptAbi) +
             ", asked " + std::to_string(abi) + ")";
    return nullptr;
  }
  try {
    auto b = torchscript_backend::create(*o);
    if (!b) {
      *error = b.err().to_string();
      return nullptr;
    }
    return b->release();
  } catch (const std::exception& e) {
    *error = o->path + ": " + e.what();
    return nullptr;
  }
}

}  // namespace troupe::actors
