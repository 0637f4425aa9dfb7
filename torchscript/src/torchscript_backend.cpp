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
#include <ATen/Parallel.h>
#include <malloc.h>
#include <torch/csrc/jit/runtime/graph_executor.h>
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
  expected<void> load();
  expected<void> check_signature();
  expected<void> alias_parameters();
  expected<void> probe();
  // The batch's inputs as tensors over troupe's staging buffers.
  std::vector<c10::IValue> inputs(const nn::batch& b, bool training);
  at::Tensor labels(const nn::batch& b);
  expected<at::Tensor> logits(const nn::batch& b, bool training);
  at::Tensor loss(const at::Tensor& logits, const at::Tensor& labels);
  unexpected fail(const std::string& what, const nn::batch& b, const std::exception& e) const;

  torchscript_options o_;
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

expected<void> torchscript_backend::load() {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(o_.path, ec))
    return make_unexpected(core_errc::io_error, o_.path + ": no such file (model.path)");
  try {
    mod_ = torch::jit::load(o_.path);
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

// Every trainable parameter into the flat buffers; buffers (running statistics) as spans.
expected<void> torchscript_backend::alias_parameters() {
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
  std::size_t total = 0;
  for (auto& [n, t] : train) {
    layout_.push_back({n, total, static_cast<std::size_t>(t.numel())});
    total += static_cast<std::size_t>(t.numel());
  }
  values_.assign(total, 0.0f);
  grads_.assign(total, 0.0f);
  torch::NoGradGuard no_grad;
  params_.reserve(train.size());
  for (std::size_t i = 0; i < train.size(); ++i) {
    auto& t = train[i].second;
    float* v = values_.data() + layout_[i].offset;
    float* g = grads_.data() + layout_[i].offset;
    std::memcpy(v, t.data_ptr<float>(), layout_[i].size * sizeof(float));
    auto opts = at::TensorOptions().dtype(at::kFloat);
    t.set_data(torch::from_blob(v, t.sizes(), opts));
    t.mutable_grad() = torch::from_blob(g, t.sizes(), opts);
    nn::shape s{layout_[i].size};
    params_.push_back({layout_[i].name, nn::tensor::view(v, s), nn::tensor::view(g, s), true});
  }
  for (auto& p : params_) param_ptrs_.push_back(&p);
  for (const auto& b : mod_.named_buffers(true))
    if (b.value.scalar_type() == at::kFloat && b.value.is_contiguous())
      buffers_.emplace_back(b.value.data_ptr<float>(), static_cast<std::size_t>(b.value.numel()));
  return {};
}

// One forward on two rows of zeros: logits of the data's width, before any training starts.
expected<void> torchscript_backend::probe() {
  nn::dataset d;
  d.info = o_.data;
  d.rows = 2;
  d.dense.assign(2 * o_.data.dense_dim, 0.0f);
  d.sparse.assign(2 * o_.data.sparse_fields, 0);
  d.labels.assign(2, 0.0f);
  torch::NoGradGuard no_grad;
  auto l = logits(nn::batch(d, 0, 2), false);
  if (!l) return l.err();
  if (l->dim() != 2 || l->size(0) != 2 || static_cast<std::size_t>(l->size(1)) != width_)
    return make_unexpected(nn::nn_errc::bad_shape,
                           o_.path + ": forward returns logits of shape " + shape_of(*l) +
                               " for a batch of 2; the data has " + std::to_string(classes_) +
                               " classes, so the logits need " + std::to_string(width_) + " column" +
                               (width_ == 1 ? "" : "s") + " ([2, " + std::to_string(width_) + "])");
  return {};
}

std::vector<c10::IValue> torchscript_backend::inputs(const nn::batch& b, bool training) {
  const auto n = static_cast<std::int64_t>(b.size());
  const std::size_t dd = o_.data.dense_dim, fields = o_.data.sparse_fields;
  dense_.resize(b.size() * dd);
  for (std::size_t i = 0; i < b.size(); ++i)
    std::memcpy(dense_.data() + i * dd, b.dense_row(i), dd * sizeof(float));
  auto opts = at::TensorOptions().dtype(at::kFloat);
  std::vector<c10::IValue> in{torch::from_blob(dense_.data(), {n, static_cast<std::int64_t>(dd)}, opts)};
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
                          {n, static_cast<std::int64_t>(fields), static_cast<std::int64_t>(dim)}, opts);
  if (training) emb_.requires_grad_(true);
  in.emplace_back(emb_);
  return in;
}

at::Tensor torchscript_backend::labels(const nn::batch& b) {
  const auto n = static_cast<std::int64_t>(b.size());
  if (width_ == 1) {
    label_f_.resize(b.size());
    for (std::size_t i = 0; i < b.size(); ++i) label_f_[i] = b.label(i);
    return torch::from_blob(label_f_.data(), {n}, at::TensorOptions().dtype(at::kFloat));
  }
  label_i_.resize(b.size());
  for (std::size_t i = 0; i < b.size(); ++i) label_i_[i] = static_cast<std::int64_t>(b.label(i));
  return torch::from_blob(label_i_.data(), {n}, at::TensorOptions().dtype(at::kLong));
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
  std::fill(grads_.begin(), grads_.end(), 0.0f);
  auto l = logits(b, true);
  if (!l) return l.err();
  try {
    auto lo = loss(*l, labels(b));
    lo.backward();
    if (table_) {
      auto g = emb_.grad().contiguous();
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
  mod_.eval();
  auto l = logits(b, false);
  mod_.train();
  if (!l) return l.err();
  try {
    auto lo = loss(*l, labels(b));
    auto p = (width_ == 1 ? at::sigmoid(*l) : at::softmax(*l, 1)).contiguous();
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
  if (o->device != "cpu") {
    *error = "[job] device = \"" + o->device +
             "\" with model type \"torchscript\": this build's libtorch has no CUDA";
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
