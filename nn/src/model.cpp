#include "troupe/nn/model.hpp"

#include <algorithm>
#include <cstring>

#include "troupe/nn/errc.hpp"
#include "troupe/nn/layers.hpp"
#include "troupe/nn/random.hpp"

namespace troupe::nn {

int model::add(std::unique_ptr<layer> l, std::vector<int> inputs, std::string name) {
  node n;
  if (name.empty()) name = l->kind() + "_" + std::to_string(++kind_counts_[l->kind()]);
  l->set_name(std::move(name));
  n.op = std::move(l);
  n.inputs = std::move(inputs);
  nodes_.push_back(std::move(n));
  return static_cast<int>(nodes_.size()) - 1;
}

int model::add(const std::string& spec, std::vector<int> inputs, std::string name) {
  auto l = layer_registry::instance().create(spec);
  if (l) return add(std::move(*l), std::move(inputs), std::move(name));
  // Keep a placeholder so node ids stay valid; finish() reports the error.
  int id = add(std::make_unique<flatten_layer>(), std::move(inputs), std::move(name));
  nodes_[static_cast<std::size_t>(id)].spec_error = l.err().to_string();
  return id;
}

int model::input(const dataset_info& info) {
  if (input_node_ >= 0) return input_node_;
  shape s = info.image_shape[0] ? shape{info.image_shape[0], info.image_shape[1], info.image_shape[2]}
                                : shape{info.dense_dim};
  return input_node_ = add(std::make_unique<input_layer>(s), {}, "input");
}

int model::embedding(const dataset_info& info, std::size_t dim, float scale, std::string name) {
  auto l = std::make_unique<embedding_layer>(dim, scale);
  l->set_available_fields(info.sparse_fields);
  return add(std::move(l), {}, std::move(name));
}

expected<void> model::finish_node(std::size_t i, std::vector<shape>& in_shapes) {
  auto fail = [&](const std::string& why) {
    return make_unexpected(nn_errc::bad_config, "model '" + type_ + "': " + why);
  };
  node& n = nodes_[i];
  if (!n.spec_error.empty()) return fail(n.spec_error);
  const int arity = n.op->arity();
  if ((arity >= 0 && static_cast<int>(n.inputs.size()) != arity) || (arity < 0 && n.inputs.empty()))
    return fail("layer '" + n.op->name() + "' takes " +
                (arity < 0 ? std::string("at least 1") : std::to_string(arity)) + " inputs, got " +
                std::to_string(n.inputs.size()));
  in_shapes.clear();
  for (int j : n.inputs) {
    if (j < 0 || j >= static_cast<int>(i))
      return fail("layer '" + n.op->name() + "' has an input that is not an earlier node");
    in_shapes.push_back(nodes_[static_cast<std::size_t>(j)].out_shape);
    n.needs_grad = n.needs_grad || nodes_[static_cast<std::size_t>(j)].needs_grad;
  }
  const std::uint64_t seed = mix3(seed_, std::hash<std::string>{}(n.op->name()), 0x1a7e5);
  auto s = n.op->infer(in_shapes, seed);
  if (!s) return std::move(s).err().wrap("model '" + type_ + "'");
  n.out_shape = *s;
  n.needs_grad = n.needs_grad || !n.op->params().empty() || n.op->table() != nullptr;
  n.in_ptrs.resize(n.inputs.size());
  n.grad_ptrs.resize(n.inputs.size());
  return {};
}

expected<void> model::finish(int output, const dataset_info& info) {
  auto fail = [&](nn_errc c, const std::string& why) {
    return make_unexpected(c, "model '" + type_ + "': " + why);
  };
  if (output < 0 || output >= static_cast<int>(nodes_.size()))
    return fail(nn_errc::bad_config, "no output node");
  std::vector<shape> in_shapes;
  for (std::size_t i = 0; i < nodes_.size(); ++i)
    if (auto f = finish_node(i, in_shapes); !f) return f;
  classes_ = info.num_classes < 2 ? 2 : info.num_classes;
  loss_ = classes_ == 2 ? loss_kind::sigmoid_bce : loss_kind::softmax_cross_entropy;
  const std::size_t want = classes_ == 2 ? 1 : classes_;
  const shape& out = nodes_[static_cast<std::size_t>(output)].out_shape;
  if (out.size() != want)
    return fail(nn_errc::bad_shape, "output '" + nodes_[static_cast<std::size_t>(output)].op->name() +
                                        "' is " + out.to_string() + " but " + std::to_string(classes_) +
                                        " classes need " + std::to_string(want) + " logits");
  output_ = output;
  info_ = info;
  finished_ = true;
  return {};
}

expected<void> model::check_batch(const batch& b) const {
  auto fail = [&](const std::string& why) {
    return make_unexpected(nn_errc::bad_shape,
                           "model '" + type_ + "': batch from '" + b.data().info.name + "': " + why);
  };
  if (!finished_)
    return make_unexpected(nn_errc::bad_config, "model '" + type_ + "': forward before finish()");
  if (b.size() == 0) return fail("empty batch");
  const auto& d = b.data().info;
  if (d.dense_dim != info_.dense_dim)
    return fail("dense_dim " + std::to_string(d.dense_dim) + ", the model was built for " +
                std::to_string(info_.dense_dim));
  if (d.sparse_fields != info_.sparse_fields)
    return fail("sparse_fields " + std::to_string(d.sparse_fields) + ", the model was built for " +
                std::to_string(info_.sparse_fields));
  return {};
}

void model::run_forward(const batch& b, bool training) {
  last_batch_.emplace(b);
  ctx_ = {&*last_batch_, training, step_++};
  for (node& n : nodes_) {
    n.out.resize(n.out_shape.batched(b.size()));
    for (std::size_t k = 0; k < n.inputs.size(); ++k)
      n.in_ptrs[k] = &nodes_[static_cast<std::size_t>(n.inputs[k])].out;
    n.op->forward(ctx_, n.in_ptrs, n.out);
  }
}

expected<float> model::forward(const batch& b, bool training) {
  if (auto r = check_batch(b); !r) return r.err();
  labels_.resize(b.size());
  for (std::size_t i = 0; i < b.size(); ++i) {
    labels_[i] = b.label(i);
    if (!(labels_[i] >= 0 && labels_[i] < static_cast<float>(classes_)))
      return make_unexpected(nn_errc::bad_shape, "model '" + type_ + "': row " + std::to_string(b.row(i)) +
                                                     " of '" + b.data().info.name + "' has label " +
                                                     std::to_string(labels_[i]) + " outside [0, " +
                                                     std::to_string(classes_) + ")");
  }
  run_forward(b, training);
  can_backward_ = training;
  return loss_forward(loss_, nodes_[static_cast<std::size_t>(output_)].out, labels_, probs_);
}

void model::backward() {
  if (!can_backward_) return;
  node& out = nodes_[static_cast<std::size_t>(output_)];
  loss_backward(loss_, probs_, labels_, out.grad);
  written_.assign(nodes_.size(), 0);
  written_[static_cast<std::size_t>(output_)] = 1;
  for (std::size_t i = static_cast<std::size_t>(output_) + 1; i-- > 0;)
    if (written_[i]) backward_node(i, written_);
}

// Runs node i's backward. An input fed to several consumers gets the first one's gradient
// written in place and the others' added from a scratch tensor.
void model::backward_node(std::size_t i, std::vector<char>& written) {
  node& n = nodes_[i];
  std::vector<std::size_t>& add_later = add_later_;
  add_later.clear();
  for (std::size_t k = 0; k < n.inputs.size(); ++k) {
    const auto j = static_cast<std::size_t>(n.inputs[k]);
    node& in = nodes_[j];
    if (!in.needs_grad) {
      n.grad_ptrs[k] = nullptr;
    } else if (!written[j]) {
      in.grad.resize(in.out.dims());
      n.grad_ptrs[k] = &in.grad;
      written[j] = 1;
    } else {
      in.scratch.resize(in.out.dims());
      n.grad_ptrs[k] = &in.scratch;
      add_later.push_back(j);
    }
  }
  n.op->backward(ctx_, n.in_ptrs, n.out, n.grad, n.grad_ptrs);
  for (std::size_t j : add_later) {
    tensor& g = nodes_[j].grad;
    const tensor& s = nodes_[j].scratch;
    for (std::size_t e = 0; e < g.size(); ++e) g[e] += s[e];
  }
}

std::vector<dense_param*> model::parameters() {
  std::vector<dense_param*> out;
  for (auto& n : nodes_)
    for (auto* p : n.op->params()) out.push_back(p);
  return out;
}

std::vector<embedding_table*> model::embedding_tables() {
  std::vector<embedding_table*> out;
  for (auto& n : nodes_)
    if (auto* t = n.op->table()) out.push_back(t);
  return out;
}

std::vector<std::uint64_t> model::batch_ids(const batch& b, std::size_t t) {
  std::vector<std::uint64_t> ids;
  std::size_t seen = 0;
  for (auto& n : nodes_) {
    if (!n.op->table()) continue;
    if (seen++ != t) continue;
    static_cast<const embedding_layer&>(*n.op).collect_ids(b, ids);
    std::sort(ids.begin(), ids.end());
    ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  }
  return ids;
}

std::size_t model::parameter_count() const {
  std::size_t total = 0;
  for (auto& n : nodes_)
    for (auto* p : n.op->params()) total += p->value.size();
  return total;
}

std::string model::summary() const {
  std::string s;
  for (const auto& n : nodes_)
    s += n.op->name() + " (" + n.op->kind() + ") -> " + n.out_shape.to_string() + "\n";
  return s;
}

}  // namespace troupe::nn
