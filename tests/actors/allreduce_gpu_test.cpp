// The allreduce strategy's device path (a CUDA backend) on a host fake of device_trainer (no GPU
// needed): two ranks on an
// in-process ring and an in-memory rendezvous. Host-staged sums must give exactly the CPU
// allreduce strategy's replicas (batch-size weighting, optimizer on the averaged gradients), a
// replica that starts different is resynchronised, a failed NCCL set-up falls back to host
// staging, and exhausted ranks finish together. The CPU allreduce strategy's own recovery paths
// (a step interrupted by a dead peer) are tested here too, on the same fixture, as is local_sgd's
// resync (which rank it tells that its replica is overwritten) and its count of averaging rounds.
#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <thread>

#include "gpu_fakes.hpp"
#include "in_process_ring.hpp"
#include "troupe/actors/strategy.hpp"
#include "troupe/collective/ring.hpp"
#include "troupe/model/state.hpp"
#include "worker/backends/cuda_backend.hpp"
#include "worker/replica_checkpoint.hpp"
#include "worker/replica_state.hpp"

namespace troupe::actors {
namespace {

// ---- an in-process ring of N ranks (tests/common/in_process_ring.hpp) ----
using testing::rank_ring;
using testing::shared_ring;

// A ring whose allreduce fails as if the next rank's process died mid-collective. With
// `only_other` (a ring of two), this worker is the whole ring afterwards.
class dying_ring final : public ring_session {
 public:
  explicit dying_ring(bool only_other) : only_other_(only_other) {}
  expected<info> ensure() override { return info{0, alone_ ? 1 : (only_other_ ? 2 : 3), 5, false}; }
  expected<void> allreduce(std::span<float> d) override {
    if (alone_) return {};
    std::fill(d.begin(), d.end(), -1.0f);  // a half-done collective leaves garbage behind
    alone_ = only_other_;
    return make_unexpected(collective::collective_errc::peer_dead, "worker-1's process is gone");
  }
  expected<void> broadcast(std::span<float>, int) override { return {}; }
  void reset() override {}
  bool alone() const override { return alone_; }

 private:
  bool only_other_, alone_ = false;
};

struct no_ps final : ps_client {
  expected<void> pull(trainer_backend&, const nn::batch&) override { return {}; }
  expected<void> push(trainer_backend&, std::size_t) override { return {}; }
};

using fakes::host_grad_ops;
using fakes::memory_port;
using fakes::shared_rendezvous;

// ---- device_trainer on the host: its own model copy, contiguous params/grads ----
class fake_device_trainer final : public gpu::device_trainer {
 public:
  fake_device_trainer(std::unique_ptr<nn::model> m, const nn::train_config& c) : model_(std::move(m)) {
    auto t = nn::trainer::create(*model_, c);
    EXPECT_TRUE(t) << t.err().to_string();
    trainer_ = std::move(*t);
    for (auto* p : trainer_->trainable_parameters()) count_ += p->grad.size();
    grads_.assign(count_, 0.0f);
    params_.assign(count_, 0.0f);
  }
  using gpu::device_trainer::compute_gradients;
  expected<float> compute_gradients(const nn::batch& b, const std::function<void()>& queue_more) override {
    auto l = trainer_->compute_gradients(b);
    if (!l) return l;
    std::size_t at = 0;
    for (auto* p : trainer_->trainable_parameters()) {
      std::memcpy(grads_.data() + at, p->grad.data(), p->grad.size() * sizeof(float));
      at += p->grad.size();
    }
    if (queue_more) queue_more();
    return l;
  }
  float* params() override {
    std::size_t at = 0;
    for (auto* p : trainer_->trainable_parameters()) {
      std::memcpy(params_.data() + at, p->value.data(), p->value.size() * sizeof(float));
      at += p->value.size();
    }
    return params_.data();
  }
  float* grads() override { return grads_.data(); }
  std::size_t dense_count() const override { return count_; }
  void apply_gradients(double lr_scale) override {
    std::size_t at = 0;
    for (auto* p : trainer_->trainable_parameters()) {
      std::memcpy(p->grad.data(), grads_.data() + at, p->grad.size() * sizeof(float));
      at += p->grad.size();
    }
    trainer_->apply_gradients(lr_scale);
  }
  expected<void> download(nn::model& m) override {
    copy_params(*model_, m);
    return {};
  }
  expected<void> upload(const nn::model& m) override {
    copy_params(const_cast<nn::model&>(m), *model_);
    return {};
  }
  // The CPU trainer's per-parameter slots, flattened in parameter order.
  std::size_t slot_count() const override { return count_ * trainer_->get_optimizer().slots_per_element(); }
  expected<void> download_optimizer(std::span<float> slots, std::uint64_t& step) override {
    std::size_t at = 0, per = trainer_->get_optimizer().slots_per_element();
    step = 0;
    const auto& params = trainer_->trainable_parameters();
    for (std::size_t i = 0; i < params.size(); ++i) {
      const auto& st = trainer_->dense_state()[i];
      std::size_t n = params[i]->value.size() * per;
      for (std::size_t k = 0; k < n; ++k)
        slots[at + k] = st.values.size() == n ? st.values[k] : trainer_->get_optimizer().slot_init();
      at += n;
      step = std::max(step, st.step);
    }
    return {};
  }
  expected<void> upload_optimizer(std::span<const float> slots, std::uint64_t step) override {
    std::size_t at = 0, per = trainer_->get_optimizer().slots_per_element();
    const auto& params = trainer_->trainable_parameters();
    for (std::size_t i = 0; i < params.size(); ++i) {
      auto& st = trainer_->dense_state()[i];
      std::size_t n = params[i]->value.size() * per;
      st.values.assign(slots.begin() + static_cast<std::ptrdiff_t>(at),
                       slots.begin() + static_cast<std::ptrdiff_t>(at + n));
      st.step = step;
      at += n;
    }
    return {};
  }
  gpu::cuda_stream stream() const override { return nullptr; }
  expected<void> sync() override { return {}; }
  int device() const override { return 0; }
  static void copy_params(nn::model& from, nn::model& to) {
    auto a = from.parameters();
    auto b = to.parameters();
    for (std::size_t i = 0; i < a.size(); ++i)
      std::copy(a[i]->value.begin(), a[i]->value.end(), b[i]->value.begin());
  }

