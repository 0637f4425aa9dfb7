// Training throughput of gpu::device_trainer: MLP 784-256-128-10 on Fashion-MNIST (batch 64 and
// 512, SGD momentum 0.9) and DeepFM on synthetic CTR data (batch 512, Adam). A step is
// compute_gradients (batch staged from host memory, forward, backward, loss read back) plus
// apply_gradients; samples/s of the best of several timed rounds. Prints JSON lines; without a
// GPU one line with the reason. bench/gpu/run.sh runs the PyTorch CUDA peer in the same run.
// Usage: gpu_bench [--steps N] [--rounds R] [--warmup W]
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>

#include <nlohmann/json.hpp>

#include "troupe/gpu/trainer.hpp"
#include "troupe/nn/data/readers.hpp"
#include "troupe/nn/random.hpp"

namespace {

using namespace troupe;

nn::dataset fashion_mnist(std::string& source) {
  auto d = nn::read_fashion_mnist(nn::fashion_mnist_default_dir, "train", 0);
  if (d) {
    source = "fashion-mnist";
    return std::move(*d);
  }
  source = "random 784-pixel images (" + d.err().to_string() + ")";
  nn::dataset r;
  r.info = {"random-784", 784, 0, 10, {1, 28, 28}, 0};
  r.rows = 60000;
  nn::rng g(7);
  r.dense.resize(r.rows * 784);
  for (auto& v : r.dense) v = g.uniform_f();
  for (std::size_t i = 0; i < r.rows; ++i) r.labels.push_back(static_cast<float>(g.below(10)));
  return r;
}

struct result {
  double samples_per_s = 0;
  double final_loss = 0;
  std::string error;
};

int warmup_steps = 50;

result time_training(nn::model& m, const nn::train_config& tc, const nn::dataset& d, int steps, int rounds) {
  result r;
  auto t = gpu::device_trainer::create(0, m, tc);
  if (!t) return {0, 0, t.err().to_string()};
  const std::size_t bs = tc.batch_size, batches = d.rows / bs;
  std::size_t next = 0;
  auto one = [&]() -> bool {
    auto loss = (*t)->compute_gradients(nn::batch(d, (next++ % batches) * bs, bs));
    if (!loss) {
      r.error = loss.err().to_string();
      return false;
    }
    r.final_loss = *loss;
    (*t)->apply_gradients();
    return true;
  };
  for (int s = 0; s < warmup_steps; ++s)
    if (!one()) return r;
  for (int k = 0; k < rounds; ++k) {
    auto t0 = std::chrono::steady_clock::now();
    for (int s = 0; s < steps; ++s)
      if (!one()) return r;
    if (auto ok = (*t)->sync(); !ok) return {0, 0, ok.err().to_string()};
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    r.samples_per_s = std::max(r.samples_per_s, static_cast<double>(steps) * static_cast<double>(bs) / secs);
  }
  return r;
}

void print(const std::string& name, std::size_t batch, const std::string& data, const result& r) {
  nlohmann::json j{{"bench", name}, {"impl", "troupe gpu::device_trainer"}, {"batch", batch}, {"data", data}};
  if (!r.error.empty())
    j["error"] = r.error;
  else
    j["samples_per_s"] = r.samples_per_s, j["last_loss"] = r.final_loss;
  std::printf("%s\n", j.dump().c_str());
  std::fflush(stdout);
}

void bench_mlp(int steps, int rounds) {
  std::string source;
  nn::dataset d = fashion_mnist(source);
  for (std::size_t batch : {std::size_t{64}, std::size_t{512}}) {
    auto m = nn::model_registry::instance().create({.type = "mlp", .hidden = {256, 128}}, d.info);
    if (!m) return print("gpu_mlp_train", batch, source, {0, 0, m.err().to_string()});
    nn::train_config tc{.batch_size = batch,
                        .optimizer = {.type = "sgd", .learning_rate = 0.01, .momentum = 0.9}};
    print("gpu_mlp_train", batch, source, time_training(**m, tc, d, steps, rounds));
  }
}

// Criteo-shaped: 26 categorical fields (1000 ids each, Zipf), 13 dense features.
void bench_deepfm(int steps, int rounds) {
  auto d =
      nn::generate_synthetic_ctr({.rows = 200000, .fields = 26, .vocab_per_field = 1000, .dense_dim = 13});
  if (!d) return print("gpu_deepfm_train", 512, "synthetic-ctr", {0, 0, d.err().to_string()});
  auto m = nn::model_registry::instance().create({.type = "deepfm", .hidden = {256, 128}, .embedding_dim = 8},
                                                 d->data.info);
  if (!m) return print("gpu_deepfm_train", 512, "synthetic-ctr", {0, 0, m.err().to_string()});
  nn::train_config tc;  // assigned, not designated: GCC 12 sees the nested string as uninitialised
  tc.batch_size = 512;
  tc.optimizer.type = "adam";
  tc.optimizer.learning_rate = 0.001;
  print("gpu_deepfm_train", 512, "synthetic-ctr 26 fields x 1000 ids, 13 dense",
        time_training(**m, tc, d->data, steps, rounds));
}

}  // namespace

int main(int argc, char** argv) {
  int steps = 500, rounds = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--steps")) steps = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--rounds")) rounds = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--warmup")) warmup_steps = std::atoi(argv[i + 1]);
  }
  auto n = gpu::device_count();
  if (!n) {
    std::printf("%s\n",
                nlohmann::json{{"bench", "gpu_train"}, {"skipped", n.err().to_string()}}.dump().c_str());
    return 0;
  }
  auto info = gpu::describe(0);
  std::printf("%s\n",
              nlohmann::json{{"bench", "gpu_device"}, {"name", info ? info->name : "?"}}.dump().c_str());
  bench_mlp(steps, rounds);
  bench_deepfm(steps, rounds);
  return 0;
}
