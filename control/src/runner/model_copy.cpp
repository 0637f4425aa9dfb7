#include "model_copy.hpp"

#include <filesystem>
#include <system_error>

namespace troupe::control {

namespace {

// A file copied to `to` (through a temporary file and a rename: a reader sees all of it or none).
std::error_code copy_whole(const std::string& from, const std::string& to) {
  std::error_code ec;
  const std::string tmp = to + ".tmp";
  std::filesystem::copy_file(from, tmp, std::filesystem::copy_options::overwrite_existing, ec);
  if (!ec) std::filesystem::rename(tmp, to, ec);
  if (ec) std::filesystem::remove(tmp);
  return ec;
}

}  // namespace

std::string model_copy_name(const job::job_spec& spec) {
  if (spec.nn.model.path.empty()) return {};
  if (spec.nn.model.type == "torchscript") return "module.pt";
  if (spec.nn.model.type == "exported") return "model_in";
  return {};
}

// The model at `from` (a module file, or a model directory's two files) copied to `to`.
expected<void> copy_model(const job::job_spec& spec, const std::string& from, const std::string& to) {
  std::error_code ec;
  if (spec.nn.model.type == "torchscript") {
    ec = copy_whole(from, to);
  } else if (std::filesystem::create_directory(to, ec); !ec) {
    for (const char* name : {"model.json", "model.pt"})
      if ((ec = copy_whole(from + "/" + name, to + "/" + name))) break;
  }
  if (!ec) return {};
  return make_unexpected(
      core_errc::io_error,
      "model.path: " + from + ": cannot copy the model into the job directory (" + to + "): " + ec.message());
}

}  // namespace troupe::control