 private:
  std::unique_ptr<nn::model> model_;
  std::unique_ptr<nn::trainer> trainer_;
  std::size_t count_ = 0;
  std::vector<float> grads_, params_;
};

// ---- the fixture: data, a template model, replicas ----
nn::dataset tiny_data() {
  nn::dataset d;
  d.info = {"tiny", 8, 0, 2, {}, 0};
  d.rows = 128;
  std::mt19937 rng(7);
  std::normal_distribution<float> n(0.0f, 1.0f);
  for (std::size_t i = 0; i < d.rows; ++i) {
    float s = 0;
    for (int k = 0; k < 8; ++k) {
      float v = n(rng);
      d.dense.push_back(v);
      s += v * (k % 2 ? 1.0f : -0.5f);
    }
    d.labels.push_back(s > 0 ? 1.0f : 0.0f);
  }
  return d;
}

struct replica {
  std::unique_ptr<trainer_backend> backend;
  gpu_replica* gpu = nullptr;  // the CUDA backend's
  std::vector<float> staging;
  std::unique_ptr<rank_ring> ring;
  no_ps ps;
  std::unique_ptr<worker_context> ctx;
  std::unique_ptr<strategy> strat;
};

class gpu_sync : public ::testing::Test {
 protected:
  void SetUp() override {
    data_ = tiny_data();
    mc_.type = "mlp";
    mc_.hidden = {16};
    tc_.optimizer.type = "adam";
    tc_.optimizer.learning_rate = 0.01;
  }
  std::unique_ptr<nn::model> build() {
    auto m = nn::model_registry::instance().create(mc_, data_.info);
    EXPECT_TRUE(m) << m.err().to_string();
    return std::move(*m);
  }
  void init(replica& r, shared_ring& ring, int rank) {
    auto b = native_backend::create(build(), tc_);
    ASSERT_TRUE(b) << b.err().to_string();
    r.backend = std::move(*b);
    with_ring(r, ring, rank);
  }
  void with_ring(replica& r, shared_ring& ring, int rank) {
    r.ring = std::make_unique<rank_ring>(ring, rank);
    r.ctx.reset(new worker_context{spec_, self_, *r.backend, r.ps, *r.ring});
  }
  void init_gpu(replica& r, shared_ring& ring, int rank, shared_rendezvous& rv, const std::string& uuid) {
    auto g = std::make_unique<gpu_replica>();
    g->device.uuid = uuid;
    g->host = "host";
    g->self = "worker-" + std::to_string(rank);
    g->trainer = std::make_unique<fake_device_trainer>(build(), tc_);
    g->port = std::make_unique<memory_port>(rv);
    r.staging.assign(g->trainer->dense_count(), 0.0f);
    g->staging = r.staging;
    g->ops = host_grad_ops();
    g->comms = gpu::comm_manager(
        gpu::nccl_options{std::chrono::milliseconds(2000), std::chrono::milliseconds(2000)});
    r.gpu = g.get();
    auto b = cuda_backend::wrap(build(), tc_, std::move(g));
    ASSERT_TRUE(b) << b.err().to_string();
    r.backend = std::move(*b);
    ASSERT_EQ(r.backend->name(), "cuda");
    ASSERT_TRUE(r.backend->from_host(host_copy::parameters));
    with_ring(r, ring, rank);
    auto s = make_strategy("allreduce", spec_);
    ASSERT_TRUE(s);
    r.strat = std::move(*s);
  }
  // Rank r trains batches of `sizes[r]` rows for `steps` steps, then both finish.
  void train(std::vector<replica*> reps, std::vector<std::size_t> sizes, int steps) {
    std::vector<std::thread> threads;
    for (std::size_t r = 0; r < reps.size(); ++r)
      threads.emplace_back([&, r] {
        auto& rep = *reps[r];
        std::size_t first = r * 64;
        for (int s = 0; s < steps;) {
          nn::batch b(data_, first + (s * sizes[r]) % (64 - sizes[r]), sizes[r]);
          auto res = rep.strat->step(*rep.ctx, &b, false);
          ASSERT_NE(res.what, step_result::kind::finished);
          if (res.what == step_result::kind::trained) ++s;
        }
        step_result last;
        for (int i = 0; i < 10 && last.what != step_result::kind::finished; ++i)
          last = rep.strat->step(*rep.ctx, nullptr, true);
        EXPECT_EQ(last.what, step_result::kind::finished) << "rank " << r;
      });
    for (auto& t : threads) t.join();
  }
  std::vector<float> params_of(replica& r) {
    EXPECT_TRUE(r.backend->to_host(host_copy::parameters));
    auto p = r.backend->parameters();
    std::vector<float> v(p.begin(), p.end());
    for (auto b : r.backend->buffers()) v.insert(v.end(), b.begin(), b.end());
    return v;
  }
  // The CPU allreduce strategy on the same batches: the reference.
  std::vector<float> cpu_reference(std::vector<std::size_t> sizes, int steps) {
    shared_ring ring(2);
    replica a, b;
    init(a, ring, 0);
    init(b, ring, 1);
    for (auto* r : {&a, &b}) {
      auto s = make_strategy("allreduce", spec_);
      EXPECT_TRUE(s);
      r->strat = std::move(*s);
    }
    train({&a, &b}, sizes, steps);
    auto pa = params_of(a), pb = params_of(b);
    EXPECT_EQ(pa, pb);
    return pa;
  }
  void expect_close(const std::vector<float>& got, const std::vector<float>& want) {
    ASSERT_EQ(got.size(), want.size());
    for (std::size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], 1e-4f) << "parameter " << i;
  }

