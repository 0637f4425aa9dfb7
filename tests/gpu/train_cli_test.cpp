// `troupe train --local` with [train] device = "gpu": one clear error line without a device,
// and (on a GPU machine) a trained model whose JSON line says where it trained.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "run_command.hpp"
#include "troupe/gpu/cuda.hpp"

namespace {

using troupe::test_util::command_result;

// stdout and stderr apart: the JSON line is stdout's only line.
command_result run(const std::string& args) {
  return troupe::test_util::run_troupe(args, troupe::test_util::stderr_mode::separate);
}

const std::string deepfm_small =
    std::string("train --local ") + TROUPE_SOURCE_DIR +
    "/examples/deepfm_synthetic.toml --set data.rows=20000 --set data.test_rows=5000"
    " --set train.epochs=1 --set train.device=gpu";

TEST(gpu_train_cli, without_a_device_fails_with_one_line) {
  if (troupe::gpu::device_count()) GTEST_SKIP() << "a GPU is present; this checks the no-device path";
  auto r = run(deepfm_small);
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(r.out.empty()) << r.out;
  const bool named = r.err.rfind("troupe: error: gpu: no CUDA device: ", 0) == 0 ||
                     r.err.rfind("troupe: error: gpu: troupe was built without CUDA", 0) == 0;
  EXPECT_TRUE(named) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
}

TEST(gpu_train_cli, unknown_device_is_a_config_error) {
  auto r = run(deepfm_small + " --set train.device=tpu");
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find("'train.device': 'tpu' is not one of: cpu, gpu"), std::string::npos) << r.err;
}

TEST(gpu_train_cli, deepfm_trains_on_the_gpu) {
  auto n = troupe::gpu::device_count();
  if (!n) GTEST_SKIP() << n.err().to_string();
  auto r = run(deepfm_small);
  ASSERT_EQ(r.code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["device"], "gpu");
  EXPECT_GT(j["test_auc"].get<double>(), 0.6);
}

}  // namespace
