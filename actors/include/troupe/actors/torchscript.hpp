// The TorchScript trainer backend ([model] type = "torchscript", docs/models.md): a user's PyTorch
// module, scripted and saved in Python, trained through libtorch. It lives in a plugin,
// libtroupe_torchscript.so, opened with dlopen only when a job names it: libtorch costs ~0.4 s at
// the start of any process that loads it, which jobs of native models must not pay.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "troupe/actors/trainer_backend.hpp"
#include "troupe/nn/data/dataset.hpp"
#include "troupe/nn/optimizer.hpp"

namespace troupe::actors {

struct torchscript_options {
  std::string path;       // the saved module (absolute)
  nn::dataset_info data;  // what it trains on: dense width, sparse fields, classes
  nn::optimizer_config optimizer;
  std::size_t embedding_dim = 8;  // emb's last dimension, for data with sparse fields
  double embedding_scale = 0.01;  // stddev of new embedding rows
  std::uint64_t seed = 1;         // embedding rows
  int threads = 1;                // libtorch's intra-op threads (set once per process)
  std::string device = "cpu";
  // Rows of zeros the module runs on once at load (eval mode), its logits' dtype and shape checked:
  // `troupe config check` and the runner's check ask for a batch of the evaluation's size.
  std::size_t probe_rows = 2;
};

// Loads the plugin (once per process) and the module. Errors name the file and the problem: the
// plugin missing or not loadable, the module missing or not TorchScript, no forward or one with
// the wrong arguments, logits of the wrong width (both numbers) or of an integer dtype, integer or
// non-contiguous parameters, a probe batch that fails inside the module (libtorch's message and the
// shapes).
expected<std::unique_ptr<trainer_backend>> load_torchscript(const torchscript_options& o);
// Only the plugin (once per process; what load_torchscript does first). Errors: as load_torchscript's.
expected<void> open_torchscript_plugin();

// The plugin's entry point (C linkage, looked up with dlsym): a new backend, or null and `error`.
// `abi` must be kTorchscriptAbi: a plugin from another build is refused.
inline constexpr int kTorchscriptAbi = 2;
extern "C" trainer_backend* troupe_torchscript_create(int abi, const torchscript_options* o,
                                                      std::string* error);

}  // namespace troupe::actors
