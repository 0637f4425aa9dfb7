// device_trainer against nn::trainer: the same model and batches give the same losses and
// parameters step for step (within float tolerance); errors without a device or on
// unsupported models.
#include <gtest/gtest.h>

#include "gpu_harness.hpp"
#include "gpu_skip.hpp"
#include "troupe/gpu/norms.hpp"
#include "troupe/gpu/trainer.hpp"
#include "troupe/nn/data/readers.hpp"
#include "troupe/nn/random.hpp"

namespace troupe::gpu {
namespace {

using testing::expect_close;

nn::dataset dense_data(std::size_t rows, std::size_t dim, std::size_t classes) {
  nn::dataset d;
  d.info = {"dense-test", dim, 0, classes, {}, 0};
  d.rows = rows;
  d.dense = testing::random_floats(rows * dim, 11);
  for (std::size_t i = 0; i < rows; ++i) d.labels.push_back(static_cast<float>((i * 7) % classes));
  return d;
}

nn::dataset ctr_data(std::size_t rows) {
  auto d = nn::generate_synthetic_ctr({.rows = rows, .fields = 6, .vocab_per_field = 30, .dense_dim = 3});
  EXPECT_TRUE(d.has_value());
  return std::move(d->data);
}

std::unique_ptr<nn::model> build(const nn::model_config& c, const nn::dataset_info& info) {
  auto m = nn::model_registry::instance().create(c, info);
  EXPECT_TRUE(m.has_value()) << m.err().to_string();
  return m ? std::move(*m) : nullptr;
}

// The device's Adam second moments (what the noise scale's preconditioner reads) are the host
// trainer's, parameter by parameter, at the same step; other optimizers have none.
void expect_adam_moments(device_trainer& gpu, nn::trainer& cpu, const nn::optimizer_config& oc,
                         std::size_t steps) {
  const auto moments = gpu.adam_moments();
  if (oc.type != "adam") {
    EXPECT_EQ(moments.v, nullptr) << oc.type << " has no second moments";
    return;
  }
  ASSERT_NE(moments.v, nullptr);
  EXPECT_EQ(moments.step, steps);
  auto got = testing::to_host(moments.v, gpu.dense_count(), gpu.stream());
  std::vector<float> want;
  const auto params = cpu.trainable_parameters();
  for (std::size_t i = 0; i < params.size(); ++i) {
    const auto& v = cpu.dense_state()[i].values;
    const std::size_t n = params[i]->value.size();
    ASSERT_EQ(v.size(), 2 * n) << params[i]->name;
    want.insert(want.end(), v.begin() + static_cast<std::ptrdiff_t>(n), v.end());
  }
  expect_close(got, want, "adam second moments", 1e-3f, 1e-9f);
}

// Trains two replicas of one model (host and device) on the same batches and compares.
void compare_training(const nn::model_config& mc, const nn::optimizer_config& oc, const nn::dataset& data,
                      std::size_t batch, std::size_t steps) {
  auto cpu_model = build(mc, data.info), gpu_model = build(mc, data.info);
  ASSERT_TRUE(cpu_model && gpu_model);
  nn::train_config tc;
  tc.optimizer = oc;
  auto cpu = nn::trainer::create(*cpu_model, tc);
  ASSERT_TRUE(cpu.has_value());
  auto gpu = device_trainer::create(0, *gpu_model, tc);
  ASSERT_TRUE(gpu.has_value()) << gpu.err().to_string();
  std::size_t dense = 0;
  for (auto* p : cpu_model->parameters()) dense += p->trainable ? p->value.size() : 0;
  EXPECT_EQ((*gpu)->dense_count(), dense);
  for (std::size_t k = 0; k < steps; ++k) {
    nn::batch b(data, (k * batch) % (data.rows - batch), batch);
    auto want = (*cpu)->step(b);
    auto got = (*gpu)->compute_gradients(b);
    ASSERT_TRUE(want.has_value() && got.has_value()) << (got ? "" : got.err().to_string());
    EXPECT_NEAR(*got, *want, 1e-4 * std::max(1.0f, std::fabs(*want))) << mc.type << " step " << k;
    (*gpu)->apply_gradients();
  }
  expect_adam_moments(**gpu, **cpu, oc, steps);
  auto ok = (*gpu)->download(*gpu_model);
  ASSERT_TRUE(ok.has_value()) << ok.err().to_string();
  auto cp = cpu_model->parameters(), gp = gpu_model->parameters();
  for (std::size_t i = 0; i < cp.size(); ++i)
    expect_close(std::span<const float>(gp[i]->value.data(), gp[i]->value.size()),
                 std::span<const float>(cp[i]->value.data(), cp[i]->value.size()),
                 mc.type + " " + cp[i]->name, 1e-3f, 1e-5f);
  auto ct = cpu_model->embedding_tables(), gt = gpu_model->embedding_tables();
  ASSERT_EQ(ct.size(), gt.size());
  for (std::size_t t = 0; t < ct.size(); ++t) {
    std::vector<std::uint64_t> ids;
    ct[t]->for_each([&](std::uint64_t id, const float*) { ids.push_back(id); });
    std::vector<float> want(ids.size() * ct[t]->dim()), got(want.size());
    ct[t]->read_rows(ids, want.data());
    gt[t]->read_rows(ids, got.data());
    expect_close(got, want, mc.type + " table " + ct[t]->name(), 1e-3f, 1e-5f);
  }
}

TEST(gpu_trainer, mlp_matches_nn_trainer) {
  TROUPE_REQUIRE_GPU();
  auto data = dense_data(512, 20, 5);
  nn::model_config mc;
  mc.type = "mlp", mc.hidden = {32, 16};
  nn::optimizer_config oc;
  oc.type = "sgd", oc.learning_rate = 0.05, oc.momentum = 0.9;
  compare_training(mc, oc, data, 64, 6);
}

TEST(gpu_trainer, deepfm_matches_nn_trainer) {
  TROUPE_REQUIRE_GPU();
  auto data = ctr_data(2000);
  nn::model_config mc;
  mc.type = "deepfm", mc.hidden = {16, 8}, mc.embedding_dim = 4;
  nn::optimizer_config oc;
  oc.type = "adam", oc.learning_rate = 0.01;
  compare_training(mc, oc, data, 128, 6);
}

TEST(gpu_trainer, lr_and_wide_deep_match_nn_trainer) {
  TROUPE_REQUIRE_GPU();
  auto data = ctr_data(1000);
  nn::optimizer_config oc;
  oc.type = "adagrad", oc.learning_rate = 0.05;
  for (const char* type : {"lr", "wide_deep"}) {
    nn::model_config mc;
    mc.type = type, mc.hidden = {8}, mc.embedding_dim = 4;
    compare_training(mc, oc, data, 100, 5);
  }
}

// Thousands of distinct ids: the device table, its step counters and Adagrad's row slots grow
// (by doubling from 1024 rows) between steps and must keep every row's values and state.
TEST(gpu_trainer, growing_embedding_tables_match_nn_trainer) {
  TROUPE_REQUIRE_GPU();
  auto d = nn::generate_synthetic_ctr(
      {.rows = 4000, .fields = 6, .vocab_per_field = 5000, .zipf_exponent = 0.3, .dense_dim = 2});
  ASSERT_TRUE(d.has_value());
  nn::model_config mc;
  mc.type = "deepfm", mc.hidden = {8}, mc.embedding_dim = 4;
  nn::optimizer_config oc;
  oc.type = "adagrad", oc.learning_rate = 0.05;
  compare_training(mc, oc, d->data, 1000, 4);
  compare_training(mc, oc, d->data, 700, 5);  // overlapping batches: rows revisited after growth
}

// compute_gradients' hook runs once, after the backward: the norm it queues is of this step's
// gradient (the first step's: a hook before the backward would read zeros) and has been read back
// when the loss returns, with no sync by the caller.
TEST(gpu_trainer, work_queued_by_the_hook_sees_the_gradient_and_is_done_with_the_loss) {
  TROUPE_REQUIRE_GPU();
  auto data = dense_data(128, 8, 3);
  nn::model_config mc;
  mc.type = "mlp", mc.hidden = {8};
  auto m = build(mc, data.info);
  const nn::train_config defaults;
  auto t = device_trainer::create(0, *m, defaults);
  ASSERT_TRUE(t.has_value()) << t.err().to_string();
  auto& dev = **t;
  auto r = norm_reducer::create();
  ASSERT_TRUE(r.has_value()) << r.err().to_string();
  nn::batch b(data, 0, 32);
  int calls = 0;
  auto loss = dev.compute_gradients(b, [&] {
    ++calls;
    EXPECT_TRUE(r->queue(dev.grads(), dev.dense_count(), false, dev.stream()).has_value());
  });
  ASSERT_TRUE(loss.has_value()) << loss.err().to_string();
  EXPECT_EQ(calls, 1);
  const double queued = r->queued().sqr;
  auto g = testing::to_host(dev.grads(), dev.dense_count(), dev.stream());
  double want = 0;
  for (float x : g) want += static_cast<double>(x) * x;
  EXPECT_GT(want, 0.0);
  EXPECT_NEAR(queued, want, 1e-6 * want);
  auto waited = r->sqr(dev.grads(), dev.dense_count(), dev.stream());
  ASSERT_TRUE(waited.has_value());
  EXPECT_EQ(queued, *waited);
}

TEST(gpu_trainer, upload_replaces_device_parameters) {
  TROUPE_REQUIRE_GPU();
  auto data = dense_data(128, 8, 3);
  nn::model_config mc;
  mc.type = "mlp", mc.hidden = {8};
  auto m = build(mc, data.info), other = build(mc, data.info);
  const nn::train_config defaults;  // named: a braced temporary trips GCC 12's -Wmaybe-uninitialized
  auto t = device_trainer::create(0, *m, defaults);
  ASSERT_TRUE(t.has_value()) << t.err().to_string();
  for (auto* p : other->parameters()) p->value.fill(0.25f);
  ASSERT_TRUE((*t)->upload(*other).has_value());
  ASSERT_TRUE((*t)->download(*m).has_value());
  for (auto* p : m->parameters())
    for (float v : p->value) ASSERT_EQ(v, 0.25f) << p->name;
  auto params = testing::to_host((*t)->params(), (*t)->dense_count(), (*t)->stream());
  for (float v : params) ASSERT_EQ(v, 0.25f);
}

TEST(gpu_trainer, unsupported_model_names_the_layer) {
  TROUPE_REQUIRE_GPU();
  nn::dataset d;
  d.info = {"tiny-images", 64, 0, 10, {1, 8, 8}, 0};
  nn::model_config mc;
  mc.type = "cnn", mc.filters = {2, 2};
  auto m = build(mc, d.info);
  ASSERT_TRUE(m);
  const nn::train_config defaults;  // named: a braced temporary trips GCC 12's -Wmaybe-uninitialized
  auto t = device_trainer::create(0, *m, defaults);
  ASSERT_FALSE(t.has_value());
  EXPECT_TRUE(t.err() == gpu_errc::unsupported) << t.err().to_string();
  EXPECT_NE(t.err().to_string().find("(conv2d) has no GPU implementation"), std::string::npos)
      << t.err().to_string();
}

TEST(gpu_trainer, bad_batches_are_nn_errors) {
  TROUPE_REQUIRE_GPU();
  auto data = dense_data(64, 8, 3);
  nn::model_config mc;
  mc.type = "mlp", mc.hidden = {8};
  auto m = build(mc, data.info);
  const nn::train_config defaults;  // named: a braced temporary trips GCC 12's -Wmaybe-uninitialized
  auto t = device_trainer::create(0, *m, defaults);
  ASSERT_TRUE(t.has_value()) << t.err().to_string();
  auto other = dense_data(64, 9, 3);
  auto r = (*t)->compute_gradients(nn::batch(other, 0, 8));
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.err().to_string().find("dense_dim 9"), std::string::npos) << r.err().to_string();
  data.labels[3] = 7;
  r = (*t)->compute_gradients(nn::batch(data, 0, 8));
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.err().to_string().find("label"), std::string::npos) << r.err().to_string();
}

// Runs everywhere: without a device (or without CUDA) create() says why, in one line.
TEST(gpu_trainer, create_without_a_device_reports_the_reason) {
  if (device_count()) GTEST_SKIP() << "a GPU is present; this checks the no-device path";
  auto data = dense_data(16, 4, 3);
  nn::model_config mc;
  mc.type = "mlp", mc.hidden = {4};
  auto m = build(mc, data.info);
  const nn::train_config defaults;  // named: a braced temporary trips GCC 12's -Wmaybe-uninitialized
  auto t = device_trainer::create(0, *m, defaults);
  ASSERT_FALSE(t.has_value());
  EXPECT_TRUE(t.err() == gpu_errc::no_device || t.err() == gpu_errc::not_built) << t.err().to_string();
  const std::string text = t.err().to_string();
  EXPECT_EQ(text.rfind("gpu: ", 0), 0u) << text;
  EXPECT_EQ(text.find('\n'), std::string::npos) << text;
}

}  // namespace
}  // namespace troupe::gpu
