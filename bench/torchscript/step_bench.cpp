// Per-step cost of trainer backends, in one process, interleaved: each job file's [model] on its
// [data] (the replica make_host_backend builds, as a worker's or `troupe train --local`'s), steps
// over shuffled batches of [train] batch_size, rounds alternating between the files. Prints one
// JSON line per file: microseconds per step (compute_gradients, apply_gradients, both; and the
// thread's CPU time per step, which a busy machine's preemptions do not inflate), median and min
// over the rounds. Under callgrind (--collect-atstart=no) only the recorded rounds' steps are
// collected. With --profile, libtorch's profiler over one more round of each file, its
// table by operator on stderr (the TorchScript backend's steps; native files show nothing).
//
//   torchscript_step_bench [--steps N] [--rounds R] [--warmup W] [--no-apply] [--profile] A.toml [B.toml...]
#include <torch/csrc/autograd/profiler_legacy.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#if __has_include(<valgrind/callgrind.h>)
#include <valgrind/callgrind.h>
#else
#define CALLGRIND_TOGGLE_COLLECT
#endif

#include "troupe/actors/backends.hpp"
#include "troupe/job/job_file.hpp"
#include "troupe/job/job_spec.hpp"
#include "troupe/nn/config.hpp"

namespace {

using namespace troupe;
using clock_type = std::chrono::steady_clock;

struct options {
  std::size_t steps = 200, rounds = 7, warmup = 50;
  bool apply = true, profile = false;
  std::vector<std::string> files;
};

struct subject {
  std::string file;
  job::job_spec spec;
  nn::train_test data;
  std::unique_ptr<actors::trainer_backend> backend;
  std::vector<std::uint32_t> order;
  std::size_t next = 0;  // the next batch's first position in order
  std::vector<double> compute_us, apply_us, step_us, cpu_us;
};

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "torchscript_step_bench: %s\n", what.c_str());
  std::exit(2);
}

subject load(const std::string& file) {
  auto doc = job::read_job_file(file);
  if (!doc) die(doc.err().to_string());
  auto spec = job::job_spec::read(*doc);
  if (!spec) die(spec.err().to_string());
  auto data = nn::load_data(spec->nn.data);
  if (!data) die(data.err().to_string());
  subject s{file, std::move(*spec), std::move(*data), nullptr, {}, 0, {}, {}, {}, {}};
  auto b = actors::make_host_backend(s.spec, s.data.train.info);
  if (!b) die(b.err().to_string());
  s.backend = std::move(*b);
  s.order.resize(s.data.train.rows);
  std::iota(s.order.begin(), s.order.end(), 0u);
  std::shuffle(s.order.begin(), s.order.end(), std::mt19937(1));
  return s;
}

// This thread's CPU time: what a step costs whatever else the machine runs (a busy machine
// preempts the bench, which wall-clock time counts and this does not).
double thread_cpu_us() {
  timespec t{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) * 1e6 + static_cast<double>(t.tv_nsec) / 1e3;
}

double us_since(clock_type::time_point t) {
  return std::chrono::duration<double, std::micro>(clock_type::now() - t).count();
}

// `n` steps of `s`; the round's mean microseconds per step of each half into the subject.
void run_round(subject& s, std::size_t n, bool apply, bool record) {
  const std::size_t bs = s.spec.nn.train.batch_size;
  double compute = 0, update = 0;
  // Under `valgrind --tool=callgrind --collect-atstart=no`, only the recorded rounds count.
  if (record) CALLGRIND_TOGGLE_COLLECT;
  const double cpu0 = thread_cpu_us();
  for (std::size_t i = 0; i < n; ++i) {
    if (s.next + bs > s.order.size()) s.next = 0;
    nn::batch b(s.data.train, std::span<const std::uint32_t>(s.order.data() + s.next, bs));
    s.next += bs;
    auto t0 = clock_type::now();
    if (auto l = s.backend->compute_gradients(b); !l) die(l.err().to_string());
    compute += us_since(t0);
    if (!apply) continue;
    auto t1 = clock_type::now();
    s.backend->apply_gradients();
    update += us_since(t1);
  }
  if (!record) return;
  CALLGRIND_TOGGLE_COLLECT;
  s.cpu_us.push_back((thread_cpu_us() - cpu0) / n);
  s.compute_us.push_back(compute / n);
  s.apply_us.push_back(update / n);
  s.step_us.push_back((compute + update) / n);
}

nlohmann::json summary(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return {{"median", v[v.size() / 2]}, {"min", v.front()}, {"max", v.back()}};
}

