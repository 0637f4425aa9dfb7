// MLP 784-256-128-10 training throughput at batch 64 on one thread, against (a) the GEMM-only
// bound: the very sgemm calls of a training step (same shapes, transposes and betas) with
// nothing else, and (b) PyTorch (bench/nn/torch_mlp.py, same model, batch and optimizer).
// With --model cnn: the CNN of examples/fashion_mnist_cnn.toml (conv 32, conv 64, batch norm, max
// pool, dropout 0.25, dense 10; Adam 1e-3) against PyTorch's (torch_mlp.py --model cnn); no bound.
// Prints JSON lines. Usage: nn_mlp_bench [--model mlp|cnn] [--steps N] [--rounds R] [--no-torch]
#include <cblas.h>

#include <time.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "troupe/nn/model.hpp"
#include "troupe/nn/random.hpp"
#include "troupe/nn/trainer.hpp"

namespace {

using namespace troupe::nn;
using clock_type = std::chrono::steady_clock;

constexpr int batch_size = 64;
const int dims[] = {784, 256, 128, 10};

dataset random_images(std::size_t rows) {
  dataset d;
  d.info = {"random-784", 784, 0, 10, {1, 28, 28}, 0};
  d.rows = rows;
  rng r(7);
  d.dense.resize(rows * 784);
  for (auto& v : d.dense) v = r.uniform_f();
  for (std::size_t i = 0; i < rows; ++i) d.labels.push_back(static_cast<float>(r.below(10)));
  return d;
}

// Samples/s of the best round, by wall time and by this thread's CPU time. On a shared machine
// the CPU-time figure is the robust one (time spent descheduled does not count); everything
// here runs on the calling thread (one OpenBLAS thread), so the two agree on a quiet machine.
struct rate {
  double wall = 0, cpu = 0;
};

double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

rate best_of(int rounds, int steps, const auto& one_step) {
  rate best;
  for (int r = 0; r < rounds; ++r) {
    auto t0 = clock_type::now();
    const double c0 = thread_cpu_seconds();
    for (int s = 0; s < steps; ++s) one_step(s);
    const double cpu = thread_cpu_seconds() - c0;
    const double secs = std::chrono::duration<double>(clock_type::now() - t0).count();
    best.wall = std::max(best.wall, steps * batch_size / secs);
    best.cpu = std::max(best.cpu, steps * batch_size / cpu);
  }
  return best;
}

rate max(rate a, rate b) {
  return {std::max(a.wall, b.wall), std::max(a.cpu, b.cpu)};
}

rate bench_troupe(const std::string& kind, int steps, int rounds) {
  dataset d = random_images(batch_size * 100);
  auto m = model_registry::instance().create({.type = kind, .hidden = {256, 128}}, d.info);
  train_config tc;  // assigned, not designated: GCC 12 sees the nested string as uninitialised
  tc.batch_size = batch_size;
  tc.optimizer.type = kind == "cnn" ? "adam" : "sgd";
  tc.optimizer.learning_rate = kind == "cnn" ? 0.001 : 0.01;
  tc.optimizer.momentum = 0.9;
  tc.threads = 1;
  auto t = trainer::create(**m, tc);
  auto one = [&](int s) {
    const std::size_t first = (static_cast<std::size_t>(s) * batch_size) % d.rows;
    (void)(*t)->step(batch(d, first, batch_size));
  };
  for (int s = 0; s < 50; ++s) one(s);
  return best_of(rounds, steps, one);
}

// The sgemm calls of dense_layer forward/backward for the three layers; the first layer
// computes no input gradient (as in the model).
rate bench_gemm_bound(int steps, int rounds) {
  std::vector<std::vector<float>> act(4), w(3), dw(3), dact(4);
  act[0].assign(batch_size * 784, 0.5f);
  for (int l = 0; l < 3; ++l) {
    w[l].assign(dims[l] * dims[l + 1], 0.01f);
    dw[l].assign(dims[l] * dims[l + 1], 0.0f);
    act[l + 1].assign(batch_size * dims[l + 1], 0.1f);
    dact[l + 1].assign(batch_size * dims[l + 1], 0.1f);
  }
  auto one = [&](int) {
    for (int l = 0; l < 3; ++l)
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, batch_size, dims[l + 1], dims[l], 1.0f,
                  act[l].data(), dims[l], w[l].data(), dims[l + 1], 1.0f, act[l + 1].data(), dims[l + 1]);
    for (int l = 2; l >= 0; --l) {
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, dims[l], dims[l + 1], batch_size, 1.0f,
                  act[l].data(), dims[l], dact[l + 1].data(), dims[l + 1], 0.0f, dw[l].data(), dims[l + 1]);
      if (l > 0)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, batch_size, dims[l], dims[l + 1], 1.0f,
                    dact[l + 1].data(), dims[l + 1], w[l].data(), dims[l + 1], 0.0f, dact[l].data(), dims[l]);
    }
  };
  for (int s = 0; s < 50; ++s) one(s);
  return best_of(rounds, steps, one);
}

