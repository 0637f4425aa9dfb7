// A layer of the user's own in an exported model: with a TorchScript form (layer::script) the
// model.pt the plugin writes, loaded back by libtorch, gives the native model's logits; without
// one, the export is refused naming the layer and what to do (before, the job exited 0 with no
// model and the docs said nothing).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <map>

#include "troupe/model/exporter.hpp"
#include "troupe/nn/layers.hpp"
#include "troupe/nn/model.hpp"
#include "troupe/nn/random.hpp"
#include "troupe/nn/script_export.hpp"

namespace troupe::nn {
namespace {

// y = w * x^2, one trainable weight per feature; with `scripted`, its TorchScript form.
class scaled_square_layer final : public layer {
 public:
  explicit scaled_square_layer(bool scripted) : scripted_(scripted) {}
  std::string kind() const override { return scripted_ ? "scaled_square" : "unscripted_square"; }
  expected<shape> infer(std::span<const shape> in, std::uint64_t) override {
    w_.name = name() + "/w";
    w_.value = tensor(shape{in[0].size()});
    w_.grad = tensor(shape{in[0].size()});
    for (std::size_t i = 0; i < w_.value.size(); ++i) w_.value[i] = 0.5f + 0.25f * static_cast<float>(i);
    return in[0];
  }
  void forward(const forward_context&, std::span<const tensor* const> in, tensor& out) override {
    const std::size_t f = w_.value.size();
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = w_.value[i % f] * (*in[0])[i] * (*in[0])[i];
  }
  void backward(const forward_context&, std::span<const tensor* const>, const tensor&, const tensor&,
                std::span<tensor* const>) override {}
  std::vector<dense_param*> params() override { return {&w_}; }
  std::optional<std::string> script(std::span<const std::string> in,
                                    std::span<const std::string> params) const override {
    if (!scripted_) return std::nullopt;
    return params[0] + " * " + in[0] + " * " + in[0];
  }

 private:
  bool scripted_;
  dense_param w_;
};

const layer_registrar scripted{
    "scaled_square", [](const layer_options&) {
      return expected<std::unique_ptr<layer>>(std::make_unique<scaled_square_layer>(true));
    }};
const layer_registrar unscripted{
    "unscripted_square", [](const layer_options&) {
      return expected<std::unique_ptr<layer>>(std::make_unique<scaled_square_layer>(false));
    }};

const dataset_info info{"rows", 4, 0, 3, {}, 0};

std::unique_ptr<model> build(const std::string& custom) {
  model_config c;
  c.type = "sequential";
  c.layers = {"flatten", "dense:6", custom, "dense:3"};
  auto m = model_registry::instance().create(c, info);
  EXPECT_TRUE(m) << m.err().to_string();
  return m ? std::move(*m) : nullptr;
}

TEST(custom_layer_export, a_layer_with_a_script_form_exports_and_scores_as_the_native_model) {
  auto m = build("scaled_square");
  ASSERT_TRUE(m);
  dataset d;
  d.info = info;
  d.rows = 16;
  rng r(7);
  for (std::size_t i = 0; i < d.rows * info.dense_dim; ++i) d.dense.push_back(r.uniform_f() - 0.5f);
  for (std::size_t i = 0; i < d.rows; ++i) d.labels.push_back(static_cast<float>(i % 3));
  ASSERT_TRUE(m->forward(batch(d, 0, d.rows), false));
  const std::vector<float> want(m->logits().data(), m->logits().data() + m->logits().size());

  auto script = to_torchscript(*m);
  ASSERT_TRUE(script) << script.err().to_string();
  std::string w_attr;
  for (const auto& t : script->tensors)
    if (t.name.ends_with("/w")) w_attr = t.attr;
  ASSERT_FALSE(w_attr.empty()) << "the layer's weight is no tensor of the export";
  EXPECT_NE(script->source.find("self." + w_attr + " * "), std::string::npos) << script->source;
  troupe::model::export_request req;
  const auto dir =
      std::filesystem::temp_directory_path() / ("troupe-custom-layer-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  req.out_path = (dir / "model.pt").string();
  req.source = script->source;
  std::map<std::string, dense_param*> params;
  for (auto* p : m->parameters()) params[p->name] = p;
  for (const auto& t : script->tensors)
    req.tensors.push_back({t.attr, t.shape, params.at(t.name)->value.data()});
  req.check_rows = d.rows;
  req.dense_dim = info.dense_dim;
  req.check_dense = d.dense;
  auto out = troupe::model::export_torchscript(req);
  ASSERT_TRUE(out) << out.err().to_string() << "\n" << script->source;
  ASSERT_EQ(out->check_logits.size(), want.size());
  for (std::size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(out->check_logits[i], want[i], 1e-5) << i;
  std::filesystem::remove_all(dir);
}

TEST(custom_layer_export, a_layer_without_one_is_refused_naming_it_and_what_to_do) {
  auto m = build("unscripted_square");
  ASSERT_TRUE(m);
  auto script = to_torchscript(*m);
  ASSERT_FALSE(script);
  const auto text = script.err().to_string();
  EXPECT_NE(text.find("of kind 'unscripted_square' has no TorchScript form"), std::string::npos) << text;
  EXPECT_NE(text.find("layer::script"), std::string::npos) << text;
}

}  // namespace
}  // namespace troupe::nn
