// What the gradient noise scale costs the allreduce strategy (issue #48, docs/goodput.md): the same
// job's steps with [train] noise_scale = true and false, interleaved in blocks in one run (so both
// see the same load), on the examples' models over Fashion-MNIST, on an in-process ring of R ranks
// (threads; the sums are the strategy's own code, the ring a shared buffer). Prints one JSON line
// per (model, ranks): the median step time (wall and rank 0's CPU) of each and the overhead.
//
// Each configuration is measured twice, with the first and then the second of the two replicas
// estimating, and the overhead is the mean of the two (both layouts' figures are in the line). With
// identical work (--aa) the replica made and stepped first still reads faster at 1 rank on the
// 2-core machine (-1.6% mean of 10 runs, sd 0.8; the first layout -3%, the second ~0%): a bias of
// placement the swap only halves. Compare a figure with the --aa run of the same session. The bench
// flushes denormals, as the troupe binary does (core/float_env.hpp): without, the step time doubles
// from ~1,300 steps on (Adam on Fashion-MNIST) and the later blocks dominate any difference.
//
// --every N: [train] noise_scale_every (the norms on 1 step in N; default the job file's default, 8):
// blocks of a multiple of N steps measure it evenly.
//
// --device gpu: the strategy's device path (allreduce_gpu.cpp) on GPU 0, each rank a CUDA backend of
// its own (gpu::device_trainer, its own stream); more than one rank shares the GPU, so the gradients
// are host-staged over the in-process ring (one GPU cannot hold two NCCL ranks). The mlp256 model
// (examples/fashion_mnist_gpu.toml's: 784-256-128-10, Adam) at each of --batches (default 512,64); a
// block ends with the device synced, so queued optimizer steps are counted. Without a GPU it prints
// one JSON line with the reason and exits 0.
//
//   noise_scale_bench [--ranks 1,2,4] [--blocks 40] [--steps 24] [--models mlp64,mlp256,cnn]
//                     [--every N] [--aa]
//   noise_scale_bench --device gpu [--ranks 1,2] [--batches 512,64] [--blocks 30] [--steps 24]
//                     [--every N] [--aa]
//
// --aa (last): neither replica estimates, an A/A run: what the bench reads as overhead when there is
// none.
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <time.h>

#include "gpu_fakes.hpp"
#include "in_process_ring.hpp"
#include "troupe/actors/backends.hpp"
#include "troupe/actors/strategy.hpp"
#include "troupe/gpu/trainer.hpp"
#include "troupe/nn/blas.hpp"
#include "troupe/nn/data/readers.hpp"
#include "troupe/nn/model.hpp"
#include "worker/backends/cuda_backend.hpp"

using namespace troupe;
using namespace troupe::actors;

