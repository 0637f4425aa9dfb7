#include <algorithm>
#include <cmath>

#include "troupe/nn/errc.hpp"
#include "troupe/nn/layers.hpp"

namespace troupe::nn {
namespace {

using layer_ptr = expected<std::unique_ptr<layer>>;

double get(const layer_options& o, const std::string& key, double def) {
  auto it = o.find(key);
  return it == o.end() ? def : it->second;
}

template <class T, class... A>
layer_ptr make(A&&... a) {
  return std::unique_ptr<layer>(std::make_unique<T>(std::forward<A>(a)...));
}

template <class T>
layer_ptr make_plain(const layer_options&) {
  return make<T>();
}

layer_ptr make_dense(const layer_options& o) {
  auto units = option_size(o, "dense", "units", 0, 1, 1u << 24);
  if (!units) return units.err();
  return make<dense_layer>(*units);
}

layer_ptr make_dropout(const layer_options& o) {
  double rate = get(o, "rate", 0.5);
  if (!(rate >= 0 && rate < 1))
    return make_unexpected(nn_errc::bad_config, "layer 'dropout': rate must be in [0, 1)");
  return make<dropout_layer>(static_cast<float>(rate));
}

layer_ptr make_conv2d(const layer_options& o) {
  auto f = option_size(o, "conv2d", "filters", 0, 1, 1u << 16);
  auto k = option_size(o, "conv2d", "kernel", 3, 1, 64);
  auto p = option_size(o, "conv2d", "padding", 0, 0, 64);
  if (!f) return f.err();
  if (!k) return k.err();
  if (!p) return p.err();
  return make<conv2d_layer>(*f, *k, *p);
}

layer_ptr make_maxpool2d(const layer_options& o) {
  auto p = option_size(o, "maxpool2d", "pool", 2, 1, 64);
  if (!p) return p.err();
  return make<maxpool2d_layer>(*p);
}

layer_ptr make_batchnorm(const layer_options& o) {
  return make<batch_norm_layer>(static_cast<float>(get(o, "momentum", 0.99)),
                                static_cast<float>(get(o, "epsilon", 1e-3)));
}

layer_ptr make_embedding(const layer_options& o) {
  auto d = option_size(o, "embedding", "dim", 8, 1, 4096);
  auto first = option_size(o, "embedding", "first_field", 0, 0, 1u << 20);
  auto n = option_size(o, "embedding", "fields", 0, 0, 1u << 20);
  if (!d) return d.err();
  if (!first) return first.err();
  if (!n) return n.err();
  return make<embedding_layer>(*d, static_cast<float>(get(o, "scale", 0.01)), *first, *n);
}

struct builtin {
  const char* name;
  layer_ptr (*factory)(const layer_options&);
  bool checked;  // options outside `keys` refused (batchnorm takes any)
  std::vector<std::string> keys;
};

void register_builtins(layer_registry& r) {
  const builtin table[] = {
      {"dense", make_dense, true, {"units"}},
      {"relu", make_plain<relu_layer>, true, {}},
      {"sigmoid", make_plain<sigmoid_layer>, true, {}},
      {"flatten", make_plain<flatten_layer>, true, {}},
      {"fm", make_plain<fm_layer>, true, {}},
      {"concat", make_plain<concat_layer>, true, {}},
      {"add", make_plain<add_layer>, true, {}},
      {"sum", make_plain<sum_layer>, true, {}},
      {"dropout", make_dropout, true, {"rate"}},
      {"conv2d", make_conv2d, true, {"filters", "kernel", "padding"}},
      {"maxpool2d", make_maxpool2d, true, {"pool"}},
      {"batchnorm", make_batchnorm, false, {}},
      {"embedding", make_embedding, true, {"dim", "scale", "first_field", "fields"}},
  };
  for (const auto& b : table) {
    if (b.checked)
      r.add(b.name, b.factory, b.keys);
    else
      r.add(b.name, b.factory);
  }
}

// The key a bare number after ':' stands for.
const char* positional_key(const std::string& name) {
  if (name == "dense") return "units";
  if (name == "conv2d") return "filters";
  if (name == "dropout") return "rate";
  if (name == "maxpool2d") return "pool";
  if (name == "embedding") return "dim";
  return "value";
}

}  // namespace

layer_registry::layer_registry() {
  register_builtins(*this);
}

layer_registry& layer_registry::instance() {
  static layer_registry r;
  return r;
}

void layer_registry::add(const std::string& name, layer_factory factory) {
  factories_[name] = std::move(factory);
}

void layer_registry::add(const std::string& name, layer_factory factory, std::vector<std::string> keys) {
  factories_[name] = std::move(factory);
  keys_[name] = std::move(keys);
}

std::vector<std::string> layer_registry::names() const {
  std::vector<std::string> out;
  for (const auto& [n, f] : factories_) out.push_back(n);
  return out;
}

expected<std::unique_ptr<layer>> layer_registry::create(const std::string& spec) const {
  const auto colon = spec.find(':');
  const std::string name = spec.substr(0, colon);
  auto it = factories_.find(name);
  if (it == factories_.end())
    return make_unexpected(nn_errc::unknown_name, "layer '" + name + "' is not registered");
  layer_options opts;
  if (colon != std::string::npos) {
    std::string rest = spec.substr(colon + 1);
    for (std::size_t pos = 0; pos <= rest.size();) {
      std::size_t comma = rest.find(',', pos);
      std::string item = rest.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
      pos = comma == std::string::npos ? rest.size() + 1 : comma + 1;
      if (item.empty()) continue;
      auto eq = item.find('=');
      std::string key = eq == std::string::npos ? positional_key(name) : item.substr(0, eq);
      std::string val = eq == std::string::npos ? item : item.substr(eq + 1);
      char* end = nullptr;
      double v = std::strtod(val.c_str(), &end);
      if (val.empty() || *end != '\0')
        return make_unexpected(nn_errc::bad_config,
                               "layer spec '" + spec + "': '" + val + "' is not a number");
      opts[key] = v;
    }
  }
  if (auto k = keys_.find(name); k != keys_.end())
    for (const auto& [key, v] : opts)
      if (std::find(k->second.begin(), k->second.end(), key) == k->second.end())
        return make_unexpected(nn_errc::bad_config,
                               "layer spec '" + spec + "': layer '" + name + "' has no option '" + key + "'");
  return it->second(opts);
}

expected<std::size_t> option_size(const layer_options& o, const std::string& layer, const std::string& key,
                                  std::size_t def, std::size_t lo, std::size_t hi) {
  auto it = o.find(key);
  if (it == o.end()) {
    if (def < lo)
      return make_unexpected(nn_errc::bad_config, "layer '" + layer + "': option '" + key + "' is required");
    return def;
  }
  const double v = it->second;
  if (v != std::floor(v) || v < static_cast<double>(lo) || v > static_cast<double>(hi))
    return make_unexpected(nn_errc::bad_config, "layer '" + layer + "': option '" + key +
                                                    "' must be an integer in [" + std::to_string(lo) + ", " +
                                                    std::to_string(hi) + "], got " + std::to_string(v));
  return static_cast<std::size_t>(v);
}

}  // namespace troupe::nn