  nn::dataset data_;
  nn::model_config mc_;
  nn::train_config tc_;
  job::job_spec spec_;
  node_id self_{"worker-0", 1};
};

TEST_F(gpu_sync, shared_gpu_host_staged_matches_the_cpu_allreduce_strategy) {
  auto want = cpu_reference({8, 5}, 6);
  shared_ring ring(2);
  shared_rendezvous rv;
  replica a, b;
  init_gpu(a, ring, 0, rv, "GPU-same");
  init_gpu(b, ring, 1, rv, "GPU-same");
  train({&a, &b}, {8, 5}, 6);
  auto pa = params_of(a), pb = params_of(b);
  EXPECT_EQ(pa, pb) << "replicas diverged";
  expect_close(pa, want);
  EXPECT_EQ(a.gpu->comms.rebuilds(), 0u) << "no NCCL for a shared GPU";
}

TEST_F(gpu_sync, a_replica_that_starts_different_is_resynchronised_from_the_most_trained) {
  auto want = cpu_reference({8, 8}, 4);
  shared_ring ring(2);
  shared_rendezvous rv;
  replica a, b;
  init_gpu(a, ring, 0, rv, "GPU-same");
  init_gpu(b, ring, 1, rv, "GPU-same");
  // Rank 1's device replica starts from other weights: the fresh ring must overwrite them.
  for (auto& v : b.backend->parameters()) v += 0.5f;
  ASSERT_TRUE(b.backend->from_host(host_copy::parameters));
  train({&a, &b}, {8, 8}, 4);
  expect_close(params_of(b), want);
}

TEST_F(gpu_sync, a_replacement_replica_takes_the_survivors_optimizer_state_and_noise_scale) {
  spec_.nn.train.batch_size = 8;  // full batches: every round an estimate
  spec_.nn.train.noise_scale_every = 1;
  shared_ring ring(2);
  shared_rendezvous rv;
  replica a, b, b2;
  init_gpu(a, ring, 0, rv, "GPU-same");
  init_gpu(b, ring, 1, rv, "GPU-same");
  train({&a, &b}, {8, 8}, 4);
  // b is replaced by a fresh replica (fresh weights, fresh Adam moments); the ring is rebuilt.
  init_gpu(b2, ring, 1, rv, "GPU-same");
  a.ring->reset();
  train({&a, &b2}, {8, 8}, 4);
  std::vector<float> sa(a.gpu->trainer->slot_count()), sb(b2.gpu->trainer->slot_count());
  std::uint64_t step_a = 0, step_b = 0;
  ASSERT_TRUE(a.gpu->trainer->download_optimizer(sa, step_a));
  ASSERT_TRUE(b2.gpu->trainer->download_optimizer(sb, step_b));
  EXPECT_EQ(step_a, step_b);
  EXPECT_EQ(sa, sb) << "optimizer state diverged";
  EXPECT_EQ(params_of(a), params_of(b2)) << "replicas diverged after the replacement";
  // The goodput controller travelled with the resync: the replacement continues the survivor's
  // estimates (8 rounds, not its own 4).
  const auto ga = a.strat->goodput(), gb = b2.strat->goodput();
  ASSERT_TRUE(ga.valid && gb.valid);
  EXPECT_EQ(ga.rounds, 8u);
  EXPECT_EQ(gb.rounds, ga.rounds);
  EXPECT_EQ(gb.grad_sqr, ga.grad_sqr);
  EXPECT_EQ(gb.grad_var, ga.grad_var);
  EXPECT_EQ(gb.ring_rank, 1u);
}

TEST_F(gpu_sync, distinct_gpus_whose_nccl_setup_fails_fall_back_to_host_staged) {
  if (gpu::device_count()) GTEST_SKIP() << "a GPU is present: NCCL set-up would be attempted for real";
  auto want = cpu_reference({8, 5}, 5);
  shared_ring ring(2);
  shared_rendezvous rv;
  replica a, b;
  init_gpu(a, ring, 0, rv, "GPU-a");
  init_gpu(b, ring, 1, rv, "GPU-b");
  train({&a, &b}, {8, 5}, 5);
  auto pa = params_of(a), pb = params_of(b);
  EXPECT_EQ(pa, pb);
  expect_close(pa, want);
}

TEST_F(gpu_sync, cpu_allreduce_survivor_of_a_ring_of_two_finishes_the_interrupted_step_alone) {
  shared_ring solo_ring(1);
  replica want;
  init(want, solo_ring, 0);
  auto s = make_strategy("allreduce", spec_);
  ASSERT_TRUE(s);
  want.strat = std::move(*s);
  nn::batch b(data_, 0, 8);
  ASSERT_EQ(want.strat->step(*want.ctx, &b, false).what, step_result::kind::trained);

  shared_ring unused(1);
  replica got;
  init(got, unused, 0);
  dying_ring ring(true);
  got.ctx.reset(new worker_context{spec_, self_, *got.backend, got.ps, ring});
  s = make_strategy("allreduce", spec_);
  ASSERT_TRUE(s);
  got.strat = std::move(*s);
  auto r = got.strat->step(*got.ctx, &b, false);
  EXPECT_EQ(r.what, step_result::kind::trained);
  EXPECT_EQ(r.samples, 8u);
  EXPECT_FALSE(r.dropped);
  expect_close(params_of(got), params_of(want));
}

TEST_F(gpu_sync, cpu_allreduce_step_interrupted_in_a_larger_ring_is_dropped_untouched) {
  shared_ring unused(1);
  replica got;
  init(got, unused, 0);
  dying_ring ring(false);
  got.ctx.reset(new worker_context{spec_, self_, *got.backend, got.ps, ring});
  auto s = make_strategy("allreduce", spec_);
  ASSERT_TRUE(s);
  got.strat = std::move(*s);
  auto before = params_of(got);
  nn::batch b(data_, 0, 8);
  auto r = got.strat->step(*got.ctx, &b, false);
  EXPECT_EQ(r.what, step_result::kind::retry);
  EXPECT_TRUE(r.dropped);
  EXPECT_EQ(params_of(got), before) << "a dropped step must not change the replica";
}

// A round where one rank of two has no data (the tail of an epoch) is half a full round: the
// replicas step at half the learning rate, as a lone trainer would with apply_gradients(0.5).
TEST_F(gpu_sync, cpu_allreduce_round_with_an_idle_rank_steps_at_its_share_of_the_learning_rate) {
  spec_.nn.train.batch_size = 8;
  shared_ring ring(2), solo(1);
  replica a, b, lone;
  init(a, ring, 0);
  init(b, ring, 1);
  init(lone, solo, 0);
  for (auto* r : {&a, &b}) {
    auto s = make_strategy("allreduce", spec_);
    ASSERT_TRUE(s);
    r->strat = std::move(*s);
  }
  nn::batch rows(data_, 0, 8);
  ASSERT_TRUE(lone.backend->compute_gradients(rows));
  lone.backend->apply_gradients(0.5);
  step_result idle;
  std::thread tb([&] { idle = b.strat->step(*b.ctx, nullptr, false); });
  auto trained = a.strat->step(*a.ctx, &rows, false);
  tb.join();
  ASSERT_EQ(trained.what, step_result::kind::trained);
  ASSERT_EQ(idle.what, step_result::kind::trained);
  auto pa = params_of(a);
  EXPECT_EQ(pa, params_of(b)) << "replicas diverged";
  expect_close(pa, params_of(lone));
}

// The ring's checkpoint as the strategies see it: `params` and the checkpoint's `step`.
struct step_store final : replica_store {
  std::vector<float> params;
  std::uint64_t step = 0;
  std::atomic<int> restores{0};
  expected<std::optional<std::uint64_t>> restore_latest(trainer_backend& b,
                                                        std::vector<float>* strategy_state) override {
    ++restores;
    auto p = b.parameters();
    EXPECT_EQ(p.size(), params.size());
    std::copy(params.begin(), params.end(), p.begin());
    if (auto h = b.from_host(host_copy::parameters); !h) return h.err();
    if (strategy_state) strategy_state->clear();
    return std::optional<std::uint64_t>(step);
  }
};

// The device path's tasks report the ring's step (strategy::checkpointed_step: every replica applies
// every step), and a ring that finds no trained replica starts again from the ring's checkpoint and
// counts on from its step on every rank: the held tasks' rows kept after it are forgotten on every
// rank (worker_context::replicas_restarted), and a rank whose offered batch was cut after them trains
// nothing in that step. Before 2026-12-07 the device path reported step 0: what it trained was kept
// by no hand-back and no killed worker's progress, nor trained again when the whole ring was lost.
TEST_F(gpu_sync, the_device_path_reports_the_rings_steps_and_counts_on_from_a_restored_checkpoint) {
  shared_ring ring(2);
  shared_rendezvous rv;
  replica a, b;
  init_gpu(a, ring, 0, rv, "GPU-same");
  init_gpu(b, ring, 1, rv, "GPU-same");
  EXPECT_EQ(a.strat->checkpointed_step(*a.ctx), 0u);
  train({&a, &b}, {8, 5}, 6);
  EXPECT_EQ(a.strat->checkpointed_step(*a.ctx), 6u);
  EXPECT_EQ(b.strat->checkpointed_step(*b.ctx), 6u);

  // Both die; their replacements find the ring's checkpoint: a's weights at a step past 2^24 (a float
  // holds it inexactly).
  step_store store;
  store.step = 20'000'003;
  ASSERT_TRUE(a.backend->to_host(host_copy::parameters));
  store.params.assign(a.backend->parameters().begin(), a.backend->parameters().end());
  shared_ring ring2(2);
  shared_rendezvous rv2;
  replica c, d;
  init_gpu(c, ring2, 0, rv2, "GPU-same");
  init_gpu(d, ring2, 1, rv2, "GPU-same");
  std::vector<std::uint64_t> told[2];
  for (int i : {0, 1}) {
    auto& r = i == 0 ? c : d;
    r.ctx->store = &store;
    // Rank 1 holds a task whose kept rows the replicas lost.
    r.ctx->replicas_restarted = [&told, i](std::uint64_t step) {
      told[i].push_back(step);
      return i == 1;
    };
  }
  nn::batch rows(data_, 0, 8);
  step_result first_c, first_d, second_d;
  std::thread td([&] {
    first_d = d.strat->step(*d.ctx, &rows, false);
    d.ctx->offered_batch_stale = false;  // the worker offers the task's first batch
    second_d = d.strat->step(*d.ctx, &rows, false);
  });
  first_c = c.strat->step(*c.ctx, &rows, false);
  td.join();
  EXPECT_EQ(store.restores.load(), 1) << "the source restores, once";
  EXPECT_EQ(first_c.what, step_result::kind::trained);
  EXPECT_EQ(first_d.what, step_result::kind::retry) << "rank 1 trained a batch cut after lost rows";
  EXPECT_EQ(second_d.what, step_result::kind::trained);
  EXPECT_EQ(told[0], std::vector<std::uint64_t>{20'000'003});
  EXPECT_EQ(told[1], std::vector<std::uint64_t>{20'000'003});
  EXPECT_EQ(c.strat->checkpointed_step(*c.ctx), 20'000'004u);
  EXPECT_EQ(d.strat->checkpointed_step(*d.ctx), 20'000'004u);
  EXPECT_EQ(params_of(c), params_of(d)) << "replicas diverged";

  // A ring of one restores alone.
  store.restores = 0;
  shared_ring solo(1);
  replica e;
  init_gpu(e, solo, 0, rv2, "GPU-e");
  e.ctx->store = &store;
  ASSERT_EQ(e.strat->step(*e.ctx, &rows, false).what, step_result::kind::trained);
  EXPECT_EQ(store.restores.load(), 1);
  EXPECT_EQ(e.strat->checkpointed_step(*e.ctx), 20'000'004u);
}

// A device path's ring checkpoint as its worker writes it (snapshot: the host mirror downloaded; the
// meta's step the strategy's count, worker_checkpoint.cpp's meta_of) restores with that step, where its
// host trainer's optimizer slots say none (the device's optimizer steps, not the host's). Where
// state.json is lost (it names another version) the slots' count is all there is: 0, and every task
// done is trained again (more than was lost; before 2026-12-07 a device path's ring always said 0).
TEST_F(gpu_sync, a_device_paths_ring_checkpoint_restores_with_the_rings_step) {
  shared_ring ring(1), ring2(1);
  shared_rendezvous rv;
  replica a, b;
  init_gpu(a, ring, 0, rv, "GPU-a");
  train({&a}, {8}, 3);
  auto s = snapshot(*a.backend);
  ASSERT_TRUE(s) << s.err().to_string();
  model::state_meta meta;
  meta.step = a.strat->checkpointed_step(*a.ctx);
  ASSERT_EQ(meta.step, 3u);
  const auto dir =
      (std::filesystem::temp_directory_path() / ("troupe-gpu-ring-checkpoint-" + std::to_string(::getpid())))
          .string();
  std::filesystem::remove_all(dir);
  ASSERT_TRUE(model::write_state(dir, *s, meta));
  std::vector<std::uint64_t> told;
  {
    ring_checkpoints store(dir);
    store.on_restored = [&](std::uint64_t step) { told.push_back(step); };
    init_gpu(b, ring2, 0, rv, "GPU-b");
    auto r = store.restore_latest(*b.backend);
    ASSERT_TRUE(r) << r.err().to_string();
    ASSERT_TRUE(*r);
    EXPECT_EQ(**r, 3u);
    EXPECT_EQ(params_of(b), params_of(a));
    std::ofstream(dir + "/state.json") << R"({"version": 999, "step": 3})"
                                       << "\n";
    r = store.restore_latest(*b.backend);
    ASSERT_TRUE(r && *r);
    EXPECT_EQ(**r, 0u) << "the host trainer's slots took no step";
  }
  EXPECT_EQ(told, (std::vector<std::uint64_t>{3, 0}));
  std::filesystem::remove_all(dir);
}

// The ring's latest checkpoint cannot be read (its data file is gone): the replica restores the
// older version the store keeps, with that version's step (kept in the version itself: state.json
// describes the latest), and tells the worker that step (the master trains again what later steps
// applied). Before 2026-12-07 it started from its initial weights: every task done was trained again.
TEST_F(gpu_sync, a_ring_checkpoint_whose_latest_version_cannot_be_read_restores_the_older_one) {
  shared_ring ring(1), ring2(1);
  replica a, b;
  init(a, ring, 0);
  init(b, ring2, 0);
  const auto dir =
      (std::filesystem::temp_directory_path() / ("troupe-ring-older-" + std::to_string(::getpid()))).string();
  std::filesystem::remove_all(dir);
  auto write = [&](std::uint64_t step) {
    auto s = snapshot(*a.backend);
    ASSERT_TRUE(s) << s.err().to_string();
    model::state_meta meta;
    meta.step = step;
    meta.data_epoch = static_cast<std::uint32_t>(step / 5);
    meta.writer = "worker-0#0";
    model::keep_meta_in(*s, meta);
    ASSERT_TRUE(model::write_state(dir, *s, meta));
  };
  write(5);
  const auto older = params_of(a);
  for (auto& p : a.backend->parameters()) p += 1.0f;
  write(9);
  std::string latest;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.path().extension() == ".ckpt" && e.path().string() > latest) latest = e.path().string();
  ASSERT_FALSE(latest.empty());
  std::filesystem::remove(latest);
  std::vector<std::uint64_t> told;
  {
    ring_checkpoints store(dir);
    store.on_restored = [&](std::uint64_t step) { told.push_back(step); };
    auto r = store.restore_latest(*b.backend);
    ASSERT_TRUE(r) << r.err().to_string();
    ASSERT_TRUE(*r);
    EXPECT_EQ(**r, 5u);
  }
  EXPECT_EQ(told, std::vector<std::uint64_t>{5});
  EXPECT_EQ(params_of(b), older);
  // Export and --resume read it too, with its own step and epoch (state.json describes version 2).
  auto read = model::read_state_or_older(dir);
  ASSERT_TRUE(read && *read);
  EXPECT_FALSE((*read)->meta.described);
  EXPECT_EQ(model::held_steps(**read), 5u);
  EXPECT_EQ((*read)->meta.data_epoch, std::optional<std::uint32_t>(1));
  std::filesystem::remove_all(dir);
}

