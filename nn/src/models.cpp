// The built-in models. Each is one builder function; user models register the same way with a
// model_registrar in their own file (see docs/nn.md).
#include "troupe/nn/errc.hpp"
#include "troupe/nn/layers.hpp"
#include "troupe/nn/model.hpp"

namespace troupe::nn {
namespace {

std::size_t logits_width(const dataset_info& info) {
  return info.num_classes <= 2 ? 1 : info.num_classes;
}

unexpected config_error(const model_config& c, const std::string& why) {
  return make_unexpected(nn_errc::bad_config, "model.type '" + c.type + "': " + why);
}

// hidden dense+relu(+dropout) layers then the logits layer.
int mlp_tower(model& m, int x, const model_config& c, std::size_t out, const std::string& prefix) {
  for (std::size_t i = 0; i < c.hidden.size(); ++i) {
    x = m.add(std::make_unique<dense_layer>(c.hidden[i]), {x}, prefix + "dense_" + std::to_string(i + 1));
    x = m.add(std::make_unique<relu_layer>(), {x}, prefix + "relu_" + std::to_string(i + 1));
    if (c.dropout > 0)
      x = m.add(std::make_unique<dropout_layer>(static_cast<float>(c.dropout)), {x},
                prefix + "dropout_" + std::to_string(i + 1));
  }
  return m.add(std::make_unique<dense_layer>(out), {x}, prefix + "logits");
}

// The deep part's input: flattened embeddings of the sparse fields, plus the dense features.
int deep_input(model& m, const dataset_info& info, int emb) {
  int flat = m.add(std::make_unique<flatten_layer>(), {emb}, "embedding_flat");
  if (info.dense_dim == 0) return flat;
  int dense = m.add(std::make_unique<flatten_layer>(), {m.input(info)}, "dense_flat");
  return m.add(std::make_unique<concat_layer>(), {flat, dense}, "deep_input");
}

// The linear part: one weight per id (an embedding of dim 1, zeros initially) summed, plus a
// dense layer on the dense features.
int wide_part(model& m, const dataset_info& info, std::vector<int>& terms) {
  if (info.sparse_fields > 0) {
    int w = m.embedding(info, 1, 0.0f, "linear");
    terms.push_back(m.add(std::make_unique<sum_layer>(), {w}, "linear_sum"));
  }
  if (info.dense_dim > 0)
    terms.push_back(m.add(std::make_unique<dense_layer>(1), {m.input(info)}, "linear_dense"));
  return static_cast<int>(terms.size());
}

expected<int> build_lr(model& m, const model_config&, const dataset_info& info) {
  if (info.num_classes > 2)
    return m.add(std::make_unique<dense_layer>(info.num_classes), {m.input(info)}, "logits");
  std::vector<int> terms;
  wide_part(m, info, terms);
  if (info.sparse_fields > 0 && info.dense_dim == 0) {
    // sum_layer has no bias: add one through a 1->1 dense layer.
    return m.add(std::make_unique<dense_layer>(1), {terms[0]}, "logits");
  }
  return terms.size() == 1 ? terms[0] : m.add(std::make_unique<add_layer>(), terms, "logits_sum");
}

expected<int> build_mlp(model& m, const model_config& c, const dataset_info& info) {
  int x;
  if (info.sparse_fields > 0)
    x = deep_input(m, info,
                   m.embedding(info, c.embedding_dim, static_cast<float>(c.embedding_scale), "embedding"));
  else
    x = m.input(info);
  return mlp_tower(m, x, c, logits_width(info), "");
}

// ElasticDL's MNIST CNN: conv 32 3x3 relu, conv 64 3x3 relu, batch norm, max pool 2x2,
// dropout 0.25, flatten, dense 10.
expected<int> build_cnn(model& m, const model_config& c, const dataset_info& info) {
  if (info.image_shape[0] == 0)
    return config_error(c, "needs image data (data.source's dataset has no image shape)");
  if (c.filters.size() != 2) return config_error(c, "model.filters must list 2 sizes (two conv layers)");
  int x = m.input(info);
  x = m.add(std::make_unique<conv2d_layer>(c.filters[0], 3), {x}, "conv_1");
  x = m.add(std::make_unique<relu_layer>(), {x}, "relu_1");
  x = m.add(std::make_unique<conv2d_layer>(c.filters[1], 3), {x}, "conv_2");
  x = m.add(std::make_unique<relu_layer>(), {x}, "relu_2");
  x = m.add(std::make_unique<batch_norm_layer>(), {x}, "batchnorm");
  x = m.add(std::make_unique<maxpool2d_layer>(2), {x}, "maxpool");
  x = m.add(std::make_unique<dropout_layer>(static_cast<float>(c.cnn_dropout)), {x}, "dropout");
  x = m.add(std::make_unique<flatten_layer>(), {x}, "flatten");
  return m.add(std::make_unique<dense_layer>(logits_width(info)), {x}, "logits");
}

expected<int> build_ctr(model& m, const model_config& c, const dataset_info& info, bool fm) {
  if (info.sparse_fields == 0)
    return config_error(c, "needs sparse categorical fields (data.source's dataset has none)");
  if (info.num_classes > 2)
    return config_error(
        c, "is a binary (CTR) model, the data has " + std::to_string(info.num_classes) + " classes");
  std::vector<int> terms;
  wide_part(m, info, terms);
  int emb = m.embedding(info, c.embedding_dim, static_cast<float>(c.embedding_scale), "embedding");
  if (fm) terms.push_back(m.add(std::make_unique<fm_layer>(), {emb}, "fm"));
  terms.push_back(mlp_tower(m, deep_input(m, info, emb), c, 1, "deep_"));
  return m.add(std::make_unique<add_layer>(), terms, "logits_sum");
}

expected<int> build_sequential(model& m, const model_config& c, const dataset_info& info) {
  if (c.layers.empty()) return config_error(c, "model.layers must list at least one layer spec");
  int x = m.input(info);
  // A bad entry is named by the key and its place in the list (the error named the spec alone,
  // "nn: bad configuration: layer spec ..."); an unknown layer lists the registered ones.
  const auto& registry = layer_registry::instance();
  for (std::size_t i = 0; i < c.layers.size(); ++i) {
    auto l = registry.create(c.layers[i]);
    if (!l) {
      std::string why = l.err().context();
      const std::string said = "layer spec '" + c.layers[i] + "': ";  // said once, before it
      if (why.rfind(said, 0) == 0) why.erase(0, said.size());
      if (l.err() == nn_errc::unknown_name) {
        std::string known;
        for (const auto& n : registry.names()) known += (known.empty() ? "" : ", ") + n;
        why += " (registered: " + known + ")";
      }
      return config_error(c, "model.layers[" + std::to_string(i) + "] '" + c.layers[i] + "': " + why);
    }
    x = m.add(std::move(*l), {x});
  }
  return x;
}

}  // namespace

model_registry::model_registry() {
  add("lr", build_lr);
  add("mlp", build_mlp);
  add("cnn", build_cnn);
  add("wide_deep",
      [](model& m, const model_config& c, const dataset_info& i) { return build_ctr(m, c, i, false); });
  add("deepfm",
      [](model& m, const model_config& c, const dataset_info& i) { return build_ctr(m, c, i, true); });
  add("sequential", build_sequential);
}

model_registry& model_registry::instance() {
  static model_registry r;
  return r;
}

void model_registry::add(const std::string& type, model_builder builder) {
  builders_[type] = std::move(builder);
}

std::vector<std::string> model_registry::names() const {
  std::vector<std::string> out;
  for (const auto& [n, b] : builders_) out.push_back(n);
  return out;
}

expected<std::unique_ptr<model>> model_registry::create(const model_config& c,
                                                        const dataset_info& info) const {
  auto it = builders_.find(c.type);
  if (it == builders_.end()) {
    std::string known;
    for (const auto& n : names()) known += (known.empty() ? "" : ", ") + n;
    return make_unexpected(nn_errc::unknown_name,
                           "model type '" + c.type + "' is not registered (known: " + known + ")");
  }
  for (auto h : c.hidden)
    if (h == 0) return config_error(c, "model.hidden sizes must be > 0");
  if (c.embedding_dim == 0) return config_error(c, "model.embedding_dim must be > 0");
  if (!(c.dropout >= 0 && c.dropout < 1)) return config_error(c, "model.dropout must be in [0, 1)");
  auto m = std::make_unique<model>(c.type, c.seed);
  auto out = it->second(*m, c, info);
  if (!out) return out.err();
  if (auto r = m->finish(*out, info); !r) return r.err();
  return m;
}

}  // namespace troupe::nn
