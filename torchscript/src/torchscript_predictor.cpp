// The predictor of a model.pt (troupe/model/predictor.hpp), built into the plugin
// libtroupe_torchscript.so beside the trainer backend: forward only, in eval mode, under
// inference mode.
//
// Single-row latency is what a server waits on, so the process-wide settings are those learned
// for the trainer (the profiling executor off: its first ~20 runs are slow and it re-specialises
// on new shapes; OpenBLAS's own pool sized like libtorch's), and the module is frozen when it can
// be (parameters folded into the graph as constants: fewer attribute reads per forward); a module
// freezing refuses (a method that mutates an attribute) runs as loaded.
#include <ATen/Parallel.h>
#include <malloc.h>
#include <torch/csrc/jit/runtime/graph_executor.h>
#include <torch/cuda.h>
#include <torch/script.h>

#include <chrono>
#include <cstring>
#include <mutex>
#include <optional>
#include <sstream>

#include "torch_module.hpp"
#include "troupe/core/clock.hpp"
#include "troupe/model/predictor.hpp"
#include "troupe/nn/blas.hpp"

namespace troupe::model {

namespace {

// Load and warm-up times, reported in ReplicaReady: real time.
double ms_since(clock::time_point t) {
  return std::chrono::duration<double, std::milli>(clock::system().now() - t).count();
}

using actors::error_cause;
using actors::shape_of;

void configure_once(int threads) {
  static std::once_flag once;
  std::call_once(once, [threads] {
    torch::jit::getProfilingMode() = false;
    if (threads > 0) {
      at::set_num_threads(threads);
      nn::set_blas_threads(threads);
    }
    // Batches allocate their activations anew: keep them in the heap rather than mmap'ed and
    // unmapped on every forward (the trainer's finding, torchscript_backend.cpp).
    ::mallopt(M_MMAP_THRESHOLD, 64 << 20);
    ::mallopt(M_TRIM_THRESHOLD, 256 << 20);
  });
}

class torchscript_predictor final : public predictor {
 public:
  explicit torchscript_predictor(const predictor_options& o) : o_(o) {}

  std::string load();
  std::string predict(const float* dense, const std::int64_t* ids, std::size_t rows,
                      float* logits) noexcept override;
  std::size_t width() const noexcept override { return o_.width; }
  std::string placement() const override { return dev_.str(); }
  double load_ms() const noexcept override { return load_ms_; }
  double warmup_ms() const noexcept override { return warmup_ms_; }

 private:
  std::string check_signature();
  // forward on `rows` rows; throws what libtorch throws.
  at::Tensor forward(const float* dense, const std::int64_t* ids, std::size_t rows);
  std::string warm_up();