// A ring checkpoint that cannot be restored (here another model's: its first layer fits, its second
// does not) leaves the replica as it was, every tensor checked before any is written (the first
// layer was written before 2026-12-07), and tells the worker the ring starts from its initial
// weights (step 0: the master trains every task done again; it was told nothing, and they stayed
// done with their rows in no model).
TEST_F(gpu_sync, a_ring_checkpoint_that_cannot_be_restored_leaves_the_replica_and_says_step_0) {
  shared_ring ring(1);
  replica other, mine;
  mc_.hidden = {16, 4};
  init(other, ring, 0);
  for (auto& v : other.backend->parameters()) v = 0.25f;
  auto s = snapshot(*other.backend);
  ASSERT_TRUE(s) << s.err().to_string();
  const auto dir =
      (std::filesystem::temp_directory_path() / ("troupe-bad-ring-checkpoint-" + std::to_string(::getpid())))
          .string();
  std::filesystem::remove_all(dir);
  model::state_meta meta;
  meta.step = 40;
  ASSERT_TRUE(model::write_state(dir, *s, meta));
  mc_.hidden = {16, 8};
  init(mine, ring, 0);
  const auto before = params_of(mine);
  std::vector<std::uint64_t> told;
  {
    ring_checkpoints store(dir);
    store.on_restored = [&](std::uint64_t step) { told.push_back(step); };
    auto r = store.restore_latest(*mine.backend);
    ASSERT_FALSE(r);
    EXPECT_NE(r.err().to_string().find("values in the state"), std::string::npos) << r.err().to_string();
  }
  EXPECT_EQ(params_of(mine), before) << "the replica was half restored";
  EXPECT_EQ(told, std::vector<std::uint64_t>{0});
  std::filesystem::remove_all(dir);
}

