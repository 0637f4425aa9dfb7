// Inference of a model.pt (docs/model_format.md) through libtorch, without linking it: the
// TorchScript plugin (libtroupe_torchscript.so, torchscript/) exports a predictor factory, opened
// with dlopen by the processes that run inference (`troupe serve`'s replicas; later `troupe
// predict` and `troupe evaluate`). A process that loads it pays libtorch's start (~0.4 s, 288
// shared libraries); the `troupe` binary itself never does.
//
// Contract of a predictor:
// - Made by load_predictor(): the module loaded on `device`, in eval mode, its forward checked
//   against the inputs the options describe (one probe row of zeros: the number of arguments and
//   the logits' width, both named in the error), then warmed up (`warmup` forwards of one row and
//   of max_batch rows), so the first real request does not pay the executor's first runs.
// - predict() runs forward under inference mode (no autograd): `dense` is [rows, dense_dim] float32,
//   `ids` [rows, fields] int64 (null for a dense-only model), row-major; `logits` receives
//   [rows, width()] float32. Neither input is written. It never throws: an error from libtorch
//   comes back as its text (the shapes named), and the predictor stays usable.
// - One call at a time (a replica serialises its batches); libtorch's own intra-op threads run
//   inside a call. `threads` is process-wide in libtorch: the first predictor of a process sets it.
// - Destroyed on any thread; the plugin stays loaded for the life of the process.
//
// The plugin ABI (C linkage, looked up with dlsym):
//   troupe::model::predictor* troupe_torchscript_create_predictor(int abi,
//       const troupe::model::predictor_options* options, std::string* error);
// returns a new predictor (the caller owns it, deletes it through the virtual destructor), or
// null with `error` set. `abi` must equal kPredictorAbi: the struct layouts and the vtable below
// are the contract, so a change to either bumps it, and a plugin from another build is refused
// with both numbers named. Both sides are built by the same compiler and libstdc++ (std::string
// crosses the boundary).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "troupe/core/error.hpp"

namespace troupe::model {

struct model_info;

struct predictor_options {
  std::string path;            // model.pt
  std::string device = "cpu";  // "cpu", "cuda", "cuda:1"
  int threads = 1;             // libtorch's intra-op threads (at::set_num_threads; process-wide)
  bool takes_ids = false;      // forward(dense, ids)
  std::size_t dense_dim = 0;
  std::size_t fields = 0;
  std::size_t width = 1;       // the logits' width model.json promises
  std::size_t max_batch = 64;  // the largest batch predict() will be given (warm-up at that size)
  int warmup = 20;             // forwards of each warm-up size after loading
};

// The options for a model directory read by read_model_dir (path, inputs, width).
predictor_options options_for(const model_info& m);

class predictor {
 public:
  virtual ~predictor() = default;
  // Empty on success, else the error (see the contract above).
  virtual std::string predict(const float* dense, const std::int64_t* ids, std::size_t rows,
                              float* logits) noexcept = 0;
  virtual std::size_t width() const noexcept = 0;
  // Where it runs: "cpu", "cuda:0".
  virtual std::string placement() const = 0;
  // Milliseconds spent in load (torch::jit::load and the checks) and in the warm-up forwards.
  virtual double load_ms() const noexcept = 0;
  virtual double warmup_ms() const noexcept = 0;
};

inline constexpr int kPredictorAbi = 1;

// Opens the plugin (plugin.hpp: once per process) and makes a predictor. Errors: core_errc::io_error
// when the plugin cannot be found or opened (every path tried, with why) or has no predictor (a
// plugin of an older build), invalid_argument for the model (the plugin's message: the file and the
// problem).
expected<std::unique_ptr<predictor>> load_predictor(const predictor_options& options);

}  // namespace troupe::model

extern "C" troupe::model::predictor* troupe_torchscript_create_predictor(
    int abi, const troupe::model::predictor_options* options, std::string* error);