  predictor_options o_;
  torch::Device dev_{torch::kCPU};
  torch::jit::Module mod_;
  std::optional<torch::jit::Method> method_;
  double load_ms_ = 0, warmup_ms_ = 0;
};

std::string torchscript_predictor::check_signature() {
  auto m = mod_.find_method("forward");
  if (!m) return o_.path + ": the module has no forward method";
  std::size_t args = m->function().getSchema().arguments().size() - 1;  // without self
  std::size_t want = o_.takes_ids ? 2 : 1;
  if (args != want)
    return o_.path + ": forward takes " + std::to_string(args) + " inputs, but model.json says " +
           (o_.takes_ids ? "forward(dense, ids)" : "forward(dense)");
  return "";
}

at::Tensor torchscript_predictor::forward(const float* dense, const std::int64_t* ids, std::size_t rows) {
  auto n = static_cast<std::int64_t>(rows);
  // The inputs are read in place (inference never writes them); from_blob wants a mutable pointer.
  at::Tensor d = torch::from_blob(const_cast<float*>(dense), {n, static_cast<std::int64_t>(o_.dense_dim)},
                                  at::TensorOptions().dtype(at::kFloat));
  std::vector<c10::IValue> in;
  in.reserve(2);
  in.emplace_back(dev_.is_cpu() ? d : d.to(dev_));
  if (o_.takes_ids) {
    at::Tensor i = torch::from_blob(const_cast<std::int64_t*>(ids), {n, static_cast<std::int64_t>(o_.fields)},
                                    at::TensorOptions().dtype(at::kLong));
    in.emplace_back(dev_.is_cpu() ? i : i.to(dev_));
  }
  return (*method_)(std::move(in)).toTensor();
}

std::string torchscript_predictor::load() {
  auto t0 = clock::system().now();
  try {
    dev_ = torch::Device(o_.device);
  } catch (const std::exception& e) {
    return "device \"" + o_.device + "\": " + error_cause(e);
  }
  // Before the load, which would fail with the device's error under "not a TorchScript archive".
  if (dev_.is_cuda() && !torch::cuda::is_available())
    return "device \"" + o_.device + "\": no CUDA device here (this libtorch " +
           (torch::cuda::device_count() == 0 && !torch::hasCUDA() ? "is built without CUDA" : "sees no GPU") +
           "): serve on cpu";
  try {
    mod_ = torch::jit::load(o_.path, dev_);
  } catch (const std::exception& e) {
    return actors::load_failure(o_.path, e);
  }
  mod_.eval();
  if (auto bad = check_signature(); !bad.empty()) return bad;
  try {
    mod_ = torch::jit::freeze(mod_);
  } catch (const std::exception& e) {
    // Runs unfrozen (slower by a few attribute reads per forward).
  }
  method_ = mod_.get_method("forward");
  load_ms_ = ms_since(t0);
  return warm_up();
}

std::string torchscript_predictor::warm_up() {
  auto t0 = clock::system().now();
  std::size_t big = std::max<std::size_t>(1, o_.max_batch);
  std::vector<float> dense(big * o_.dense_dim, 0.0f);
  // Id 0 is field 0's first bucket: a valid id of any field-0 range, and unseen ones are zero rows.
  std::vector<std::int64_t> ids(big * o_.fields, 0);
  std::vector<float> out(big * o_.width);
  c10::InferenceMode guard;
  try {
    at::Tensor probe = forward(dense.data(), ids.data(), 2);
    bool ok = probe.dim() == 2 ? probe.size(0) == 2 && probe.size(1) == static_cast<std::int64_t>(o_.width)
                               : probe.dim() == 1 && probe.size(0) == 2 && o_.width == 1;
    // Floating logits of any width are taken as float32 (predict() converts), as training takes them.
    if (!ok || !probe.is_floating_point())
      return o_.path + ": forward returns " + std::string(c10::toString(probe.scalar_type())) + " " +
             shape_of(probe) + " for a batch of 2; model.json promises floating-point logits [2, " +
             std::to_string(o_.width) + "]";
  } catch (const std::exception& e) {
    return o_.path + ": forward failed on zeros (dense [2, " + std::to_string(o_.dense_dim) + "]" +
           (o_.takes_ids ? ", ids [2, " + std::to_string(o_.fields) + "]" : std::string()) +
           "): " + error_cause(e);
  }
  for (std::size_t rows : {std::size_t{1}, big}) {
    for (int i = 0; i < o_.warmup; ++i) {
      if (auto e = predict(dense.data(), ids.data(), rows, out.data()); !e.empty()) return e;
    }
  }
  warmup_ms_ = ms_since(t0);
  return "";
}

std::string torchscript_predictor::predict(const float* dense, const std::int64_t* ids, std::size_t rows,
                                           float* logits) noexcept {
  try {
    c10::InferenceMode guard;
    at::Tensor y = forward(dense, ids, rows);
    if (!dev_.is_cpu()) y = y.to(torch::kCPU);
    if (y.scalar_type() != at::kFloat) y = y.to(at::kFloat);
    y = y.contiguous();
    if (static_cast<std::size_t>(y.numel()) != rows * o_.width)
      return "forward returned " + shape_of(y) + " for " + std::to_string(rows) + " rows; expected [" +
             std::to_string(rows) + ", " + std::to_string(o_.width) + "]";
    std::memcpy(logits, y.data_ptr<float>(), rows * o_.width * sizeof(float));
    return "";
  } catch (const std::exception& e) {
    return "forward failed on " + std::to_string(rows) + " rows: " + error_cause(e);
  } catch (...) {
    return "forward failed on " + std::to_string(rows) + " rows";
  }
}

}  // namespace

}  // namespace troupe::model

extern "C" troupe::model::predictor* troupe_torchscript_create_predictor(
    int abi, const troupe::model::predictor_options* o, std::string* error) {
  using namespace troupe::model;
  if (abi != kPredictorAbi) {
    *error = "libtroupe_torchscript.so was built for another troupe (predictor ABI " +
             std::to_string(kPredictorAbi) + ", asked " + std::to_string(abi) + ")";
    return nullptr;
  }
  try {
    configure_once(o->threads);
    auto p = std::make_unique<torchscript_predictor>(*o);
    if (auto e = p->load(); !e.empty()) {
      *error = e;
      return nullptr;
    }
    return p.release();
  } catch (const std::exception& e) {
    *error = o->path + ": " + e.what();
    return nullptr;
  }
}