void report(const subject& s, const options& o) {
  const auto bs = static_cast<double>(s.spec.nn.train.batch_size);
  auto steps = s.step_us;
  std::sort(steps.begin(), steps.end());
  nlohmann::json j{{"bench", "torchscript_step"},
                   {"file", s.file},
                   {"model", s.spec.nn.model.type},
                   {"backend", s.backend->name()},
                   {"batch", s.spec.nn.train.batch_size},
                   {"threads", s.spec.nn.train.threads},
                   {"steps_per_round", o.steps},
                   {"rounds", o.rounds},
                   {"us_per_step", summary(s.step_us)},
                   {"compute_us", summary(s.compute_us)},
                   {"apply_us", summary(s.apply_us)},
                   {"cpu_us_per_step", summary(s.cpu_us)},
                   {"samples_per_s_median", bs * 1e6 / steps[steps.size() / 2]}};
  std::printf("%s\n", j.dump().c_str());
}

// libtorch's events of one round: per operator name, calls and self / total microseconds (a
// range's self time excludes the ranges nested in it), largest self time first, on stderr.
void print_profile(const torch::autograd::profiler::thread_event_lists& lists, std::size_t steps) {
  struct row {
    std::size_t calls = 0;
    double self = 0, total = 0;
  };
  std::map<std::string, row> rows;
  for (const auto& events : lists) {
    struct open_range {
      const torch::autograd::profiler::LegacyEvent* e;
      double children;
    };
    std::vector<open_range> stack;
    for (const auto& e : events) {
      using kind = torch::autograd::profiler::EventKind;
      if (e.kind() == kind::PushRange) stack.push_back({&e, 0});
      if (e.kind() != kind::PopRange || stack.empty()) continue;
      auto open = stack.back();
      stack.pop_back();
      const double total = open.e->cpuElapsedUs(e);
      auto& r = rows[open.e->name()];
      ++r.calls;
      r.total += total;
      r.self += total - open.children;
      if (!stack.empty()) stack.back().children += total;
    }
  }
  std::vector<std::pair<std::string, row>> sorted(rows.begin(), rows.end());
  std::sort(sorted.begin(), sorted.end(), [](auto& a, auto& b) { return a.second.self > b.second.self; });
  double all = 0;
  for (auto& [n, r] : sorted) all += r.self;
  std::fprintf(stderr, "%-60s %8s %12s %12s %7s\n", "operator", "calls", "self us/step", "total us/step",
               "self %");
  for (auto& [n, r] : sorted)
    std::fprintf(stderr, "%-60.60s %8.1f %12.2f %12.2f %6.1f%%\n", n.c_str(), double(r.calls) / steps,
                 r.self / steps, r.total / steps, 100 * r.self / all);
  std::fprintf(stderr, "%-60s %8s %12.2f\n", "all", "", all / steps);
}

void profile(subject& s, const options& o) {
  namespace prof = torch::autograd::profiler;
  prof::enableProfilerLegacy(
      torch::profiler::impl::ProfilerConfig(torch::profiler::impl::ProfilerState::CPU));
  run_round(s, o.steps, o.apply, false);
  auto lists = prof::disableProfilerLegacy();
  std::fprintf(stderr, "== %s (%s backend), %zu steps, per step:\n", s.file.c_str(),
               std::string(s.backend->name()).c_str(), o.steps);
  print_profile(lists, o.steps);
}

options parse(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::size_t {
      if (i + 1 >= argc) die(a + " needs a value");
      return std::stoul(argv[++i]);
    };
    if (a == "--steps")
      o.steps = value();
    else if (a == "--rounds")
      o.rounds = value();
    else if (a == "--warmup")
      o.warmup = value();
    else if (a == "--no-apply")
      o.apply = false;
    else if (a == "--profile")
      o.profile = true;
    else
      o.files.push_back(a);
  }
  if (o.files.empty() || o.steps == 0 || o.rounds == 0)
    die("usage: [--steps N] [--rounds R] [--warmup W] [--no-apply] [--profile] JOB.toml...");
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  auto o = parse(argc, argv);
  std::vector<subject> subjects;
  for (const auto& f : o.files) subjects.push_back(load(f));
  for (auto& s : subjects) run_round(s, o.warmup, o.apply, false);
  for (std::size_t r = 0; r < o.rounds; ++r)
    for (auto& s : subjects) run_round(s, o.steps, o.apply, true);
  for (const auto& s : subjects) report(s, o);
  if (o.profile)
    for (auto& s : subjects) profile(s, o);
  return 0;
}
