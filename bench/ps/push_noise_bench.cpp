// What the gradient noise scale costs a PS shard (issue #48, docs/goodput.md "async_ps"): the shard's
// own work on a push's dense gradient (the copy out of the message, wire::to_vector's, and the
// optimizer's update, nn::apply_dense) with and without the estimate from the pushes
// (ps/push_noise.hpp), interleaved in blocks in one run so that both see the same load. Adam (its
// second moments weigh the norms once 5 steps old) and SGD; dense slices of --sizes floats (the
// Fashion-MNIST MLP's 784x64 layer, the mlp256 model's dense gradient, 1M). One JSON line per (size,
// optimizer): the median microseconds per push of each and the overhead.
//
//   push_noise_bench [--sizes 50240,235146,1048576] [--blocks 41] [--pushes 64] [--every 8]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "ps/push_noise.hpp"
#include "troupe/nn/optimizer.hpp"

using namespace troupe;

namespace {

std::vector<std::size_t> parse_list(const char* s) {
  std::vector<std::size_t> out;
  for (const char* p = s; *p;) {
    out.push_back(std::strtoull(p, const_cast<char**>(&p), 10));
    if (*p == ',') ++p;
  }
  return out;
}

struct shard_slice {
  nn::tensor value;
  nn::dense_slots slots;
  std::vector<float> wire, buf;  // the message's floats, the shard's copy of them
};

// One block of `pushes` pushes; returns microseconds per push.
double block(shard_slice& s, const nn::optimizer& opt, actors::push_noise* noise, std::size_t pushes) {
  const auto t0 = std::chrono::steady_clock::now();
  for (std::size_t k = 0; k < pushes; ++k) {
    const bool est = noise && noise->begin(32);
    s.buf.assign(s.wire.begin(), s.wire.end());  // wire::to_vector
    if (est) noise->tensor("w", s.buf, s.slots);
    nn::apply_dense(opt, s.value, nn::tensor::view(s.buf.data(), s.value.dims()), s.slots);
    if (est) noise->end();
  }
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / pushes;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

void run(std::size_t n, const std::string& type, std::size_t blocks, std::size_t pushes, std::size_t every) {
  nn::optimizer_config oc;
  oc.type = type;
  oc.learning_rate = 1e-3;
  auto opt = nn::make_optimizer(oc);
  if (!opt) throw std::runtime_error(opt.err().to_string());
  shard_slice s;
  s.value = nn::tensor({n});
  s.wire.resize(n);
  std::mt19937_64 rng(1);
  std::normal_distribution<float> z(0.0f, 1e-2f);
  for (auto& x : s.wire) x = z(rng);
  actors::push_noise noise({{"w", n}}, 256, every, oc);
  block(s, **opt, &noise, 2 * every);  // warm: Adam's slots made and past 5 steps
  std::vector<double> off, on;
  for (std::size_t b = 0; b < blocks; ++b) {  // alternating, each first half of the time
    if (b % 2) {
      on.push_back(block(s, **opt, &noise, pushes));
      off.push_back(block(s, **opt, nullptr, pushes));
    } else {
      off.push_back(block(s, **opt, nullptr, pushes));
      on.push_back(block(s, **opt, &noise, pushes));
    }
  }
  const double a = median(off), b = median(on);
  std::printf(
      "{\"bench\": \"push_noise\", \"floats\": %zu, \"optimizer\": \"%s\", \"every\": %zu, \"blocks\": %zu, "
      "\"pushes_per_block\": %zu, \"us_per_push_off\": %.2f, \"us_per_push_on\": %.2f, \"overhead\": %.4f, "
      "\"pairs\": %llu}\n",
      n, type.c_str(), every, blocks, pushes, a, b, b / a - 1.0,
      static_cast<unsigned long long>(noise.report().rounds));
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::size_t> sizes{50240, 235146, 1048576};
  std::size_t blocks = 41, pushes = 64, every = 8;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--sizes")
      sizes = parse_list(argv[i + 1]);
    else if (a == "--blocks")
      blocks = std::strtoull(argv[i + 1], nullptr, 10);
    else if (a == "--pushes")
      pushes = std::strtoull(argv[i + 1], nullptr, 10);
    else if (a == "--every")
      every = std::strtoull(argv[i + 1], nullptr, 10);
    else {
      std::fprintf(stderr, "push_noise_bench: unknown option %s\n", a.c_str());
      return 2;
    }
  }
  for (auto n : sizes)
    for (const char* type : {"adam", "sgd"}) run(n, type, blocks, pushes, every);
  return 0;
}
