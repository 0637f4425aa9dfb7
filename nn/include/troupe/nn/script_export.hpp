// A built-in model as TorchScript source: the forward pass of an nn::model's graph in evaluation
// (dropout off, batch norm on its running statistics), written as the body of a TorchScript
// module's `forward`, so that a module defined from it (torch::jit::Module::define) and given the
// model's tensors computes the model's logits. No libtorch here: the plugin that writes model.pt
// (torchscript/) defines the module from this description (docs/model_format.md).
//
// The module reads:
//   - each dense parameter of the model (trainable or state) as an attribute `attr` (the
//     parameter's name with every character outside [A-Za-z0-9_] made '_', prefixed "p_");
//   - each embedding table t as two attributes: `emb_ids_<t>` (int64, sorted ascending as signed
//     values: the ids the table holds) and `emb_rows_<t>` ([ids, dim] float32, row i for id i);
//     an id absent from the table gets a zero row.
// forward(dense) for data without sparse fields; forward(dense, ids) with them, `ids` int64
// [rows, fields] in the record store's id space. It returns logits [rows, 1] or [rows, classes].
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "troupe/core/error.hpp"
#include "troupe/nn/model.hpp"

namespace troupe::nn {

struct script_tensor {
  std::string attr;  // the attribute the source reads
  std::string name;  // the model's parameter name ("dense_1/weight")
  std::vector<std::int64_t> shape;
};

struct script_table {
  std::string name;  // the model's table name (the embedding node's name)
  std::string ids_attr, rows_attr;
  std::size_t dim = 0;
};

struct script_model {
  std::string source;  // TorchScript: `forward` and its helper `lookup`
  std::vector<script_tensor> tensors;
  std::vector<script_table> tables;
  bool sparse = false;  // forward(dense, ids)
};

// The TorchScript of `m` (finished). unsupported: a layer kind this writer does not know (named).
expected<script_model> to_torchscript(model& m);

// The attribute name for a parameter or table name.
std::string script_attr(const std::string& name);

// The TorchScript of the module method `lookup(self, ids, table_ids, rows) -> Tensor` the source
// of a sparse model calls: rows for `ids` ([rows, fields] int64) from a table (sorted int64 ids,
// [ids, dim] rows), a zero row for an id the table lacks. Part of `source`; exporters of a user's
// module wrap it with the same method.
const char* script_lookup_source();

}  // namespace troupe::nn
