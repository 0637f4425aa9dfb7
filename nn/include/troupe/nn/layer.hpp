// The layer interface and the layer registry.
//
// A layer maps one or more batched input tensors to one output tensor and back-propagates:
//   infer()    once, at build time: checks the per-example input shapes, creates parameters
//              (deterministically from the seed it is given) and returns the per-example output
//              shape; a mismatch is a bad_shape error naming the layer and the shapes.
//   forward()  out is pre-sized by the caller to [batch, output shape]; layers keep whatever they
//              need for backward (masks, argmax, normalised inputs) in preallocated members.
//   backward() gets dL/d(out); it WRITES (overwrites) dL/d(params) into the parameters' grad
//              tensors (a layer is used once per model, so no accumulation is needed and no
//              zeroing pass is paid), the sparse gradient into its table, and dL/d(input i) into
//              grad_in[i], pre-sized like input i; grad_in[i] may be null (gradient not needed,
//              e.g. the first layer), which layers use to skip work.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "troupe/core/error.hpp"
#include "troupe/nn/data/dataset.hpp"
#include "troupe/nn/tensor.hpp"

namespace troupe::nn {

class embedding_table;

// A named trainable (or, with trainable false, state-only: batch-norm running statistics)
// dense parameter. Names are stable: "<node name>/<param>", e.g. "dense_1/weight".
struct dense_param {
  std::string name;
  tensor value;
  tensor grad;  // same shape as value; empty when !trainable
  bool trainable = true;
};

struct forward_context {
  const batch* input = nullptr;  // the batch being processed (source layers read from it)
  bool training = false;         // dropout active, batch norm uses batch statistics
  std::uint64_t step = 0;        // drives per-step randomness (dropout masks)
};

class layer {
 public:
  virtual ~layer() = default;
  virtual std::string kind() const = 0;
  // The node name given by the model ("dense_1"); parameter and table names start with it.
  const std::string& name() const { return name_; }
  void set_name(std::string name) { name_ = std::move(name); }

  virtual expected<shape> infer(std::span<const shape> inputs, std::uint64_t seed) = 0;
  virtual void forward(const forward_context& ctx, std::span<const tensor* const> in, tensor& out) = 0;
  virtual void backward(const forward_context& ctx, std::span<const tensor* const> in, const tensor& out,
                        const tensor& grad_out, std::span<tensor* const> grad_in) = 0;

  // The layer's dense parameters (owned by the layer; pointers stay valid for its lifetime).
  virtual std::vector<dense_param*> params() { return {}; }
  // The embedding table the layer owns, if any.
  virtual embedding_table* table() { return nullptr; }
  // How many inputs the layer takes (0: a source reading the batch; -1: any number >= 1).
  virtual int arity() const { return 1; }
  // For model export (model.pt, docs/nn.md "Adding a layer"): the layer's evaluation forward as one
  // TorchScript expression of `in` (its inputs' tensors, [n, ...] each) and `params` (its params()'
  // tensors, in order, shaped as their values). None (the default): a model holding the layer trains,
  // but cannot be exported. Built-in layers are written by the exporter itself.
  virtual std::optional<std::string> script(std::span<const std::string> in,
                                            std::span<const std::string> params) const {
    (void)in, (void)params;
    return std::nullopt;
  }

 private:
  std::string name_;
};

// Options of a layer built by name ("dense:units=256", "dropout:rate=0.25"): numbers by key.
using layer_options = std::map<std::string, double>;
using layer_factory = std::function<expected<std::unique_ptr<layer>>(const layer_options&)>;

// Name -> factory. The built-in layers are registered on first use; add your own with a
// layer_registrar (a static object in the file that defines the layer).
class layer_registry {
 public:
  static layer_registry& instance();
  void add(const std::string& name, layer_factory factory);
  // With the option keys the layer accepts: a spec with any other key is a bad_config error.
  void add(const std::string& name, layer_factory factory, std::vector<std::string> keys);
  // "name" or "name:key=value,..."; a bare number is the next of the layer's keys in order
  // ("conv2d:8,3,1" = filters 8, kernel 3, padding 1); a layer added without keys takes one, as "value".
  expected<std::unique_ptr<layer>> create(const std::string& spec) const;
  std::vector<std::string> names() const;

 private:
  layer_registry();
  expected<layer_options> parse(const std::string& spec, const std::string& name,
                                const std::string& rest) const;
  std::map<std::string, layer_factory> factories_;
  std::map<std::string, std::vector<std::string>> keys_;
};

struct layer_registrar {
  layer_registrar(const std::string& name, layer_factory factory) {
    layer_registry::instance().add(name, std::move(factory));
  }
  // With its option keys: any other key is refused, and bare numbers fill the keys in order.
  layer_registrar(const std::string& name, layer_factory factory, std::vector<std::string> keys) {
    layer_registry::instance().add(name, std::move(factory), std::move(keys));
  }
};

// Reads an option with a default, or a bad_config error if it is not an integer in [lo, hi].
expected<std::size_t> option_size(const layer_options& o, const std::string& layer, const std::string& key,
                                  std::size_t def, std::size_t lo, std::size_t hi);

}  // namespace troupe::nn
