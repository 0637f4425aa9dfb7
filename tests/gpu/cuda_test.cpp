#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "gpu_skip.hpp"
#include "troupe/gpu/cuda.hpp"

namespace troupe::gpu {
namespace {

TEST(gpu_errc, messages_name_the_category_and_call) {
  error e(gpu_errc::cuda_failed, "cudaMalloc(4194304 bytes): out of memory");
  EXPECT_EQ(e.to_string(), "gpu: cuda call failed: cudaMalloc(4194304 bytes): out of memory");
  EXPECT_EQ(error(gpu_errc::not_built, "x").to_string(), "gpu: troupe was built without CUDA: x");
  EXPECT_EQ(error(gpu_errc::no_device, "y").to_string(), "gpu: no CUDA device: y");
  EXPECT_TRUE(e == gpu_errc::cuda_failed);
  EXPECT_EQ(std::string(gpu_category().name()), "gpu");
}

// Runs everywhere: without a device, every entry point reports why instead of crashing.
TEST(gpu_runtime, device_count_reports_a_reason_or_a_count) {
  auto n = device_count();
  if (n) {
    EXPECT_GE(*n, 1);
    return;
  }
  if (built_with_cuda()) {
    EXPECT_TRUE(n.err() == gpu_errc::no_device || n.err() == gpu_errc::cuda_failed) << n.err().to_string();
  } else {
    EXPECT_TRUE(n.err() == gpu_errc::not_built);
  }
  EXPECT_FALSE(n.err().context().empty());
  std::printf("no GPU here: %s\n", n.err().to_string().c_str());
  auto s = stream::create();
  EXPECT_FALSE(s.has_value());
  auto b = device_buffer<float>::alloc(16);
  EXPECT_FALSE(b.has_value());
  EXPECT_FALSE(set_device(0).has_value());
  EXPECT_FALSE(describe(0).has_value());
}

TEST(gpu_runtime, empty_buffers_need_no_runtime) {
  auto b = device_buffer<float>::alloc(0);
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->size(), 0u);
  EXPECT_EQ(b->data(), nullptr);
  device_buffer<float> moved = std::move(*b);
  EXPECT_EQ(moved.size(), 0u);
}

TEST(gpu_runtime, describe_rejects_a_bad_ordinal) {
  TROUPE_REQUIRE_GPU();
  auto n = device_count();
  auto d = describe(*n);
  ASSERT_FALSE(d.has_value());
  EXPECT_TRUE(d.err() == gpu_errc::no_device) << d.err().to_string();
  auto first = describe(0);
  ASSERT_TRUE(first.has_value()) << first.err().to_string();
  EXPECT_FALSE(first->name.empty());
  EXPECT_EQ(first->uuid.rfind("GPU-", 0), 0u);
  EXPECT_GT(first->total_memory, 0u);
}

TEST(gpu_runtime, buffer_round_trip_on_a_stream) {
  TROUPE_REQUIRE_GPU();
  ASSERT_TRUE(set_device(0).has_value());
  auto s = stream::create();
  ASSERT_TRUE(s.has_value()) << s.err().to_string();
  std::vector<float> host(1000), back(1000, -1.0f);
  std::iota(host.begin(), host.end(), 0.5f);
  auto a = device_buffer<float>::alloc(host.size());
  ASSERT_TRUE(a.has_value()) << a.err().to_string();
  ASSERT_TRUE(a->upload(host, s->get()).has_value());
  ASSERT_TRUE(a->download(back, s->get()).has_value());
  ASSERT_TRUE(s->sync().has_value());
  EXPECT_EQ(host, back);
  ASSERT_TRUE(a->zero(s->get()).has_value());
  ASSERT_TRUE(a->download(back, s->get()).has_value());
  ASSERT_TRUE(s->sync().has_value());
  EXPECT_EQ(back, std::vector<float>(1000, 0.0f));
  std::vector<float> wrong(3);
  auto bad = a->upload(wrong, s->get());
  EXPECT_FALSE(bad.has_value());
}

TEST(gpu_runtime, huge_alloc_fails_naming_the_call) {
  TROUPE_REQUIRE_GPU();
  auto b = device_buffer<float>::alloc(std::size_t{1} << 45);  // 128 TiB
  ASSERT_FALSE(b.has_value());
  EXPECT_TRUE(b.err() == gpu_errc::cuda_failed);
  EXPECT_NE(b.err().to_string().find("cudaMalloc(140737488355328 bytes)"), std::string::npos)
      << b.err().to_string();
  // The sticky error is cleared: later calls work.
  auto ok = device_buffer<float>::alloc(4);
  EXPECT_TRUE(ok.has_value());
}

TEST(gpu_runtime, events_and_pinned_memory) {
  TROUPE_REQUIRE_GPU();
  auto g = device_guard::make(0);
  ASSERT_TRUE(g.has_value()) << g.err().to_string();
  auto s = stream::create();
  ASSERT_TRUE(s.has_value());
  auto start = event::create(true), end = event::create(true);
  ASSERT_TRUE(start.has_value() && end.has_value());
  auto p = pinned_buffer<int>::alloc(256);
  ASSERT_TRUE(p.has_value()) << p.err().to_string();
  std::iota(p->data(), p->data() + 256, 0);
  auto d = device_buffer<int>::alloc(256);
  ASSERT_TRUE(d.has_value());
  ASSERT_TRUE(start->record(s->get()).has_value());
  ASSERT_TRUE(d->upload(p->span(), s->get()).has_value());
  ASSERT_TRUE(end->record(s->get()).has_value());
  ASSERT_TRUE(end->sync().has_value());
  auto done = end->query();
  ASSERT_TRUE(done.has_value());
  EXPECT_TRUE(*done);
  auto ms = event::elapsed_ms(*start, *end);
  ASSERT_TRUE(ms.has_value()) << ms.err().to_string();
  EXPECT_GE(*ms, 0.0f);
}

}  // namespace
// cuBLAS is opened on first use, not linked (start-up cost): its symbols must resolve. Needs no
// device, so it runs on machines without a GPU too.
TEST(gpu_libraries, cublas_opens_on_demand) {
  auto r = load_libraries();
  if (!built_with_cuda()) {
    EXPECT_TRUE(r.err() == gpu_errc::not_built);
    return;
  }
  EXPECT_TRUE(r) << r.err().to_string();
}

}  // namespace troupe::gpu
