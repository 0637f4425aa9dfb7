// Device optimizers against nn's, dense and on embedding rows, over a few steps.
#include <gtest/gtest.h>

#include "gpu_harness.hpp"
#include "gpu_skip.hpp"
#include "troupe/gpu/layers.hpp"
#include "troupe/nn/optimizer.hpp"

namespace troupe::gpu {
namespace {

using testing::expect_close;
using testing::random_floats;
using testing::to_device;
using testing::to_host;

std::vector<nn::optimizer_config> configs() {
  std::vector<nn::optimizer_config> out;
  nn::optimizer_config c;
  c.type = "sgd", c.learning_rate = 0.1;
  out.push_back(c);
  c.momentum = 0.9, c.weight_decay = 0.01;
  out.push_back(c);
  c.nesterov = true;
  out.push_back(c);
  c = {};
  c.type = "adagrad", c.learning_rate = 0.05;
  out.push_back(c);
  c = {};
  c.type = "adam", c.learning_rate = 0.01, c.weight_decay = 0.001;
  out.push_back(c);
  return out;
}

std::string label(const nn::optimizer_config& c) {
  return c.type + (c.momentum > 0 ? "+momentum" : "") + (c.nesterov ? "+nesterov" : "");
}

TEST(gpu_optimizer, dense_updates_match_nn) {
  TROUPE_REQUIRE_GPU();
  auto st = stream::create();
  ASSERT_TRUE(st.has_value());
  cuda_stream s = st->get();
  const std::size_t n = 1000;
  for (const auto& c : configs()) {
    auto host = nn::make_optimizer(c);
    auto dev = device_optimizer::create(c);
    ASSERT_TRUE(host && dev) << label(c);
    ASSERT_EQ((*dev)->slots_per_element(), (*host)->slots_per_element());
    nn::tensor w(nn::shape{n}), g(nn::shape{n});
    auto w0 = random_floats(n, 1);
    std::copy(w0.begin(), w0.end(), w.begin());
    nn::dense_slots hs;
    auto dw = to_device(w0, s);
    auto dslots = to_device(std::vector<float>(n * (*dev)->slots_per_element(), (*dev)->slot_init()), s);
    std::uint64_t step = 0;
    for (std::uint64_t k = 0; k < 3; ++k) {
      auto gv = random_floats(n, 100 + k);
      std::copy(gv.begin(), gv.end(), g.begin());
      nn::apply_dense(**host, w, g, hs);
      auto dg = to_device(gv, s);
      auto r = (*dev)->update_dense(dw.data(), dg.data(), dslots.data(), n, step, s);
      ASSERT_TRUE(r.has_value()) << r.err().to_string();
      ASSERT_TRUE(sync_stream(s).has_value());  // dg is freed at the end of the iteration
    }
    EXPECT_EQ(step, hs.step);
    expect_close(to_host(dw.data(), n, s), std::span<const float>(w.data(), n), label(c) + " dense");
  }
}

TEST(gpu_optimizer, row_updates_match_nn) {
  TROUPE_REQUIRE_GPU();
  auto st = stream::create();
  ASSERT_TRUE(st.has_value());
  cuda_stream s = st->get();
  const std::size_t dim = 5, rows = 6;
  const std::vector<std::uint64_t> ids{100, 101, 102, 103, 104, 105};
  // Each step touches a different subset, so per-row step counters (lazy Adam) diverge.
  const std::vector<std::vector<std::int32_t>> touched{{0, 2, 5}, {2, 3}, {5, 0, 1, 2}};
  for (const auto& c : configs()) {
    auto host = nn::make_optimizer(c);
    auto dev = device_optimizer::create(c);
    ASSERT_TRUE(host && dev) << label(c);
    nn::embedding_table table("t", dim, 1);
    auto init = random_floats(rows * dim, 2);
    table.write_rows(ids, init.data());
    nn::row_slots hslots(dim, **host);
    const std::size_t width = dim * (*dev)->slots_per_element();
    auto dtable = to_device(init, s);
    auto dslots =
        to_device(std::vector<float>(std::max<std::size_t>(rows * width, 1), (*dev)->slot_init()), s);
    auto dsteps = to_device(std::vector<std::uint32_t>(rows, 0), s);
    for (std::size_t k = 0; k < touched.size(); ++k) {
      nn::sparse_grad g;
      g.dim = dim;
      for (auto r : touched[k]) g.ids.push_back(ids[static_cast<std::size_t>(r)]);
      g.rows = random_floats(touched[k].size() * dim, 50 + k);
      nn::apply_sparse(**host, table, g, hslots);
      auto drows = to_device(touched[k], s);
      auto dg = to_device(g.rows, s);
      auto r = (*dev)->update_rows(dtable.data(), width ? dslots.data() : nullptr, dsteps.data(),
                                   drows.data(), dg.data(), touched[k].size(), dim, s);
      ASSERT_TRUE(r.has_value()) << r.err().to_string();
      ASSERT_TRUE(sync_stream(s).has_value());
    }
    std::vector<float> want(rows * dim);
    table.read_rows(ids, want.data());
    expect_close(to_host(dtable.data(), rows * dim, s), want, label(c) + " rows");
  }
}

TEST(gpu_optimizer, bad_configs_are_nn_errors) {
  // Validation happens before any device work: the same error on every machine with CUDA built.
  nn::optimizer_config c;
  c.type = "rmsprop";
  auto o = device_optimizer::create(c);
  ASSERT_FALSE(o.has_value());
  if (built_with_cuda())
    EXPECT_NE(o.err().to_string().find("rmsprop"), std::string::npos) << o.err().to_string();
  else
    EXPECT_TRUE(o.err() == gpu_errc::not_built);
}

}  // namespace
}  // namespace troupe::gpu
