#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "troupe/nn/data/readers.hpp"
#include "troupe/nn/errc.hpp"
#include "troupe/nn/model.hpp"
#include "troupe/nn/random.hpp"
#include "troupe/nn/trainer.hpp"

namespace troupe::nn {
namespace {

dataset small_ctr(std::size_t rows = 64, std::size_t dense_dim = 3) {
  auto d = generate_synthetic_ctr({.rows = rows, .fields = 4, .vocab_per_field = 20, .dense_dim = dense_dim});
  EXPECT_TRUE(d);
  return std::move(d->data);
}

dataset small_images(std::size_t rows = 16) {
  dataset d;
  d.info = {"tiny-images", 64, 0, 10, {1, 8, 8}, 0};
  d.rows = rows;
  rng r(5);
  for (std::size_t i = 0; i < rows * 64; ++i) d.dense.push_back(r.uniform_f());
  for (std::size_t i = 0; i < rows; ++i) d.labels.push_back(static_cast<float>(i % 10));
  return d;
}

std::unique_ptr<model> build(const model_config& c, const dataset_info& info) {
  auto m = model_registry::instance().create(c, info);
  EXPECT_TRUE(m) << m.err().to_string();
  return m ? std::move(*m) : nullptr;
}

// End-to-end gradient check through the graph: the loss of a batch against central
// differences on a sample of dense parameters and on the touched embedding rows.
void check_model_gradients(model& m, const batch& b) {
  ASSERT_TRUE(m.forward(b, true));
  m.backward();
  auto loss_at = [&]() { return static_cast<double>(*m.forward(b, true)); };
  const float eps = 1e-3f;
  auto numeric = [&](float* x) {
    const float saved = *x;
    *x = saved + eps;
    const double plus = loss_at();
    *x = saved - eps;
    const double minus = loss_at();
    *x = saved;
    return (plus - minus) / (2.0 * eps);
  };
  std::size_t checked = 0;
  for (dense_param* p : m.parameters()) {
    if (!p->trainable) continue;
    tensor g = p->grad;
    for (std::size_t i = 0; i < p->value.size(); i += 1 + p->value.size() / 7, ++checked)
      EXPECT_NEAR(numeric(&p->value[i]), g[i], 2e-3 + 3e-2 * std::abs(g[i])) << p->name << "[" << i << "]";
  }
  for (embedding_table* t : m.embedding_tables()) {
    sparse_grad g = t->grad();
    ASSERT_GT(g.size(), 0u) << t->name();
    for (std::size_t r = 0; r < g.size(); r += 3)
      for (std::size_t k = 0; k < g.dim; ++k, ++checked)
        EXPECT_NEAR(numeric(t->row(g.ids[r]) + k), g.row(r)[k], 2e-3 + 3e-2 * std::abs(g.row(r)[k]))
            << t->name() << " row " << g.ids[r];
  }
  EXPECT_GT(checked, 8u);
}

TEST(model, deepfm_gradients_end_to_end) {
  auto d = small_ctr(8);
  auto m = build({.type = "deepfm", .hidden = {5, 4}, .embedding_dim = 3, .embedding_scale = 0.3}, d.info);
  ASSERT_TRUE(m);
  check_model_gradients(*m, batch(d, 0, 8));
}

TEST(model, wide_deep_and_lr_gradients_end_to_end) {
  auto d = small_ctr(8);
  auto wd = build({.type = "wide_deep", .hidden = {4}, .embedding_dim = 2, .embedding_scale = 0.3}, d.info);
  ASSERT_TRUE(wd);
  check_model_gradients(*wd, batch(d, 0, 8));
  auto lr = build({.type = "lr"}, d.info);
  ASSERT_TRUE(lr);
  // The linear table starts at zeros; one step makes its rows non-trivial.
  check_model_gradients(*lr, batch(d, 0, 8));
}

TEST(model, cnn_and_mlp_gradients_end_to_end) {
  auto d = small_images(4);
  auto cnn = build({.type = "cnn", .filters = {2, 3}, .cnn_dropout = 0.0}, d.info);
  ASSERT_TRUE(cnn);
  check_model_gradients(*cnn, batch(d, 0, 4));
  auto mlp = build({.type = "mlp", .hidden = {6, 5}}, d.info);
  ASSERT_TRUE(mlp);
  check_model_gradients(*mlp, batch(d, 0, 4));
}

TEST(model, parameters_have_stable_names) {
  auto d = small_images();
  auto m = build({.type = "mlp", .hidden = {8}}, d.info);
  ASSERT_TRUE(m);
  std::vector<std::string> names;
  for (auto* p : m->parameters()) names.push_back(p->name);
  EXPECT_EQ(names,
            (std::vector<std::string>{"dense_1/weight", "dense_1/bias", "logits/weight", "logits/bias"}));
  auto again = build({.type = "mlp", .hidden = {8}}, d.info);
  EXPECT_EQ(std::vector<float>(m->parameters()[0]->value.begin(), m->parameters()[0]->value.end()),
            std::vector<float>(again->parameters()[0]->value.begin(), again->parameters()[0]->value.end()));
  auto ctr = small_ctr();
  auto fm = build({.type = "deepfm", .hidden = {4}}, ctr.info);
  ASSERT_EQ(fm->embedding_tables().size(), 2u);
  EXPECT_EQ(fm->embedding_tables()[0]->name(), "linear");
  EXPECT_EQ(fm->embedding_tables()[1]->name(), "embedding");
}

// The worker's flow against a parameter server: pull the batch's rows (here: copy them from a
// "server" model), forward/backward, push the combined sparse gradient.
TEST(model, worker_flow_pull_rows_then_push_sparse_gradients) {
  auto d = small_ctr(32);
  model_config c{.type = "deepfm", .hidden = {4}, .embedding_dim = 2, .seed = 3};
  auto server = build(c, d.info);
  auto worker = build(c, d.info);
  batch b(d, 0, 32);
  for (std::size_t t = 0; t < worker->embedding_tables().size(); ++t) {
    auto ids = worker->batch_ids(b, t);
    ASSERT_FALSE(ids.empty());
    EXPECT_TRUE(std::is_sorted(ids.begin(), ids.end()));
    embedding_table* st = server->embedding_tables()[t];
    std::vector<float> rows(ids.size() * st->dim());
    for (auto& v : rows) v = 0.25f;  // the server's (trained) values
    st->write_rows(ids, rows.data());
    std::vector<float> pulled(rows.size());
    st->read_rows(ids, pulled.data());
    worker->embedding_tables()[t]->write_rows(ids, pulled.data());
  }
  ASSERT_TRUE(worker->forward(b, true));
  ASSERT_TRUE(server->forward(b, true));
  EXPECT_EQ(std::vector<float>(worker->probabilities().begin(), worker->probabilities().end()),
            std::vector<float>(server->probabilities().begin(), server->probabilities().end()));
  worker->backward();
  for (std::size_t t = 0; t < worker->embedding_tables().size(); ++t) {
    const auto& g = worker->embedding_tables()[t]->grad();
    auto ids = worker->batch_ids(b, t);
    std::vector<std::uint64_t> got(g.ids.begin(), g.ids.end());
    std::sort(got.begin(), got.end());
    EXPECT_EQ(got, ids);  // one combined row per distinct id
  }
}

TEST(model, every_builtin_trains_a_step_with_every_optimizer) {
  auto ctr = small_ctr(256);
  auto img = small_images(32);
  for (std::string type : {"lr", "mlp", "cnn", "wide_deep", "deepfm", "sequential"})
    for (std::string opt : {"sgd", "adagrad", "adam"}) {
      const dataset& d = (type == "cnn" || type == "sequential") ? img : ctr;
      model_config c{.type = type, .hidden = {8}, .filters = {2, 2}, .layers = {"flatten", "dense:10"}};
      auto m = build(c, d.info);
      ASSERT_TRUE(m) << type;
      train_config tc;  // assigned, not designated: GCC 12 sees the nested string as uninitialised
      tc.batch_size = 16;
      tc.optimizer.type = opt;
      tc.optimizer.learning_rate = opt == "adam" ? 0.005 : 0.05;
      auto t = trainer::create(*m, tc);
      ASSERT_TRUE(t);
      auto before = (*t)->evaluate(d);
      for (int e = 0; e < 3; ++e) ASSERT_TRUE((*t)->train_epoch(d));
      auto after = (*t)->evaluate(d);
      ASSERT_TRUE(before && after);
      EXPECT_LT(after->loss, before->loss) << type << " with " << opt;
    }
}

// A synchronous round with fewer samples than a full one steps at a fraction of the learning rate:
// the same gradients applied at lr_scale 0.25 move every parameter a quarter as far, and the
// configured rate is back for the next step.
TEST(model, apply_gradients_scales_the_learning_rate_of_one_step) {
  auto d = small_ctr(64);
  std::vector<std::uint32_t> rows(16);
  std::iota(rows.begin(), rows.end(), 0u);
  std::vector<std::vector<float>> moved[2];
  for (double scale : {1.0, 0.25}) {
    auto m = build({.type = "mlp", .hidden = {8}}, d.info);
    ASSERT_TRUE(m);
    train_config tc;
    tc.optimizer.type = "adam";
    tc.optimizer.learning_rate = 0.01;
    auto t = trainer::create(*m, tc);
    ASSERT_TRUE(t);
    ASSERT_TRUE((*t)->compute_gradients(batch(d, rows)));
    std::vector<std::vector<float>> before;
    for (auto* p : (*t)->trainable_parameters())
      before.emplace_back(p->value.data(), p->value.data() + p->value.size());
    (*t)->apply_gradients(scale);
    EXPECT_DOUBLE_EQ((*t)->get_optimizer().learning_rate(), 0.01);
    auto& out = moved[scale == 1.0 ? 0 : 1];
    for (std::size_t i = 0; i < before.size(); ++i) {
      out.emplace_back();
      const float* v = (*t)->trainable_parameters()[i]->value.data();
      for (std::size_t k = 0; k < before[i].size(); ++k) out.back().push_back(v[k] - before[i][k]);
    }
  }
  for (std::size_t i = 0; i < moved[0].size(); ++i)
    for (std::size_t k = 0; k < moved[0][i].size(); ++k)
      EXPECT_NEAR(moved[1][i][k], 0.25f * moved[0][i][k], 1e-6f) << "parameter " << i << " element " << k;
}

TEST(model, bad_configs_and_batches_give_clear_errors) {
  auto ctr = small_ctr();
  auto img = small_images();
  auto& reg = model_registry::instance();
  auto r = reg.create({.type = "resnet"}, img.info);
  ASSERT_FALSE(r);
  EXPECT_TRUE(r.err() == nn_errc::unknown_name);
  EXPECT_NE(r.err().context().find("known: cnn, deepfm, lr, mlp, sequential, wide_deep"), std::string::npos)
      << r.err().to_string();
  r = reg.create({.type = "cnn"}, ctr.info);
  ASSERT_FALSE(r);
  EXPECT_NE(r.err().context().find("needs image data"), std::string::npos);
  r = reg.create({.type = "deepfm"}, img.info);
  ASSERT_FALSE(r);
  // The key named (it read "model 'deepfm': needs sparse categorical fields").
  EXPECT_NE(r.err().context().find("model.type 'deepfm': needs sparse categorical fields (data.source's"),
            std::string::npos)
      << r.err().context();
  r = reg.create({.type = "sequential", .layers = {"flatten", "dense:7"}}, img.info);
  ASSERT_FALSE(r);
  EXPECT_TRUE(r.err() == nn_errc::bad_shape);
  EXPECT_NE(r.err().context().find("10 classes need 10 logits"), std::string::npos) << r.err().to_string();
  r = reg.create({.type = "sequential", .layers = {"conv2d:4", "dense:10"}}, ctr.info);
  ASSERT_FALSE(r);
  EXPECT_NE(r.err().context().find("expects [channels, height, width], got [3]"), std::string::npos)
      << r.err().to_string();
  // A bad entry of [model] layers is named by the key and its place (it named the spec alone); an
  // unknown layer lists the registered ones.
  r = reg.create({.type = "sequential", .layers = {"flatten", "dense:10,3"}}, img.info);
  ASSERT_FALSE(r);
  EXPECT_NE(r.err().context().find(
                "model.layers[1] 'dense:10,3': layer 'dense' takes at most 1 bare number (units)"),
            std::string::npos)
      << r.err().to_string();
  r = reg.create({.type = "sequential", .layers = {"flatten", "relux", "dense:10"}}, img.info);
  ASSERT_FALSE(r);
  EXPECT_NE(r.err().context().find("model.layers[1] 'relux': layer 'relux' is not registered (registered: "),
            std::string::npos)
      << r.err().to_string();
  EXPECT_NE(r.err().context().find("dense"), std::string::npos) << r.err().to_string();
  r = reg.create({.type = "mlp", .hidden = {0}}, img.info);
  ASSERT_FALSE(r);
  EXPECT_TRUE(r.err() == nn_errc::bad_config);

  auto m = reg.create({.type = "mlp", .hidden = {4}}, img.info);
  ASSERT_TRUE(m);
  auto f = (*m)->forward(batch(ctr, 0, 4), true);
  ASSERT_FALSE(f);
  EXPECT_TRUE(f.err() == nn_errc::bad_shape);
  EXPECT_NE(f.err().context().find("dense_dim 3, the model was built for 64"), std::string::npos)
      << f.err().to_string();
  img.labels[2] = 12;
  f = (*m)->forward(batch(img, 0, 4), true);
  ASSERT_FALSE(f);
  EXPECT_NE(f.err().context().find("row 2"), std::string::npos);
}

}  // namespace
}  // namespace troupe::nn