nlohmann::json bench_torch(const std::string& kind, int steps, int rounds) {
  std::string cmd = "OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 /usr/bin/python3 " +
                    std::string(TROUPE_SOURCE_DIR) + "/bench/nn/torch_mlp.py --model " + kind +
                    " --batch 64 --steps " + std::to_string(steps) + " --rounds " + std::to_string(rounds) +
                    " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return {{"error", "cannot start /usr/bin/python3"}};
  std::string out, last;
  char buf[4096];
  while (std::fgets(buf, sizeof buf, p)) out += buf;
  const int rc = pclose(p);
  auto pos = out.rfind("{\"bench\"");
  if (rc != 0 || pos == std::string::npos) return {{"error", "torch_mlp.py failed: " + out}};
  return nlohmann::json::parse(out.substr(pos, out.find('\n', pos) - pos));
}

// The CNN: troupe's and PyTorch's samples/s, interleaved.
int bench_cnn(int steps, int rounds, bool torch) {
  rate troupe_r;
  for (int k = 0; k < 3; ++k) troupe_r = max(troupe_r, bench_troupe("cnn", steps, rounds));
  std::printf("%s\n", nlohmann::json{{"bench", "nn_cnn_train"},
                                     {"model", "cnn conv32-conv64-bn-pool-dropout-dense10"},
                                     {"batch", batch_size},
                                     {"threads", 1},
                                     {"optimizer", "adam 1e-3"},
                                     {"samples_per_s", troupe_r.cpu},
                                     {"samples_per_wall_s", troupe_r.wall}}
                          .dump()
                          .c_str());
  if (!torch) return 0;
  auto t = bench_torch("cnn", steps, rounds);
  std::printf("%s\n", t.dump().c_str());
  if (t.contains("samples_per_s"))
    std::printf("%s\n", nlohmann::json{{"bench", "nn_cnn_summary"},
                                       {"speedup_vs_torch", troupe_r.cpu / t["samples_per_s"].get<double>()},
                                       {"speedup_vs_torch_wall",
                                        troupe_r.wall / t["samples_per_wall_s"].get<double>()}}
                            .dump()
                            .c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int steps = 300, rounds = 5;
  bool torch = true;
  std::string kind = "mlp";
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--steps") && i + 1 < argc)
      steps = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--rounds") && i + 1 < argc)
      rounds = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--model") && i + 1 < argc)
      kind = argv[++i];
    else if (!std::strcmp(argv[i], "--no-torch"))
      torch = false;
  }
  openblas_set_num_threads(1);
  if (kind == "cnn") return bench_cnn(steps, rounds, torch);
  if (kind != "mlp") return std::fprintf(stderr, "--model: mlp or cnn, not '%s'\n", kind.c_str()), 2;
  // Interleaved so that machine noise hits both alike; the best round of each is kept.
  rate troupe_r, gemm_r;
  for (int k = 0; k < 3; ++k) {
    troupe_r = max(troupe_r, bench_troupe("mlp", steps, rounds));
    gemm_r = max(gemm_r, bench_gemm_bound(steps, rounds));
  }
  const double flops_per_sample = 2.0 * (784 * 256 + 256 * 128 + 128 * 10) * 2 + 2.0 * (256 * 128 + 128 * 10);
  std::printf("%s\n", nlohmann::json{{"bench", "nn_mlp_train"},
                                     {"model", "mlp 784-256-128-10"},
                                     {"batch", batch_size},
                                     {"threads", 1},
                                     {"optimizer", "sgd momentum 0.9"},
                                     {"samples_per_s", troupe_r.cpu},
                                     {"samples_per_wall_s", troupe_r.wall},
                                     {"gflops", troupe_r.cpu * flops_per_sample / 1e9}}
                          .dump()
                          .c_str());
  std::printf("%s\n", nlohmann::json{{"bench", "nn_mlp_gemm_bound"},
                                     {"batch", batch_size},
                                     {"threads", 1},
                                     {"samples_per_s", gemm_r.cpu},
                                     {"samples_per_wall_s", gemm_r.wall},
                                     {"gflops", gemm_r.cpu * flops_per_sample / 1e9}}
                          .dump()
                          .c_str());
  nlohmann::json summary{{"bench", "nn_mlp_summary"},
                         {"fraction_of_gemm_bound", troupe_r.cpu / gemm_r.cpu},
                         {"fraction_of_gemm_bound_wall", troupe_r.wall / gemm_r.wall}};
  if (torch) {
    auto t = bench_torch("mlp", steps, rounds);
    std::printf("%s\n", t.dump().c_str());
    if (t.contains("samples_per_s")) {
      summary["speedup_vs_torch"] = troupe_r.cpu / t["samples_per_s"].get<double>();
      summary["speedup_vs_torch_wall"] = troupe_r.wall / t["samples_per_wall_s"].get<double>();
    }
  }
  std::printf("%s\n", summary.dump().c_str());
  return 0;
}
