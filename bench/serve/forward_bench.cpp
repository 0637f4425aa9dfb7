// serve_forward_bench: the model's own forward time, libtorch in a tight loop through the same
// predictor the replicas use (troupe/model/predictor.hpp): the floor under a served request.
//
//   serve_forward_bench MODEL_DIR [--threads 1] [--rows 1] [--iterations 20000]
//
// Prints one JSON line: p50/p99/mean microseconds per predict() of `rows` rows (random inputs,
// after the predictor's own warm-up).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "troupe/model/model_dir.hpp"
#include "troupe/model/predictor.hpp"

int main(int argc, char** argv) {
  if (argc < 2)
    return std::fprintf(stderr, "usage: serve_forward_bench MODEL_DIR [--threads T] [--rows R]\n"), 2;
  int threads = 1, iterations = 20000;
  std::size_t rows = 1;
  for (int i = 2; i + 1 < argc; i += 2) {
    std::string k = argv[i];
    if (k == "--threads") threads = std::atoi(argv[i + 1]);
    if (k == "--rows") rows = static_cast<std::size_t>(std::atol(argv[i + 1]));
    if (k == "--iterations") iterations = std::atoi(argv[i + 1]);
  }
  auto m = troupe::model::read_model_dir(argv[1]);
  if (!m) return std::fprintf(stderr, "%s\n", m.err().to_string().c_str()), 1;
  auto o = troupe::model::options_for(*m);
  o.threads = threads;
  o.max_batch = std::max<std::size_t>(rows, 1);
  auto p = troupe::model::load_predictor(o);
  if (!p) return std::fprintf(stderr, "%s\n", p.err().to_string().c_str()), 1;
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(0, 1);
  std::vector<float> dense(rows * m->dense_dim), logits(rows * m->logits);
  for (auto& v : dense) v = u(rng);
  std::vector<std::int64_t> ids(rows * m->fields);
  for (std::size_t i = 0; i < ids.size(); ++i)
    ids[i] = static_cast<std::int64_t>((i % m->fields) * m->buckets_per_field +
                                       rng() % std::max<std::uint64_t>(1, m->buckets_per_field));
  std::vector<double> us;
  us.reserve(static_cast<std::size_t>(iterations));
  for (int i = 0; i < iterations; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    auto e = (*p)->predict(dense.data(), ids.data(), rows, logits.data());
    us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
    if (!e.empty()) return std::fprintf(stderr, "%s\n", e.c_str()), 1;
  }
  double mean = 0;
  for (double v : us) mean += v;
  mean /= static_cast<double>(us.size());
  std::sort(us.begin(), us.end());
  std::printf(
      "{\"model\": \"%s\", \"rows\": %zu, \"threads\": %d, \"iterations\": %d, \"p50_us\": %.1f, \"p99_us\": "
      "%.1f, "
      "\"mean_us\": %.1f}\n",
      m->model.c_str(), rows, threads, iterations, us[us.size() / 2], us[us.size() * 99 / 100], mean);
  return 0;
}
