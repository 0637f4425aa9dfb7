#include "troupe/nn/script_export.hpp"

#include <map>
#include <set>
#include <sstream>

#include "troupe/nn/errc.hpp"
#include "troupe/nn/layers.hpp"

namespace troupe::nn {

std::string script_attr(const std::string& name) {
  std::string out = "p_";
  for (char c : name) {
    const bool word = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
    out += word ? c : '_';
  }
  return out;
}

namespace {

// An id absent from the table reads a zero row; an empty table reads zeros.
constexpr const char* lookup_source = R"(
def lookup(self, ids: Tensor, table_ids: Tensor, rows: Tensor) -> Tensor:
    if table_ids.size(0) == 0:
        return torch.zeros([ids.size(0), ids.size(1), rows.size(1)], dtype=rows.dtype)
    pos = torch.searchsorted(table_ids, ids.contiguous()).clamp(max=table_ids.size(0) - 1)
    hit = table_ids[pos] == ids
    return rows[pos] * hit.unsqueeze(-1).to(rows.dtype)
)";

}  // namespace

const char* script_lookup_source() {
  return lookup_source;
}

namespace {

class writer {
 public:
  explicit writer(model& m) : m_(m) {}

  expected<script_model> run() {
    const auto& info = m_.data_info();
    out_.sparse = info.sparse_fields > 0;
    body_ << "    n = dense.size(0)\n";
    for (std::size_t i = 0; i < m_.node_count(); ++i)
      if (auto w = node(i); !w) return w.err();
    std::ostringstream src;
    if (out_.sparse) src << lookup_source;
    src << "\ndef forward(self, dense: Tensor" << (out_.sparse ? ", ids: Tensor" : "") << ") -> Tensor:\n"
        << body_.str() << "    return x" << m_.output_node() << "\n";
    out_.source = src.str();
    return std::move(out_);
  }

 private:
  // (Built by append: GCC 12 warns -Wrestrict on "x" + std::to_string(...).)
  std::string var(int node) const { return std::string(1, 'x').append(std::to_string(node)); }
  std::string in(std::size_t i, std::size_t k = 0) const { return var((*m_.node_at(i).inputs)[k]); }
  const shape& in_shape(std::size_t i) const {
    return shapes_.at(static_cast<std::size_t>((*m_.node_at(i).inputs)[0]));
  }

  // The attribute holding parameter k of node i's layer.
  std::string param(std::size_t i, std::size_t k) {
    auto* p = m_.node_at(i).op->params().at(k);
    auto attr = script_attr(p->name);
    if (attrs_.insert(attr).second) {
      std::vector<std::int64_t> dims;
      for (std::size_t d = 0; d < p->value.dims().rank(); ++d)
        dims.push_back(static_cast<std::int64_t>(p->value.dims()[d]));
      out_.tensors.push_back({attr, p->name, std::move(dims)});
    }
    return "self." + attr;
  }

  expected<void> line(std::size_t i, const std::string& expr) {
    body_ << "    " << var(static_cast<int>(i)) << " = " << expr << "\n";
    return {};
  }

  std::string table(std::size_t i, embedding_layer& e) {
    const std::string attr = script_attr(e.name());
    out_.tables.push_back({e.name(), "emb_ids_" + attr.substr(2), "emb_rows_" + attr.substr(2), e.dim()});
    const auto& t = out_.tables.back();
    const auto first = std::to_string(e.first_field()), last = std::to_string(e.first_field() + e.fields());
    return "self.lookup(ids[:, " + first + ":" + last + "], self." + t.ids_attr + ", self." + t.rows_attr +
           ")";
  }

  expected<void> node(std::size_t i) {
    auto v = m_.node_at(i);
    shapes_.push_back(v.out_shape);
    const std::string kind = v.op->kind();
    if (kind == "input") return input(i);
    if (kind == "embedding") return line(i, table(i, static_cast<embedding_layer&>(*v.op)));
    if (kind == "dense")
      return line(i, "torch.addmm(" + param(i, 1) + ", " + in(i) + ".reshape(n, -1), " + param(i, 0) + ")");
    if (kind == "relu" || kind == "sigmoid") return line(i, "torch." + kind + "(" + in(i) + ")");
    if (kind == "dropout") return line(i, in(i));  // evaluation: no dropout
    if (kind == "flatten") return line(i, in(i) + ".reshape(n, -1)");
    if (kind == "conv2d") return conv(i, static_cast<conv2d_layer&>(*v.op));
    if (kind == "maxpool2d") {
      const auto p = std::to_string(static_cast<maxpool2d_layer&>(*v.op).pool());
      return line(i, "torch.max_pool2d(" + in(i) + ", [" + p + ", " + p + "], [" + p + ", " + p + "])");
    }
    if (kind == "batchnorm") return batch_norm(i, static_cast<batch_norm_layer&>(*v.op));
    if (kind == "fm") {
      body_ << "    s" << i << " = " << in(i) << ".sum(1)\n";
      return line(i, "0.5 * (s" + std::to_string(i) + " * s" + std::to_string(i) + " - (" + in(i) + " * " +
                         in(i) + ").sum(1)).sum(1, keepdim=True)");
    }
    if (kind == "sum") return line(i, in(i) + ".reshape(n, -1).sum(1, keepdim=True)");
    if (kind == "concat" || kind == "add") return many(i, kind == "concat");
    return own(i, kind);
  }

