// The TorchScript trainer backend (torchscript_backend.hpp): set-up, the step, the plugin's entry.
#include "torchscript_backend.hpp"

#include <algorithm>

#include "builtin_loss.hpp"
#include "torch_settings.hpp"
#include "troupe/nn/errc.hpp"

namespace troupe::actors {

expected<std::unique_ptr<torchscript_backend>> torchscript_backend::create(const torchscript_options& o) {
  configure_libtorch_once(o.threads);
  std::unique_ptr<torchscript_backend> b(new torchscript_backend(o));
  b->classes_ = o.data.num_classes;
  b->width_ = o.data.num_classes == 2 ? 1 : o.data.num_classes;
  if (auto l = b->load(); !l) return l.err();
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
  auto where = choose_placement(o_.device);
  if (!where) return where.err();
  dev_ = where->device;
  mirrored_ = where->mirrored;
  auto m = load_module(o_.path, dev_);
  if (!m) return m.err();
  mod_ = std::move(*m);
  auto own_loss = check_signature(mod_, o_.path, o_.data.sparse_fields > 0);
  if (!own_loss) return own_loss.err();
  custom_loss_ = *own_loss;
  return {};
}

namespace {
// Nothing to train (every parameter frozen, or none): each step's backward would fail ("element 0 of
// tensors does not require grad"). Sparse ids train the embedding table troupe keeps.
expected<void> check_trainable(std::size_t trainable, const torchscript_options& o) {
  if (trainable > 0 || o.data.sparse_fields > 0) return {};
  return make_unexpected(core_errc::invalid_argument,
                         o.path +
                             ": the module has no trainable parameters (none, or all with requires_grad "
                             "False): there is nothing to train");
}
}  // namespace

// Every trainable parameter into the flat buffers; buffers (running statistics) as spans.
expected<void> torchscript_backend::alias_parameters() {
  auto trained = trainable_parameters(mod_, o_.path);
  if (!trained) return trained.err();
  auto& train = *trained;
  if (auto t = check_trainable(train.size(), o_); !t) return t.err();
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

namespace {
// The module (or submodule) holding the buffer named `name` ("bn.running_mean": bn's), and the
// buffer's own name in it.
std::pair<torch::jit::Module, std::string> owner_of(torch::jit::Module m, const std::string& name) {
  std::size_t at = 0;
  for (auto dot = name.find('.'); dot != std::string::npos; at = dot + 1, dot = name.find('.', at))
    m = m.attr(name.substr(at, dot - at)).toModule();
  return {m, name.substr(at)};
}
}  // namespace

// Running statistics and the like: spans of the module's own memory on the CPU; on a device,
// spans of host copies that upload() and download_after_step() keep in step.
void torchscript_backend::alias_buffers() {
  std::vector<std::string> wide_names;
  for (const auto& b : mod_.named_buffers(true)) {
    if (b.value.scalar_type() != at::kFloat || !b.value.is_contiguous()) {
      if (b.value.is_complex() || b.value.numel() == 0) continue;
      if (!at::isFloatingType(b.value.scalar_type()) && b.value.scalar_type() != at::kBool &&
          b.value.abs().max().item<double>() > 16777216.0)
        continue;  // float32 would round it (1000000007 read 1000000000): left as the module has it
      auto host = b.value.to(torch::kCPU).to(at::kFloat).contiguous();
      wbuffers_.emplace_back(host.data_ptr<float>(), host.data_ptr<float>() + host.numel());
      wide_.push_back(b.value);
      wide_names.push_back(b.name);
      bind(b.name, b.value);
      continue;
    }
    buffer_names_.push_back(b.name);
    bind(b.name, b.value);  // held: the spans below read its memory
    if (!mirrored_) {
      buffers_.emplace_back(b.value.data_ptr<float>(), static_cast<std::size_t>(b.value.numel()));
      continue;
    }
    auto host = b.value.to(torch::kCPU).contiguous();
    hbuffers_.emplace_back(host.data_ptr<float>(), host.data_ptr<float>() + host.numel());
    dbuffers_.push_back(b.value);
  }
  for (auto& h : hbuffers_) buffers_.emplace_back(h);
  wshadow_ = wbuffers_;
  for (std::size_t i = 0; i < wide_.size(); ++i) {  // after every float one: names index for index
    buffers_.emplace_back(wbuffers_[i]);
    buffer_names_.push_back(wide_names[i]);
  }
}

// A buffer the module's forward reassigned (`self.mu = 0.9 * self.mu + ...` rather than in place) is a
// new tensor: its values go into the one this backend holds, whose memory the replica's spans read, and
// the attribute is set back to it. (The spans read the freed tensor: workers crashed with heap
// corruption, and the job ended "ok" with garbage in the exported buffer.)
void torchscript_backend::bind(const std::string& name, const at::Tensor& held) {
  auto [owner, attr] = owner_of(mod_, name);  // once: rebind_buffers runs after every forward
  bound_.push_back({name, std::move(owner), std::move(attr), held});
}

void torchscript_backend::rebind_buffers() {
  torch::NoGradGuard no_grad;
  for (auto& b : bound_) {
    auto now = b.owner.attr(b.attr).toTensor();
    if (now.is_same(b.held)) continue;
    if (now.sizes() != b.held.sizes())
      throw std::runtime_error("the module's forward replaced its buffer '" + b.name + "' of shape " +
                               c10::str(b.held.sizes()) + " with one of shape " + c10::str(now.sizes()) +
                               ": a buffer keeps its shape (assign in place: self." + b.attr +
                               ".copy_(...))");
    b.held.copy_(now);
    b.owner.setattr(b.attr, b.held);
  }
}

void torchscript_backend::upload() {
  torch::NoGradGuard no_grad;
  for (std::size_t i = 0; i < wide_.size(); ++i)
    if (wbuffers_[i] != wshadow_[i]) {  // changed by a sync or a restore: else the module's own stay
      wide_[i].copy_(host_view(wbuffers_[i]).view(wide_[i].sizes()));
      wshadow_[i] = wbuffers_[i];
    }
  if (!mirrored_) return;
  mod_values_.copy_(host_view(values_));
  for (std::size_t i = 0; i < dbuffers_.size(); ++i) dbuffers_[i].view({-1}).copy_(host_view(hbuffers_[i]));
}

void torchscript_backend::download_after_step() {
  torch::NoGradGuard no_grad;
  for (std::size_t i = 0; i < wide_.size(); ++i) {
    host_view(wbuffers_[i]).copy_(wide_[i].reshape({-1}));
    wshadow_[i] = wbuffers_[i];
  }
  if (!mirrored_) return;
  host_view(grads_).copy_(mod_grads_);
  for (std::size_t i = 0; i < dbuffers_.size(); ++i) host_view(hbuffers_[i]).copy_(dbuffers_[i].view({-1}));
}

// One forward on probe_rows rows of zeros: logits of the data's width, before any training starts.
expected<void> torchscript_backend::probe() {
  const std::size_t rows = std::max<std::size_t>(1, o_.probe_rows);
  const auto d = nn::dataset::zeros(o_.data, rows);
  torch::NoGradGuard no_grad;
  // In evaluation mode: a training forward would move running statistics (batch norm's).
  mod_.eval();
  const nn::batch zeros(d, 0, rows);
  auto l = logits(zeros, false);
  mod_.train();
  if (!l) return l.err();
  const auto n = static_cast<std::int64_t>(rows);
  if (l->dim() != 2 || l->size(0) != n || static_cast<std::size_t>(l->size(1)) != width_)
    return make_unexpected(
        nn::nn_errc::bad_shape,
        o_.path + ": forward returns logits of shape " + shape_of(*l) + " for a batch of " +
            std::to_string(rows) + "; the data has " + std::to_string(classes_) +
            " classes, so the logits need " +
            (l->dim() == 2 && l->size(0) != n && static_cast<std::size_t>(l->size(1)) == width_
                 ? "one row per row of the batch"
                 : std::to_string(width_) + " column" + (width_ == 1 ? "" : "s")) +
            " ([" + std::to_string(rows) + ", " + std::to_string(width_) + "])");
  if (custom_loss_) {  // the module's own loss: one number to train on, not one per row
    try {
      auto lo = loss(*l, labels(zeros));
      if (lo.numel() != 1)
        return make_unexpected(nn::nn_errc::bad_shape,
                               o_.path + ": loss(logits, labels) returns a tensor of shape " + shape_of(lo) +
                                   "; training needs one number (reduce it, e.g. .mean())");
    } catch (const std::exception& e) {
      return fail("loss", zeros, e);
    }
  }
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
  for (std::size_t i = 0; i < b.size(); ++i) std::copy_n(b.sparse_row(i), fields, ids_.data() + i * fields);
  emb_rows_.resize(ids_.size() * dim);
  rows_.gather(ids_, *table_, emb_rows_.data());
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

expected<at::Tensor> torchscript_backend::logits(const nn::batch& b, bool training) {
  try {
    auto out = mod_.forward(inputs(b, training));
    // After every forward (the probe's, an evaluation's, a training step's): a buffer it reassigned is
    // the carried tensor again before anything else reads or writes the buffers (a restore, a sync).
    rebind_buffers();
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
    try {
      rebind_buffers();  // a forward that failed after reassigning one
    } catch (const std::exception&) {
    }
    return fail("forward", b, e);
  }
}

at::Tensor torchscript_backend::loss(const at::Tensor& logits, const at::Tensor& y) {
  if (custom_loss_) return mod_.run_method("loss", logits, y).toTensor();
  if (width_ == 1) return at::binary_cross_entropy_with_logits(logits.reshape({-1}), y);
  return at::nll_loss(at::log_softmax(logits, 1), y);
}

expected<float> torchscript_backend::backward(const nn::batch& b, const at::Tensor& logits) {
  const std::size_t n = b.size();
  const bool host = !custom_loss_ && logits.device().is_cpu() && logits.scalar_type() == at::kFloat &&
                    logits.dim() == 2 && static_cast<std::size_t>(logits.size(0)) == n &&
                    static_cast<std::size_t>(logits.size(1)) == width_;
  if (!host) {
    auto lo = loss(logits, labels(b));
    lo.backward();
    return lo.item<float>();
  }
  auto l = logits.contiguous();
  label_f_.resize(n);
  for (std::size_t i = 0; i < n; ++i) label_f_[i] = b.label(i);
  loss_grad_.resize(n * width_);
  auto value =
      width_ == 1 ? expected<float>(logistic_loss(l.data_ptr<float>(), label_f_.data(), n, loss_grad_.data()))
                  : softmax_cross_entropy(l.data_ptr<float>(), label_f_.data(), n, width_, loss_grad_.data());
  if (!value) return fail("loss", b, std::invalid_argument(value.err().to_string()));
  l.backward(torch::from_blob(loss_grad_.data(), l.sizes(), at::TensorOptions().dtype(at::kFloat)));
  return value;
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
    auto loss = backward(b, *l);
    if (!loss) return loss;
    download_after_step();
    if (table_) {
      auto g = emb_.grad().to(torch::kCPU).contiguous();
      rows_.combine(g.data_ptr<float>(), o_.embedding_dim, table_->grad());
    }
    return loss;
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
  if (!table_ || t != 0) return {};
  return nn::sorted_distinct_ids(b);
}

expected<float> torchscript_backend::predict(const nn::batch& b) {
  // No autograd state at all (no version counters, no views tracked): nothing here trains.
  c10::InferenceMode inference;
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
