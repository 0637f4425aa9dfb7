// The infer request's parse (serve/src/infer_codec.hpp: JSON scan, structure and number reads) on
// one CPU thread: a request of ROWS Fashion-MNIST-like rows (784 values each, printed as clients
// print them: rounded to 4 or 6 decimals, or the 17-digit shortest text of a float32 as a double),
// parsed REPS times; ns per number (the best of 5 rounds, thread CPU time).
// Usage: serve_parse_bench [--rows N] [--reps N]
#include <time.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>

#include "../../serve/src/infer_codec.hpp"

namespace {

double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

std::string body(std::size_t rows, const char* format) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> pixel(0, 1);
  std::string data;
  char buf[40];
  for (std::size_t i = 0; i < rows * 784; ++i) {
    std::snprintf(buf, sizeof buf, format, static_cast<double>(pixel(rng)));
    if (i) data += ", ";
    data += buf;
  }
  return R"({"id": "q", "inputs": [{"name": "dense", "datatype": "FP32", "shape": [)" + std::to_string(rows) +
         R"(, 784], "data": [)" + data + "]}]}";
}

}  // namespace

int main(int argc, char** argv) {
  std::size_t rows = 64;
  int reps = 20;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--rows")) rows = std::strtoul(argv[i + 1], nullptr, 10);
    if (!std::strcmp(argv[i], "--reps")) reps = std::atoi(argv[i + 1]);
  }
  troupe::serve::model_shape shape;
  shape.dense_dim = 784;
  shape.max_rows = rows;
  shape.kind = troupe::model::output_kind::multiclass;
  shape.width = 10;
  for (const char* format : {"%.4f", "%.6f", "%.17g"}) {
    const std::string text = body(rows, format);
    double best = 1e30;
    for (int round = 0; round < 5; ++round) {
      const double t0 = thread_cpu_seconds();
      for (int r = 0; r < reps; ++r)
        if (auto in = troupe::serve::parse_infer_request(text, shape); !in || in->dense.size() != rows * 784)
          return std::fprintf(stderr, "parse failed: %s\n", in ? "rows" : in.err().to_string().c_str()), 1;
      best = std::min(best, (thread_cpu_seconds() - t0) / reps);
    }
    std::printf(
        "{\"bench\": \"serve_parse\", \"numbers\": \"%s\", \"rows\": %zu, \"body_bytes\": %zu, "
        "\"us_per_request\": %.1f, \"ns_per_number\": %.1f}\n",
        format, rows, text.size(), best * 1e6, best * 1e9 / static_cast<double>(rows * 784));
  }
  return 0;
}