namespace {

using troupe::testing::rank_ring;
using troupe::testing::shared_ring;

struct no_ps final : ps_client {
  expected<void> pull(trainer_backend&, const nn::batch&) override { return {}; }
  expected<void> push(trainer_backend&, std::size_t) override { return {}; }
};

std::size_t every = nn::train_config{}.noise_scale_every;
bool both_off = false;  // --aa: neither replica estimates (the bench's own bias: an A/A run)

job::job_spec spec_for(const std::string& model, bool noise, int ranks, std::size_t batch = 64) {
  job::job_spec s;
  s.job.strategy = "allreduce";
  s.job.workers = static_cast<std::uint32_t>(ranks);
  s.nn.train.batch_size = batch;
  s.nn.train.optimizer.type = "adam";
  s.nn.train.optimizer.learning_rate = 0.001;
  s.nn.train.noise_scale = noise;
  s.nn.train.noise_scale_every = every;
  auto& m = s.nn.model;
  if (model == "mlp64") {
    m.type = "mlp";
    m.hidden = {64};
  } else if (model == "mlp256") {
    m.type = "mlp";
    m.hidden = {256, 128};
  } else {
    m.type = "cnn";
    m.filters = {32, 64};
  }
  return s;
}

// This thread's CPU seconds: on a machine shared with other work the wall time of a step swings
// with the load, the CPU it takes much less (a rank waiting for the ring's sum takes none).
double thread_cpu_s() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// One replica of a rank: its job, backend, strategy and context (two per rank: one estimating).
struct replica {
  job::job_spec spec;
  std::unique_ptr<trainer_backend> be;
  std::unique_ptr<strategy> strat;
  std::unique_ptr<worker_context> ctx;
};

// Rank 0's median seconds per step (wall and CPU) with the estimate on and off, in one layout.
struct medians {
  double on = 0, off = 0, cpu_on = 0, cpu_off = 0;
  std::size_t blocks = 0;
};

double pct(double on, double off) {
  return off > 0 ? 100.0 * (on - off) / off : 0.0;
}

// Per block, the mean wall and CPU seconds per step of rank 0 with the estimate on (replica `est`)
// and off (the other).
medians run_layout(const std::string& model, int ranks, int blocks, int steps, const nn::dataset& data,
                   int est) {
  shared_ring ring(ranks);
  std::vector<double> on, off, cpu_on, cpu_off;
  std::vector<std::thread> threads;
  std::mutex mu;
  for (int r = 0; r < ranks; ++r)
    threads.emplace_back([&, r] {
      // Two replicas per rank: one estimating, one not, stepped in alternate blocks.
      no_ps ps;
      rank_ring rr(ring, r, 1);
      node_id self{"worker-" + std::to_string(r), 0};
      replica reps[2];
      for (int k = 0; k < 2; ++k) {
        reps[k].spec = spec_for(model, k == est && !both_off, ranks);
        auto be = make_host_backend(reps[k].spec, data.info);
        if (!be) {
          std::fprintf(stderr, "%s\n", be.err().to_string().c_str());
          std::exit(1);
        }
        reps[k].be = std::move(*be);
        auto strat = make_strategy("allreduce", reps[k].spec);
        reps[k].strat = std::move(*strat);
        reps[k].ctx.reset(new worker_context{reps[k].spec, self, *reps[k].be, ps, rr});
      }
      std::size_t at = static_cast<std::size_t>(r) * 64 * 97;
      for (int blk = 0; blk < 2 * blocks; ++blk) {
        auto& rep = reps[blk % 2];
        auto t0 = std::chrono::steady_clock::now();
        const double c0 = thread_cpu_s();
        for (int i = 0; i < steps; ++i) {
          at = (at + 64) % (data.rows - 64);
          nn::batch b(data, at, 64);
          rep.strat->step(*rep.ctx, &b, false);
        }
        double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / steps;
        double c = (thread_cpu_s() - c0) / steps;
        if (r == 0 && blk >= 2) {  // the first block of each warms up
          std::lock_guard lk(mu);
          const bool estimating = blk % 2 == est;
          (estimating ? on : off).push_back(s);
          (estimating ? cpu_on : cpu_off).push_back(c);
        }
      }
    });
  for (auto& t : threads) t.join();
  return {median(on), median(off), median(cpu_on), median(cpu_off), on.size()};
}

void run(const std::string& model, int ranks, int blocks, int steps, const nn::dataset& data) {
  const medians l[2] = {run_layout(model, ranks, blocks, steps, data, 0),
                        run_layout(model, ranks, blocks, steps, data, 1)};
  const double w[2] = {pct(l[0].on, l[0].off), pct(l[1].on, l[1].off)};
  const double c[2] = {pct(l[0].cpu_on, l[0].cpu_off), pct(l[1].cpu_on, l[1].cpu_off)};
  std::printf(
      "{\"bench\": \"noise_scale_overhead\", \"model\": \"%s\", \"ranks\": %d, \"batch\": 64, \"optimizer\": "
      "\"adam\", \"noise_scale_every\": %zu, \"blocks\": %zu, \"steps_per_block\": %d, \"step_ms_on\": %.4f, "
      "\"step_ms_off\": %.4f, \"overhead_pct\": %.2f, \"cpu_ms_on\": %.4f, \"cpu_ms_off\": %.4f, "
      "\"cpu_overhead_pct\": %.2f, \"layouts_overhead_pct\": [%.2f, %.2f], \"layouts_cpu_overhead_pct\": "
      "[%.2f, %.2f]}\n",
      model.c_str(), ranks, every, l[0].blocks + l[1].blocks, steps, (l[0].on + l[1].on) * 500,
      (l[0].off + l[1].off) * 500, (w[0] + w[1]) / 2, (l[0].cpu_on + l[1].cpu_on) * 500,
      (l[0].cpu_off + l[1].cpu_off) * 500, (c[0] + c[1]) / 2, w[0], w[1], c[0], c[1]);
  std::fflush(stdout);
}

// ---- --device gpu ----

// Rank `rank`'s CUDA backend on GPU 0: what make_cuda_backend builds in a worker, with the in-memory
// rendezvous of the tests (every rank posts the same GPU: host-staged sums).
std::unique_ptr<trainer_backend> gpu_backend(const job::job_spec& spec, const nn::dataset_info& info,
                                             int rank, fakes::shared_rendezvous& rv) {
  auto fail = [](const error& e) {
    std::fprintf(stderr, "noise_scale_bench: %s\n", e.to_string().c_str());
    std::exit(1);
  };
  auto host = nn::model_registry::instance().create(spec.nn.model, info);
  if (!host) fail(host.err());
  auto g = std::make_unique<gpu_replica>();
  if (auto s = gpu::set_device(0); !s) fail(s.err());
  auto d = gpu::describe(0);
  if (!d) fail(d.err());
  g->device = std::move(*d);
  g->host = "localhost";
  g->self = "worker-" + std::to_string(rank);
  auto t = gpu::device_trainer::create(0, **host, spec.nn.train);
  if (!t) fail(t.err());
  g->trainer = std::move(*t);
  auto pinned = gpu::pinned_buffer<float>::alloc(g->trainer->dense_count());
  if (!pinned) fail(pinned.err());
  g->pinned = std::move(*pinned);
  g->staging = g->pinned.span();
  g->port = std::make_unique<fakes::memory_port>(rv);
  auto b = cuda_backend::wrap(std::move(*host), spec.nn.train, std::move(g));
  if (!b) fail(b.err());
  return std::move(*b);
}

// As run_layout(), on the device: rank 0's median wall time per step with the estimate on and off.
medians run_gpu_layout(int ranks, std::size_t batch, int blocks, int steps, const nn::dataset& data,
                       int est) {
  shared_ring ring(ranks);
  fakes::shared_rendezvous rv[2];  // one per replica set: their ring epochs would collide
  std::vector<double> on, off;
  std::mutex mu;
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r)
    threads.emplace_back([&, r] {
      no_ps ps;
      rank_ring rr[2] = {rank_ring(ring, r, 1), rank_ring(ring, r, 1)};
      node_id self{"worker-" + std::to_string(r), 0};
      replica reps[2];
      for (int k = 0; k < 2; ++k) {
        reps[k].spec = spec_for("mlp256", k == est && !both_off, ranks, batch);
        reps[k].be = gpu_backend(reps[k].spec, data.info, r, rv[k]);
        auto strat = make_strategy("allreduce", reps[k].spec);
        reps[k].strat = std::move(*strat);
        reps[k].ctx.reset(new worker_context{reps[k].spec, self, *reps[k].be, ps, rr[k]});
      }
      std::size_t at = static_cast<std::size_t>(r) * batch * 97 % (data.rows - batch);
      for (int blk = 0; blk < 2 * blocks; ++blk) {
        auto& rep = reps[blk % 2];
        auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < steps; ++i) {
          at = (at + batch) % (data.rows - batch);
          nn::batch b(data, at, batch);
          rep.strat->step(*rep.ctx, &b, false);
        }
        (void)rep.be->device()->trainer->sync();
        double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / steps;
        if (r == 0 && blk >= 2) {
          std::lock_guard lk(mu);
          (blk % 2 == est ? on : off).push_back(s);
        }
      }
    });
  for (auto& t : threads) t.join();
  return {median(on), median(off), 0, 0, on.size()};
}

