// Writing model.pt (docs/model_format.md) through libtorch, without linking it: the TorchScript
// plugin (libtroupe_torchscript.so) saves the module the request describes.
//
// Two kinds of request:
// - A built-in model: `source` is the TorchScript of its forward (nn::to_torchscript); the plugin
//   defines a module "TroupeModel" from it with every tensor of `tensors` registered as a
//   parameter under its `name` (an attribute name), and the tables' ids (int64 buffers) and rows.
// - A user's TorchScript module (`user_module`, the file the job trained): the plugin loads it,
//   writes every named parameter and buffer (the module's own dotted names) from `tensors`, and
//   saves it as it is (dense-only data), or, for data with sparse fields, wrapped in a
//   "TroupeModel" whose submodule `inner` is the user's module: forward(dense, ids) looks up the
//   rows of `tables[0]` and calls inner.forward(dense, emb).
// The module is saved in eval() mode; check rows (if any) run through the file as saved. A tensor of the
// wrong size is an error naming it and both shapes; a parameter or buffer of the user's module that `tensors`
// lacks keeps the module's value and is named in `kept` (the caller decides whether that is acceptable).
//
// The plugin ABI (C linkage, looked up with dlsym):
//   bool troupe_torchscript_export(int abi, const troupe::model::export_request* request,
//                                  troupe::model::export_result* result);
// `abi` must be kExportAbi (the struct layouts are the contract).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "troupe/core/error.hpp"

namespace troupe::model {

struct export_tensor {
  std::string name;  // attribute (built-in) or the module's dotted parameter/buffer name (user's)
  std::vector<std::int64_t> shape;
  const float* data = nullptr;  // shape's product of floats, row-major
};

struct export_table {
  std::string ids_attr, rows_attr;
  std::size_t dim = 0;
  std::vector<std::int64_t> ids;  // sorted ascending (as signed values)
  std::vector<float> rows;        // ids.size() x dim
};

struct export_request {
  std::string out_path;     // model.pt
  std::string source;       // built-in: the TorchScript of forward (and lookup)
  std::string user_module;  // user's: the TorchScript file it trained
  std::size_t fields = 0;   // sparse fields (user's wrapper: ids [rows, fields])
  std::vector<export_tensor> tensors;
  std::vector<export_table> tables;
  // Optional: rows the plugin runs through the saved model.pt, loaded back (torch::jit::load), with
  // their logits in export_result::check_logits. dense [check_rows, dense_dim], ids [check_rows, fields].
  std::size_t check_rows = 0, dense_dim = 0;
  std::vector<float> check_dense;
  std::vector<std::int64_t> check_ids;
};

struct export_result {
  std::string error;                // empty on success
  std::vector<std::string> kept;    // the user's module's tensors written from no state (named)
  std::vector<float> check_logits;  // [check_rows, width] when check rows were asked for
};

inline constexpr int kExportAbi = 1;

// Opens the plugin (once per process) and has it write request.out_path. Errors:
// core_errc::io_error when the plugin cannot be opened; the plugin's message as plugin_error reads it
// (storage: no space left on device, ...; else invalid_argument).
expected<export_result> export_torchscript(const export_request& request);

}  // namespace troupe::model

extern "C" bool troupe_torchscript_export(int abi, const troupe::model::export_request* request,
                                          troupe::model::export_result* result);