  // A layer of the user's: its own expression (layer::script), else no export.
  expected<void> own(std::size_t i, const std::string& kind) {
    auto v = m_.node_at(i);
    std::vector<std::string> ins, ps;
    if (v.inputs)
      for (std::size_t k = 0; k < v.inputs->size(); ++k) ins.push_back(in(i, k));
    const auto own_params = v.op->params().size();
    for (std::size_t k = 0; k < own_params; ++k) ps.push_back(param(i, k));
    if (auto e = v.op->script(ins, ps)) return line(i, *e);
    return make_unexpected(nn_errc::bad_config,
                           "model '" + m_.type() + "': layer '" + v.op->name() + "' of kind '" + kind +
                               "' has no TorchScript form, so the model cannot be exported to model.pt "
                               "(a layer of your own gives one by overriding layer::script: docs/nn.md)");
  }

  expected<void> input(std::size_t i) {
    const auto& img = m_.data_info().image_shape;
    if (img[0] == 0) return line(i, "dense");
    return line(i, "dense.reshape(n, " + std::to_string(img[0]) + ", " + std::to_string(img[1]) + ", " +
                       std::to_string(img[2]) + ")");
  }

  expected<void> conv(std::size_t i, conv2d_layer& c) {
    const auto f = std::to_string(c.filters()), k = std::to_string(c.kernel()),
               p = std::to_string(c.padding());
    const auto ch = std::to_string(in_shape(i)[0]);
    return line(i, "torch.conv2d(" + in(i) + ", " + param(i, 0) + ".view(" + f + ", " + ch + ", " + k + ", " +
                       k + "), " + param(i, 1) + ", [1, 1], [" + p + ", " + p + "])");
  }

  // As batch_norm_layer's evaluation: ((x - mean) * (1 / sqrt(var + eps))) * gamma + beta, per channel.
  expected<void> batch_norm(std::size_t i, batch_norm_layer& b) {
    const auto& s = in_shape(i);
    const std::string view = s.rank() == 3 ? ".view(1, -1, 1, 1)" : ".view(1, -1)";
    if (s.rank() != 3 && s.rank() != 1)
      return make_unexpected(nn_errc::bad_shape, "layer '" + b.name() + "': batch norm of shape " +
                                                     s.to_string() +
                                                     " has no TorchScript form (model export)");
    std::ostringstream eps;
    eps.precision(9);
    eps << b.epsilon();
    const auto gamma = param(i, 0), beta = param(i, 1), mean = param(i, 2), var = param(i, 3);
    std::string expr(1, '(');  // by append: GCC 12 warns -Wrestrict on "(" + std::string
    expr.append(in(i)).append(" - ").append(mean).append(view).append(") * (1.0 / torch.sqrt(").append(var);
    expr.append(view).append(" + ").append(eps.str()).append(")) * ").append(gamma).append(view);
    return line(i, expr.append(" + ").append(beta).append(view));
  }

  expected<void> many(std::size_t i, bool cat) {
    const auto& inputs = *m_.node_at(i).inputs;
    std::string expr = cat ? "torch.cat([" : "";
    for (std::size_t k = 0; k < inputs.size(); ++k) {
      if (k > 0) expr += cat ? ", " : " + ";
      expr += cat ? in(i, k) + ".reshape(n, -1)" : in(i, k);
    }
    return line(i, cat ? expr + "], 1)" : expr);
  }

  model& m_;
  script_model out_;
  std::ostringstream body_;
  std::vector<shape> shapes_;
  std::set<std::string> attrs_;
};

}  // namespace

expected<script_model> to_torchscript(model& m) {
  if (m.output_node() < 0)
    return make_unexpected(nn_errc::bad_config, "model '" + m.type() + "' is not built");
  return writer(m).run();
}

}  // namespace troupe::nn
