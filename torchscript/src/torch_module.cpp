#include "torch_module.hpp"

#include <torch/cuda.h>
#include <torch/version.h>

#include <filesystem>
#include <sstream>

#include "troupe/nn/errc.hpp"

namespace troupe::actors {

expected<module_placement> choose_placement(const std::string& device) {
  if (device == "cpu") return module_placement{};
  if (device == "cpu-mirror") return module_placement{torch::Device(torch::kCPU), true};
  if (device != "gpu")
    return make_unexpected(core_errc::invalid_argument,
                           "[job] device = \"" + device + "\": the TorchScript backend runs on cpu or gpu");
  if (!at::hasCUDA())
    return make_unexpected(
        core_errc::invalid_argument,
        "[job] device = \"gpu\" with model type \"torchscript\": this build's libtorch has no CUDA");
  if (!torch::cuda::is_available())
    return make_unexpected(
        core_errc::invalid_argument,
        "[job] device = \"gpu\" with model type \"torchscript\": libtorch sees no CUDA device");
  return module_placement{torch::Device(torch::kCUDA, 0), true};
}

expected<torch::jit::Module> load_module(const std::string& path, torch::Device device) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec))
    return make_unexpected(core_errc::io_error, path + ": no such file (model.path)");
  try {
    auto m = torch::jit::load(path, torch::Device(torch::kCPU));
    if (device != torch::Device(torch::kCPU)) m.to(device);
    m.train();
    return m;
  } catch (const std::exception& e) {
    return make_unexpected(core_errc::invalid_argument, load_failure(path, e));
  }
}

std::string load_failure(const std::string& path, const std::exception& e) {
  std::string cause = error_cause(e);
  if (cause.rfind("[enforce fail at ", 0) == 0)  // "[enforce fail at inline_container.cc:165] . Attempted..."
    if (auto end = cause.find("] . "); end != std::string::npos) cause.erase(0, end + 4);
  if (cause.find("Unknown builtin op") != std::string::npos ||
      cause.find("maximum supported version") != std::string::npos)
    return path +
           ": a TorchScript archive this libtorch (" TORCH_VERSION
           ") cannot load, saved by a newer torch?: " +
           cause + " (save it with torch " TORCH_VERSION ", or without what it names)";
  return path + ": not a TorchScript archive (save it with torch.jit.script(module).save(path)): " + cause;
}

expected<bool> check_signature(const torch::jit::Module& m, const std::string& path, bool sparse) {
  auto fwd = m.find_method("forward");
  if (!fwd) return make_unexpected(core_errc::invalid_argument, path + ": the module has no forward method");
  const std::size_t want = sparse ? 3 : 2;
  const auto& args = fwd->function().getSchema().arguments();
  if (args.size() != want) {
    std::string got;
    for (std::size_t i = 1; i < args.size(); ++i) got += (got.empty() ? "" : ", ") + args[i].name();
    return make_unexpected(
        core_errc::invalid_argument,
        path + ": forward(" + got + ") takes " + std::to_string(args.size() - 1) + " inputs; the data has " +
            (sparse ? "sparse fields: forward(dense, emb)" : "dense features only: forward(dense)"));
  }
  auto loss = m.find_method("loss");
  if (!loss) return false;
  if (loss->function().getSchema().arguments().size() != 3)
    return make_unexpected(core_errc::invalid_argument, path + ": loss must take (logits, labels)");
  return true;
}

expected<std::vector<std::pair<std::string, at::Tensor>>> trainable_parameters(const torch::jit::Module& m,
                                                                               const std::string& path) {
  std::vector<std::pair<std::string, at::Tensor>> train;
  for (const auto& p : m.named_parameters(true)) {
    if (p.value.scalar_type() != at::kFloat || !p.value.is_contiguous())
      return make_unexpected(core_errc::invalid_argument,
                             path + ": parameter '" + p.name + "' is " +
                                 std::string(c10::toString(p.value.scalar_type())) +
                                 (p.value.is_contiguous() ? "" : ", not contiguous") +
                                 ": troupe trains contiguous float32 parameters only");
    if (p.value.requires_grad()) train.emplace_back(p.name, p.value);
  }
  return train;
}

at::Tensor host_view(std::span<float> s) {
  return torch::from_blob(s.data(), {static_cast<std::int64_t>(s.size())},
                          at::TensorOptions().dtype(at::kFloat));
}

std::string shape_of(const at::Tensor& t) {
  std::ostringstream s;
  s << t.sizes();
  return s.str();
}

namespace {

std::string trimmed(const std::string& s) {
  const auto b = s.find_first_not_of(' '), e = s.find_last_not_of(' ');
  return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
}

// Where in the module's code an interpreter error was raised, from libtorch's traceback (the
// original code's when the archive kept it, else the serialized code's): each frame's `File "F",
// line N, in FN` and the line it points at, outermost first, joined on one line.
std::string traceback_where(const std::string& msg) {
  auto from = msg.find("Traceback of TorchScript, original code");
  if (from == std::string::npos) from = msg.find("Traceback of TorchScript");
  if (from == std::string::npos) return "";
  std::istringstream in(msg.substr(from));
  std::string line, previous;
  std::vector<std::string> frames;
  std::getline(in, line);  // the section's title
  while (std::getline(in, line) && line.rfind("Traceback of TorchScript", 0) != 0) {
    const auto text = trimmed(line);
    if (text.rfind("File ", 0) == 0)
      frames.push_back(text.substr(5));
    else if (line.find("<--- HERE") != std::string::npos && !frames.empty())
      frames.back().append(": ").append(trimmed(previous));
    previous = line;
  }
  std::string where;
  for (const auto& f : frames) where.append(where.empty() ? "" : " -> ").append(f);
  return where;
}

}  // namespace

std::string error_cause(const std::exception& e) {
  std::string msg = e.what();
  if (auto cut = msg.find("\nException raised from"); cut != std::string::npos) msg.resize(cut);
  while (!msg.empty() && (msg.back() == '\n' || msg.back() == ' ')) msg.pop_back();
  msg.erase(0, msg.find_first_not_of("\n "));  // "\nUnknown builtin op: aten::x.\n..." read as ""
  const auto first = msg.substr(0, msg.find('\n'));
  if (first.find("failed in the TorchScript interpreter") == std::string::npos) return first;
  const auto last = msg.rfind('\n');
  std::string cause = last == std::string::npos ? first : msg.substr(last + 1);
  if (auto where = traceback_where(msg); !where.empty()) cause.append(" (at ").append(where).append(")");
  return cause;
}

unexpected step_error(const std::string& path, const std::string& what, const nn::batch& b,
                      std::size_t embedding_dim, const std::exception& e) {
  // One line: the cause and where in the module it was raised (libtorch's traceback spans a dozen
  // lines, and a job's error line, its quarantine note and `config check` took all of them).
  const std::string msg = error_cause(e);
  const auto& info = b.data().info;
  std::string shapes = "dense [" + std::to_string(b.size()) + ", " + std::to_string(info.dense_dim) + "]";
  if (info.sparse_fields > 0)
    shapes += ", emb [" + std::to_string(b.size()) + ", " + std::to_string(info.sparse_fields) + ", " +
              std::to_string(embedding_dim) + "]";
  return make_unexpected(nn::nn_errc::model_failed,
                         path + ": " + what + " failed on inputs " + shapes + ": " + msg);
}

}  // namespace troupe::actors