TEST_F(gpu_sync, a_single_rank_trains_without_any_collective) {
  shared_ring ring(1);
  shared_rendezvous rv;
  replica a;
  init_gpu(a, ring, 0, rv, "GPU-a");
  auto before = params_of(a);
  train({&a}, {8}, 3);
  EXPECT_NE(params_of(a), before);
  EXPECT_EQ(rv.store.epochs_kept(), 0u) << "a ring of one needs no rendezvous";
}

// local_sgd's resync. A first ring of untrained replicas copies rank 0's (the ring's checkpoint
// would be restored there) and tells the other rank its replica is overwritten, never the source.
// Every averaging round counts in rounds_settled on every rank (the worker reports its held tasks
// then). A later ring averages the replicas of the latest round, weighted by their samples since
// (before 2026-12-07 it copied the most trained one over the others, whose rows since were lost),
// counts that as a round for them, and offers their batch again (it is not in the average). A rank
// behind (here a joiner that trained alone) is told its replica is overwritten; so told, its stale
// batch is not trained, and it holds the group's replica.
TEST_F(gpu_sync, local_sgd_resync_averages_the_latest_rounds_replicas_and_overwrites_the_others) {
  spec_.job.sync_every = 3;
  shared_ring ring(2);
  replica a, b, c;
  init(a, ring, 0);
  init(b, ring, 1);
  std::array<int, 3> told{0, 0, 0};
  std::array<bool, 3> stale{false, false, false};
  auto tell = [&](replica& r, int i) {
    r.ctx->replica_overwritten = [&told, &stale, i] {
      ++told[static_cast<std::size_t>(i)];
      return stale[static_cast<std::size_t>(i)];
    };
  };
  for (int i = 0; i < 2; ++i) {
    replica& r = i == 0 ? a : b;
    auto s = make_strategy("local_sgd", spec_);
    ASSERT_TRUE(s) << s.err().to_string();
    r.strat = std::move(*s);
    ASSERT_TRUE(r.strat->rows_settle_in_rounds());
    tell(r, i);
  }
  auto steps = [&](replica& r, std::size_t first, int n, std::vector<step_result>& out) {
    for (int s = 0; s < n; ++s) {
      nn::batch batch(data_, first + static_cast<std::size_t>(s) * 8, 8);
      out.push_back(r.strat->step(*r.ctx, &batch, false));
    }
  };
  auto together = [&](replica& x, std::size_t fx, int nx, std::vector<step_result>& ox, replica& y,
                      std::size_t fy, int ny, std::vector<step_result>& oy) {
    std::thread t0([&] { steps(x, fx, nx, ox); });
    std::thread t1([&] { steps(y, fy, ny, oy); });
    t0.join();
    t1.join();
  };
  // A first ring of two untrained replicas (rank 0 the source), 3 steps each: the third averages.
  std::vector<step_result> ra, rb, rc;
  together(a, 0, 3, ra, b, 64, 3, rb);
  for (const auto& r : ra) EXPECT_EQ(r.what, step_result::kind::trained);
  for (const auto& r : rb) EXPECT_EQ(r.what, step_result::kind::trained);
  EXPECT_EQ(told, (std::array<int, 3>{0, 1, 0}));
  EXPECT_EQ(a.ctx->rounds_settled, 1u);
  EXPECT_EQ(b.ctx->rounds_settled, 1u);
  // The ring's round, 1 for the initial weights: what a task's report and a checkpoint name.
  EXPECT_EQ(a.strat->checkpointed_step(*a.ctx), 2u);
  EXPECT_EQ(b.strat->checkpointed_step(*b.ctx), 2u);
  EXPECT_EQ(a.strat->durable_state(), (std::vector<float>{2.0f, 0.0f}));
  EXPECT_EQ(params_of(a), params_of(b)) << "averaged";
  // Local steps, no round (8 and 16 samples). A new ring: both replicas are of round 2, averaged.
  steps(a, 24, 1, ra);
  steps(b, 88, 2, rb);
  const auto pa = params_of(a), pb = params_of(b);
  a.ring->reset();
  b.ring->reset();
  stale = {true, true, true};
  ra.clear();
  rb.clear();
  together(a, 32, 1, ra, b, 96, 1, rb);
  EXPECT_EQ(told, (std::array<int, 3>{0, 1, 0})) << "no replica of the latest round is overwritten";
  ASSERT_EQ(ra.size(), 1u);
  EXPECT_EQ(ra[0].what, step_result::kind::retry) << "a batch trained after the averaged rows";
  EXPECT_EQ(rb[0].what, step_result::kind::retry);
  EXPECT_TRUE(a.ctx->offered_batch_stale);
  EXPECT_EQ(a.ctx->rounds_settled, 2u);
  EXPECT_EQ(b.ctx->rounds_settled, 2u);
  EXPECT_EQ(a.strat->checkpointed_step(*a.ctx), 3u);
  const auto avg = params_of(a);
  EXPECT_EQ(avg, params_of(b));
  ASSERT_EQ(avg.size(), pa.size());
  for (std::size_t i = 0; i < avg.size(); ++i)
    ASSERT_NEAR(avg[i], (8 * pa[i] + 16 * pb[i]) / 24, 1e-5) << "parameter " << i;
  // A joiner that trained 2 steps alone (its ring of one, round 1) and rank 0 of round 3: the joiner
  // is overwritten, its stale batch not trained; rank 0's replica goes to it.
  shared_ring solo(1), ring2(2);
  init(c, solo, 0);
  auto s = make_strategy("local_sgd", spec_);
  ASSERT_TRUE(s) << s.err().to_string();
  c.strat = std::move(*s);
  steps(c, 104, 2, rc);
  with_ring(a, ring2, 0);
  with_ring(c, ring2, 1);
  tell(a, 0);
  tell(c, 2);
  const auto source = params_of(a);
  ra.clear();
  rc.clear();
  together(a, 40, 1, ra, c, 48, 1, rc);
  EXPECT_EQ(told, (std::array<int, 3>{0, 1, 1})) << "the joiner overwritten, rank 0 the source";
  ASSERT_EQ(rc.size(), 1u);
  EXPECT_EQ(rc[0].what, step_result::kind::retry) << "the stale batch was trained";
  EXPECT_TRUE(c.ctx->offered_batch_stale);
  EXPECT_EQ(c.ctx->rounds_settled, 0u);
  EXPECT_EQ(a.ctx->rounds_settled, 1u) << "its new context: the resync settles its rows (none since)";
  EXPECT_EQ(params_of(c), source);
  EXPECT_EQ(c.strat->checkpointed_step(*c.ctx), 4u);
}

}  // namespace
}  // namespace troupe::actors
