// Jobs with GPU workers ([job] device = "gpu"). Without a GPU only the startup error runs; with
// one: Fashion-MNIST trains to the CPU run's accuracy, workers sharing the one GPU (host-staged
// allreduce) survive a SIGKILL of one of them, and a ring that lost every worker trains again what
// its checkpoint lacks.
#include <gtest/gtest.h>
#include <signal.h>

#include <fstream>

#include "job_harness.hpp"
#include "troupe/gpu/cuda.hpp"
#include "troupe/storage/task_journal.hpp"

namespace troupe::testing {
namespace {

#define REQUIRE_GPU()                                                 \
  do {                                                                \
    auto n_ = gpu::device_count();                                    \
    if (!n_) GTEST_SKIP() << "needs a GPU: " << n_.err().to_string(); \
  } while (0)

std::string fashion_mlp(const std::string& device, int workers, int epochs) {
  return "strategy = \"allreduce\"\nname = \"fm\"\ndevice = \"" + device +
         "\"\nworkers = " + std::to_string(workers) + "\nrecords_per_task = 500\n" + R"([model]
type = "mlp"
hidden = [64]
[train]
epochs = )" +
         std::to_string(epochs) + R"(
batch_size = 64
optimizer = "adam"
learning_rate = 0.002
seed = 3
[data]
source = "fashion-mnist"
max_train_rows = 12000
max_test_rows = 2000
)";
}

TEST(gpu_job, device_gpu_without_a_gpu_is_a_clear_startup_error) {
  if (auto n = gpu::device_count(); n)
    GTEST_SKIP() << "this host has " << *n << " GPU(s): the error path needs none";
  std::string dir = test_root("gpu-none");
  std::string file = dir + "/job.toml";
  std::ofstream(file) << "[job]\nroot = \"" << dir << "/jobs\"\ndataset_cache = \"" << dataset_cache()
                      << "\"\n"
                      << fashion_mlp("gpu", 2, 1);
  std::string out;
  int rc = troupe("run " + file + " --job-id none", &out);
  EXPECT_EQ(rc, 2) << out;
  EXPECT_NE(out.find("[job] device = \"gpu\", but this host cannot run GPU workers"), std::string::npos)
      << out;
  // The reason itself: no driver/device, or a build without CUDA.
  EXPECT_TRUE(out.find("no CUDA device") != std::string::npos ||
              out.find("without CUDA") != std::string::npos)
      << out;
  EXPECT_FALSE(std::ifstream(dir + "/jobs/none/job.toml").good()) << "no job directory for a refused job";
}

TEST(gpu_job, fashion_mnist_on_gpu_matches_the_cpu_run) {
  REQUIRE_GPU();
  auto cpu = start_job("gpu-vs-cpu-cpu", fashion_mlp("cpu", 2, 2));
  ASSERT_EQ(wait_job(cpu, std::chrono::seconds(240)), 0) << read_file(cpu.err_file);
  auto g = start_job("gpu-vs-cpu-gpu", fashion_mlp("gpu", 2, 2));
  ASSERT_EQ(wait_job(g, std::chrono::seconds(240)), 0) << read_file(g.err_file);
  auto a = result(cpu), b = result(g);
  EXPECT_GT(b.value("test_accuracy", 0.0), 0.75) << b.dump();
  EXPECT_NEAR(b.value("test_accuracy", 0.0), a.value("test_accuracy", 1.0), 0.03) << a.dump() << "\n"
                                                                                  << b.dump();
  expect_all_done(g);
  EXPECT_TRUE(no_processes_of(g));
}

TEST(gpu_job, workers_sharing_the_gpu_survive_a_sigkill) {
  REQUIRE_GPU();
  // 8 epochs of 24 tasks, the kill after the second task: on an H100 a 3-epoch job killed after 4
  // tasks ended before the supervisor restarted the worker.
  auto r = start_job("gpu-shared-kill", fashion_mlp("gpu", 3, 8));
  auto s = wait_status(
      r, [](const nlohmann::json& j) { return j["tasks"]["done"].get<std::uint64_t>() >= 2; },
      std::chrono::seconds(180));
  ASSERT_TRUE(s) << read_file(r.err_file);
  pid_t pid = node_pid(r, "worker-1");
  ASSERT_GT(pid, 0);
  ASSERT_EQ(::kill(pid, SIGKILL), 0);
  ASSERT_EQ(wait_job(r, std::chrono::seconds(300)), 0) << read_file(r.err_file);
  auto res = result(r);
  EXPECT_GE(res.value("node_restarts", 0), 1) << res.dump();
  EXPECT_GT(res.value("test_accuracy", 0.0), 0.75) << res.dump();
  // Several workers on one GPU cannot use NCCL: the log says host-staged.
  EXPECT_NE(read_file(r.job_dir + "/logs/worker-0.log").find("host-staged"), std::string::npos);
  expect_all_done(r);
  EXPECT_TRUE(no_processes_of(r));
}

// Both GPU workers SIGKILLed at once while the runner lives: the new workers' ring starts again from
// the ring's latest checkpoint, and the DONE tasks whose rows were applied after its step are trained
// again, no other (model_export's test of the same on the CPU). The device path reports the ring's
// step with each task; before 2026-12-07 it reported none, and those tasks stayed done with their
// rows in no model.
TEST(gpu_job, a_gpu_ring_that_lost_every_worker_trains_again_what_its_checkpoint_lacks) {
  REQUIRE_GPU();
  std::string toml = "checkpoint_every_ms = 1500\n" + fashion_mlp("gpu", 2, 6);
  toml.replace(toml.find("[train]\n"), 8, "[train]\nmax_samples_per_s = 4000\n");
  auto r = start_job("gpu-ring-all-killed", toml);
  const std::string logs = kill_the_whole_ring(r, true, 144, 6 * 12000);
  EXPECT_NE(logs.find("the ring starts again from its checkpoint of step "), std::string::npos);
}

}  // namespace
}  // namespace troupe::testing
