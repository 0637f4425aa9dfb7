// The TorchScript backend's dealings with a user's scripted module that need none of its state:
// loading and checking the module before training (where it runs, the archive, forward's and
// loss's arguments, the parameters troupe can train; each error names the file or the job key and
// the problem, docs/models.md "Errors"), and the small conversions between troupe's host memory,
// batches and libtorch's tensors.
#pragma once

#include <torch/script.h>

#include <span>
#include <string>
#include <utility>
#include <vector>

#include "troupe/core/error.hpp"
#include "troupe/nn/data/dataset.hpp"

namespace troupe::actors {

struct module_placement {
  torch::Device device{torch::kCPU};
  bool mirrored = false;  // the module's tensors live apart from the host buffers (a GPU, cpu-mirror)
};

// "cpu": the module aliases the host buffers; "gpu": the first visible CUDA device, mirrored;
// "cpu-mirror": the GPU's path on the CPU (tests).
expected<module_placement> choose_placement(const std::string& device);

// The archive at `path`, on `device`, in training mode.
expected<torch::jit::Module> load_module(const std::string& path, torch::Device device);

// forward(self, dense) for dense data, forward(self, dense, emb) with sparse fields; an optional
// loss(self, logits, labels). Returns whether the module has that loss.
expected<bool> check_signature(const torch::jit::Module& m, const std::string& path, bool sparse);

// The module's trainable parameters, by name; an error for one troupe cannot train.
expected<std::vector<std::pair<std::string, at::Tensor>>> trainable_parameters(const torch::jit::Module& m,
                                                                               const std::string& path);

// A CPU tensor over `s` (no copy).
at::Tensor host_view(std::span<float> s);
// "[2, 7]".
std::string shape_of(const at::Tensor& t);
// What a libtorch exception says of its cause, on one line: an error raised inside a TorchScript
// module reads "The following operation failed in the TorchScript interpreter." then the
// module's traceback, and only its last line names the error ("RuntimeError: a value over 1000"),
// followed here by where the module raised it (`(at "m.py", line 7, in forward: return ...)`); any
// other's first line does. The C++ stack ("Exception raised from ...") is dropped.
std::string error_cause(const std::exception& e);
// Why torch::jit::load refused `path`, on one line: not a TorchScript archive, or one this
// libtorch cannot read (an op or a file format of a newer torch: it said "not a TorchScript
// archive" with an empty cause, libtorch's message beginning with a newline).
std::string load_failure(const std::string& path, const std::exception& e);

// The error of a step that failed inside libtorch: "<path>: <what> failed on inputs dense [n, d],
// emb [n, fields, dim]: <error_cause>", on one line.
unexpected step_error(const std::string& path, const std::string& what, const nn::batch& b,
                      std::size_t embedding_dim, const std::exception& e);

}  // namespace troupe::actors
