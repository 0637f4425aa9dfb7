// A model: a small DAG of layers (added in topological order) ending in logits and a loss, with
// preallocated activations and gradients (sized on the first batch of each size).
//
// Training step:   m.forward(batch, true); m.backward(); then update m.parameters() (dense) and
//                  m.embedding_tables() (sparse rows, table->grad()) with an optimizer.
// Distributed use: parameters() are named dense tensors (value + grad); embedding tables are
//                  separate, with rows readable/writable by id. Not thread-safe.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "troupe/core/error.hpp"
#include "troupe/nn/data/dataset.hpp"
#include "troupe/nn/embedding_table.hpp"
#include "troupe/nn/layer.hpp"
#include "troupe/nn/loss.hpp"

namespace troupe::nn {

struct model_config {
  std::string type = "mlp";  // a name in the model registry: lr, mlp, cnn, wide_deep, deepfm, sequential
  std::vector<std::size_t> hidden = {256, 128};  // mlp / wide_deep / deepfm hidden layers
  std::size_t embedding_dim = 8;                 // wide_deep / deepfm / mlp on sparse data
  double embedding_scale = 0.01;                 // stddev of new embedding rows
  double dropout = 0.0;                          // after each hidden layer (mlp, deep parts)
  std::vector<std::size_t> filters = {32, 64};   // cnn
  double cnn_dropout = 0.25;                     // cnn
  std::vector<std::string> layers;               // sequential: layer specs, "dense:256", "relu"...
  std::uint64_t seed = 1;                        // initial weights and embedding rows
  // type "torchscript": the saved module (a user's PyTorch model, trained through the TorchScript
  // backend, not this registry); type "exported": a model directory (docs/model_format.md) that a
  // prediction job runs. Job files give it relative to themselves (read_job_file resolves it).
  std::string path;
  // Continue training: the job directory or model directory whose parameters, buffers and embedding
  // rows the job starts from (docs/model_format.md, "Continue training"); empty: initial values.
  std::string init;
};

class model {
 public:
  model(std::string type, std::uint64_t seed) : type_(std::move(type)), seed_(seed) {}
  model(const model&) = delete;
  model& operator=(const model&) = delete;

  // --- building (used by the registered builders) ---
  // Adds a layer fed by earlier nodes; returns its node id. Errors surface in finish().
  int add(std::unique_ptr<layer> l, std::vector<int> inputs, std::string name = "");
  // Adds a layer from a registry spec ("dense:256"); an unknown spec is reported by finish().
  int add(const std::string& spec, std::vector<int> inputs, std::string name = "");
  // Source nodes: the batch's dense features, and an embedding of its sparse ids.
  int input(const dataset_info& info);
  int embedding(const dataset_info& info, std::size_t dim, float scale, std::string name);
  // Infers every shape, creates parameters, checks that `output` has the logits width that the
  // data's num_classes needs (1 for binary, num_classes otherwise).
  expected<void> finish(int output, const dataset_info& info);

  // --- running ---
  // Computes logits, probabilities and the mean loss of the batch. training: dropout and batch
  // statistics on, and enables backward(). Shape mismatches with the data are bad_shape errors.
  expected<float> forward(const batch& b, bool training);
  // Gradients of the last training forward: dense params' grad, embedding tables' grad().
  void backward();
  // Probabilities of the last forward: [n, classes], or [n, 1] (click probability) when binary.
  const tensor& probabilities() const { return probs_; }
  // Logits of the last forward: [n, 1] (binary) or [n, classes] (the output node's values).
  const tensor& logits() const { return nodes_[static_cast<std::size_t>(output_)].out; }

  std::vector<dense_param*> parameters();  // all, including state-only (trainable false)
  std::vector<embedding_table*> embedding_tables();
  // The distinct ids that table embedding_tables()[t] will look up for `b`, sorted (what a
  // worker pulls from the parameter servers before forward).
  std::vector<std::uint64_t> batch_ids(const batch& b, std::size_t t);
  const std::string& type() const { return type_; }
  std::size_t num_classes() const { return classes_; }
  loss_kind loss() const { return loss_; }
  std::size_t parameter_count() const;  // dense elements
  std::string summary() const;          // one line per node: name, kind, output shape

  // --- inspection, for backends that mirror the graph (gpu::device_trainer) ---
  struct node_view {
    layer* op = nullptr;
    const std::vector<int>* inputs = nullptr;  // earlier node ids
    shape out_shape;                           // per example
  };
  std::size_t node_count() const { return nodes_.size(); }
  node_view node_at(std::size_t i) const {
    const node& n = nodes_[i];
    return {n.op.get(), &n.inputs, n.out_shape};
  }
  int output_node() const { return output_; }              // -1 before finish()
  const dataset_info& data_info() const { return info_; }  // what finish() was given

 private:
  struct node {
    std::unique_ptr<layer> op;
    std::string spec_error;
    std::vector<int> inputs;
    shape out_shape;
    tensor out, grad, scratch;
    bool needs_grad = false;
    std::vector<const tensor*> in_ptrs;
    std::vector<tensor*> grad_ptrs;
  };
  expected<void> check_batch(const batch& b) const;
  // finish() for node i: its arity and inputs checked, its output shape inferred (its parameters
  // made), its buffers sized. `in_shapes` is scratch.
  expected<void> finish_node(std::size_t i, std::vector<shape>& in_shapes);
  void run_forward(const batch& b, bool training);
  void backward_node(std::size_t i, std::vector<char>& written);

  std::string type_;
  std::uint64_t seed_;
  std::vector<node> nodes_;
  std::map<std::string, int> kind_counts_;
  int output_ = -1, input_node_ = -1;
  bool finished_ = false, can_backward_ = false;
  dataset_info info_;
  std::size_t classes_ = 0;
  loss_kind loss_ = loss_kind::softmax_cross_entropy;
  tensor probs_, grad_logits_;
  std::vector<float> labels_;
  std::vector<char> written_;
  std::vector<std::size_t> add_later_;  // backward: which nodes' gradients are written
  std::optional<batch> last_batch_;
  forward_context ctx_;
  std::uint64_t step_ = 0;
};

// Builds the graph of a model type into `m` and returns the output node (m.finish is called by
// the registry).
using model_builder =
    std::function<expected<int>(model& m, const model_config& config, const dataset_info& info)>;

class model_registry {
 public:
  static model_registry& instance();
  void add(const std::string& type, model_builder builder);
  expected<std::unique_ptr<model>> create(const model_config& config, const dataset_info& info) const;
  std::vector<std::string> names() const;

 private:
  model_registry();
  std::map<std::string, model_builder> builders_;
};

// A static model_registrar in the file that defines a model registers it.
struct model_registrar {
  model_registrar(const std::string& type, model_builder builder) {
    model_registry::instance().add(type, std::move(builder));
  }
};

}  // namespace troupe::nn