void run_gpu(int ranks, std::size_t batch, int blocks, int steps, const nn::dataset& data) {
  const medians l[2] = {run_gpu_layout(ranks, batch, blocks, steps, data, 0),
                        run_gpu_layout(ranks, batch, blocks, steps, data, 1)};
  const double w[2] = {pct(l[0].on, l[0].off), pct(l[1].on, l[1].off)};
  std::printf(
      "{\"bench\": \"noise_scale_overhead_gpu\", \"model\": \"mlp256\", \"ranks\": %d, \"sync\": \"%s\", "
      "\"batch\": %zu, \"optimizer\": \"adam\", \"noise_scale_every\": %zu, \"blocks\": %zu, "
      "\"steps_per_block\": %d, \"step_ms_on\": %.4f, \"step_ms_off\": %.4f, \"overhead_pct\": %.2f, "
      "\"layouts_overhead_pct\": [%.2f, %.2f]}\n",
      ranks, ranks == 1 ? "none" : "host-staged", batch, every, l[0].blocks + l[1].blocks, steps,
      (l[0].on + l[1].on) * 500, (l[0].off + l[1].off) * 500, (w[0] + w[1]) / 2, w[0], w[1]);
  std::fflush(stdout);
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::size_t from = 0;
  while (from <= s.size()) {
    auto to = s.find(',', from);
    if (to == std::string::npos) to = s.size();
    if (to > from) out.push_back(s.substr(from, to - from));
    from = to + 1;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  nn::flush_denormals_unless_kept_everywhere();  // as the troupe binary does; the ranks' threads inherit it
  std::string ranks = "1,2,4", models = "mlp64,mlp256,cnn", device = "cpu", batches = "512,64";
  int blocks = 40, steps = 24;
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], "--aa") == 0) both_off = true;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i];
    if (k == "--device") device = argv[i + 1];
    if (k == "--batches") batches = argv[i + 1];
    if (k == "--ranks") ranks = argv[i + 1];
    if (k == "--models") models = argv[i + 1];
    if (k == "--blocks") blocks = std::stoi(argv[i + 1]);
    if (k == "--steps") steps = std::stoi(argv[i + 1]);
    if (k == "--every") every = static_cast<std::size_t>(std::stoul(argv[i + 1]));
  }
  if (device == "gpu") {
    if (auto n = gpu::device_count(); !n) {
      std::printf("{\"bench\": \"noise_scale_overhead_gpu\", \"skipped\": \"%s\"}\n",
                  n.err().to_string().c_str());
      return 0;
    }
  }
  auto data = nn::read_fashion_mnist(nn::fashion_mnist_default_dir, "train", 20000);
  if (!data) {
    std::fprintf(stderr, "%s\n", data.err().to_string().c_str());
    return 1;
  }
  if (device == "gpu") {
    for (const auto& b : split(batches))
      for (const auto& r : split(ranks)) run_gpu(std::stoi(r), std::stoul(b), blocks, steps, *data);
    return 0;
  }
  for (const auto& m : split(models))
    for (const auto& r : split(ranks)) run(m, std::stoi(r), blocks, steps, *data);
  return 0;
}
