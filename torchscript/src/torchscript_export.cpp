// The plugin's side of model export (troupe/model/exporter.hpp): a built-in model defined from its
// TorchScript source and tensors, or a user's module with its trained tensors written in (wrapped
// with the embedding rows for data with sparse fields), saved in eval() mode.
#include <fcntl.h>
#include <unistd.h>

#include <torch/script.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <sstream>
#include <string_view>
#include <unordered_map>

#include "troupe/model/exporter.hpp"
#include "troupe/nn/script_export.hpp"

namespace troupe::model {

namespace {

std::string shape_text(at::IntArrayRef s) {
  std::ostringstream o;
  o << s;
  return o.str();
}

at::Tensor tensor_of(const export_tensor& t) {
  return torch::from_blob(const_cast<float*>(t.data), t.shape, at::TensorOptions().dtype(at::kFloat)).clone();
}

void add_tables(torch::jit::Module& m, const std::vector<export_table>& tables) {
  for (const auto& t : tables) {
    auto ids =
        torch::from_blob(const_cast<std::int64_t*>(t.ids.data()), {static_cast<std::int64_t>(t.ids.size())},
                         at::TensorOptions().dtype(at::kLong))
            .clone();
    auto rows = torch::from_blob(const_cast<float*>(t.rows.data()),
                                 {static_cast<std::int64_t>(t.ids.size()), static_cast<std::int64_t>(t.dim)},
                                 at::TensorOptions().dtype(at::kFloat))
                    .clone();
    m.register_buffer(t.ids_attr, ids);
    m.register_parameter(t.rows_attr, rows, false);
  }
}

torch::jit::Module built_in(const export_request& r) {
  torch::jit::Module m("TroupeModel");
  for (const auto& t : r.tensors) m.register_parameter(t.name, tensor_of(t), false);
  add_tables(m, r.tables);
  m.define(r.source);
  return m;
}

// Writes `from` into the module's tensor `name`; an error for a size that differs.
std::string write_into(const std::string& name, at::Tensor dst, const export_tensor& from) {
  std::int64_t count = 1;
  for (auto d : from.shape) count *= d;
  if (dst.numel() != count)
    return "'" + name + "' is " + shape_text(dst.sizes()) + " in the module, " + shape_text(from.shape) +
           " in the trained state";
  torch::NoGradGuard no_grad;
  dst.copy_(tensor_of(from).view(dst.sizes()));
  return {};
}

std::string write_user_tensors(torch::jit::Module& m, const export_request& r, export_result& out) {
  std::unordered_map<std::string, const export_tensor*> by_name;
  for (const auto& t : r.tensors) by_name[t.name] = &t;
  auto write_all = [&](auto named) -> std::string {
    for (const auto& item : named) {
      auto it = by_name.find(item.name);
      if (it == by_name.end()) {
        out.kept.push_back(item.name);
        continue;
      }
      if (auto e = write_into(item.name, item.value, *it->second); !e.empty()) return e;
    }
    return {};
  };
  if (auto e = write_all(m.named_parameters(true)); !e.empty()) return e;
  return write_all(m.named_buffers(true));
}

std::string user_module(const export_request& r, torch::jit::Module& out_module, export_result& out) {
  // As a job says it (libtorch's "open file failed because of errno 2 on fopen: , file path: ...").
  if (std::error_code ec; !std::filesystem::is_regular_file(r.user_module, ec))
    return r.user_module + ": no such file (model.path): the job's module is not where job.toml says";
  auto user = torch::jit::load(r.user_module, torch::Device(torch::kCPU));
  if (auto e = write_user_tensors(user, r, out); !e.empty()) return r.user_module + ": " + e;
  if (r.tables.empty()) {
    out_module = user;
    return {};
  }
  torch::jit::Module w("TroupeModel");
  w.register_module("inner", user);
  add_tables(w, r.tables);
  const auto& t = r.tables.front();
  w.define(std::string(nn::script_lookup_source()) +
           "\ndef forward(self, dense: Tensor, ids: Tensor) -> Tensor:\n"
           "    return self.inner.forward(dense, self.lookup(ids, self." +
           t.ids_attr + ", self." + t.rows_attr + "))\n");
  out_module = w;
  return {};
}

// The check rows through model.pt as saved, loaded back: what torch.jit.load gives a user.
void run_check(const export_request& r, export_result& out) {
  if (r.check_rows == 0) return;
  auto m = torch::jit::load(r.out_path, torch::Device(torch::kCPU));
  m.eval();
  torch::NoGradGuard no_grad;
  const auto n = static_cast<std::int64_t>(r.check_rows);
  std::vector<c10::IValue> in{torch::from_blob(const_cast<float*>(r.check_dense.data()),
                                               {n, static_cast<std::int64_t>(r.dense_dim)},
                                               at::TensorOptions().dtype(at::kFloat))};
  if (r.fields > 0)
    in.emplace_back(torch::from_blob(const_cast<std::int64_t*>(r.check_ids.data()),
                                     {n, static_cast<std::int64_t>(r.fields)},
                                     at::TensorOptions().dtype(at::kLong)));
  auto l = m.forward(in).toTensor().to(at::kFloat).contiguous();
  out.check_logits.assign(l.data_ptr<float>(), l.data_ptr<float>() + l.numel());
}

// A failed write of `path`, in the text of storage's error for a full disk when it is one (the
// exporter reads the category back: a full disk is a fault of the run, exit 1, not bad input).
std::string written_error(const std::string& path, int e) {
  if (e == ENOSPC || e == EDQUOT) return "storage: no space left on device: " + path + " (writing)";
  return path + ": writing: " + std::strerror(e);
}

// Writes `bytes` to `path` (created or truncated), synced; an error names the file and the cause.
std::string write_bytes(const std::string& path, std::string_view bytes) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return path + ": cannot create: " + std::strerror(errno);
  std::size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int e = n < 0 ? errno : ENOSPC;
      ::close(fd);
      return written_error(path, e);
    }
    done += static_cast<std::size_t>(n);
  }
  const bool synced = ::fsync(fd) == 0;
  const int e = errno;
  if (::close(fd) != 0 || !synced) return written_error(path, synced ? errno : e);
  return "";
}

}  // namespace

}  // namespace troupe::model

extern "C" bool troupe_torchscript_export(int abi, const troupe::model::export_request* r,
                                          troupe::model::export_result* out) {
  using namespace troupe::model;
  if (abi != kExportAbi) {
    out->error = "libtroupe_torchscript.so was built for another troupe (export ABI " +
                 std::to_string(kExportAbi) + ", asked " + std::to_string(abi) + ")";
    return false;
  }
  try {
    torch::jit::Module m("TroupeModel");
    if (r->user_module.empty()) {
      m = built_in(*r);
    } else if (auto e = user_module(*r, m, *out); !e.empty()) {
      out->error = e;
      return false;
    }
    m.eval();
    // Into memory first: libtorch's archive writer throws from its destructor when the disk fills
    // (std::terminate: `troupe export` aborted, leaving its temporary directory); the bytes are then
    // written here, where a full disk is an error that names the file.
    std::ostringstream archive;
    m.save(archive);
    if (auto e = write_bytes(r->out_path, archive.view()); !e.empty()) {
      out->error = e;
      return false;
    }
    run_check(*r, *out);
    return true;
  } catch (const std::exception& e) {
    std::string msg = e.what();
    if (auto cut = msg.find("\nException raised from"); cut != std::string::npos) msg.resize(cut);
    out->error = (r->user_module.empty() ? std::string("the built-in model's TorchScript") : r->user_module) +
                 ": " + msg;
    return false;
  }
}
