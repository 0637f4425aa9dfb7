// `troupe serve-replica`: one model replica. It dials the front end, loads and warms up the model
// through the TorchScript plugin (the only troupe process of a server that loads libtorch), says
// ReplicaReady, then answers InferBatch frames one at a time on a compute thread of its own, so the
// endpoint's io thread keeps the heartbeats going during a long forward. It exits when the front
// end goes away (its connection closes: nothing is left to serve) or on SIGTERM/SIGINT.
#include <sched.h>
#include <semaphore.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>

#include "troupe/cluster/start_failure.hpp"
#include "troupe/core/clock.hpp"
#include "troupe/model/model_dir.hpp"
#include "troupe/model/predictor.hpp"
#include "troupe/serve/serve.hpp"
#include "troupe/transport/endpoint.hpp"
#include "troupe/transport/message.hpp"

namespace troupe::serve {

namespace {

// Set by SIGTERM/SIGINT. A handler rather than a blocked mask and sigwait: libtorch's and OpenMP's
// threads start with masks of their own, and a signal delivered to one of them would end the
// process without the clean stop.
volatile std::sig_atomic_t stop_signal = 0;
// Posted by the handler (sem_post is async-signal-safe) and by replica::stop(): what the signal
// watcher waits on. Never destroyed: a signal may come while the process ends.
sem_t stop_wake;
extern "C" void on_stop_signal(int sig) {
  stop_signal = sig;
  ::sem_post(&stop_wake);
}

class replica {
 public:
  replica(const replica_options& o, troupe::clock& clk) : o_(o), clock_(clk) {}
  int run();

 private:
  static void install_stop_handler();
  expected<void> pin();
  expected<void> connect();
  // The model directory read and its predictor loaded and warmed up.
  expected<void> load();
  void on_message(const message& m);
  void compute_loop();
  void answer(const message& m);
  // The batch's logits computed into `r` (or its error: rows that do not match their bytes, or
  // forward's failure), with the time forward took.
  void compute_result(schema::InferBatch::Reader b, schema::InferResult::Builder r);
  void say_failed(const std::string& error);
  void say_ready();
  // Until SIGTERM/SIGINT (then stop()) or stop().
  void watch_signals();
  void stop() {
    {
      std::lock_guard lk(mu_);
      stop_ = true;
      cv_.notify_all();
    }
    ::sem_post(&stop_wake);
  }

  replica_options o_;
  troupe::clock& clock_;
  std::unique_ptr<endpoint> net_;
  std::unique_ptr<model::predictor> predictor_;
  model::model_info model_;
  std::string version_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<message> work_;
  bool busy_ = false;  // a batch is being computed (on the io thread or the compute thread)
  std::chrono::microseconds last_forward_{0};
  static constexpr std::chrono::microseconds inline_forward{2000};
  bool stop_ = false;
};

expected<void> replica::pin() {
  if (o_.cpus.empty()) return {};
  cpu_set_t set;
  CPU_ZERO(&set);
  int n = static_cast<int>(std::thread::hardware_concurrency());
  for (int c : o_.cpus) CPU_SET(n > 0 ? c % n : c, &set);
  // Before libtorch starts its pools: their threads inherit the mask.
  if (::sched_setaffinity(0, sizeof set, &set) != 0)
    return make_unexpected(core_errc::io_error, std::string("sched_setaffinity: ") + std::strerror(errno));
  return {};
}

expected<void> replica::connect() {
  auto token = load_token(o_.token_file, "", "");
  if (!token) return token.err();
  transport_config cfg;
  cfg.token = *token;
  cfg.reconnect_attempts = 0;
  cfg.heartbeat_interval = o_.heartbeat_interval;
  cfg.heartbeat_timeout = o_.heartbeat_timeout;
  auto net = endpoint::create(node_id{o_.name, o_.incarnation}, cfg);
  if (!net) return net.err();
  net_ = std::move(*net);
  if (auto r = net_->register_name("replica", [this](const message& m) { on_message(m); }); !r) return r;
  net_->on_peer_down([this](const peer_event& e) {
    if (e.node.name == "serve") {
      spdlog::info("{}#{}: the front end is gone ({}): exiting", o_.name, o_.incarnation, e.reason);
      stop();
    }
  });
  auto peer = net_->connect(o_.connect, false);
  if (!peer) return peer.err();
  return {};
}

void replica::on_message(const message& m) {
  if (m.kind() != schema::Envelope::Body::SERVE ||
      m.body().getServe().which() != schema::ServeMessage::INFER_BATCH)
    return;
  {
    std::lock_guard lk(mu_);
    // A short forward runs here, on the io thread, when nothing else is computing: two thread
    // hand-offs (to the compute thread, and its send back to this thread) are most of a small
    // model's time. A long one (the last forward took more than inline_forward) goes to the compute
    // thread, so that the heartbeats keep going; so does a batch the front end sends again after a
    // replica was lost with it (a forward slow for these rows silenced the io thread past the
    // heartbeat timeout: each replica it went to was fenced in turn, and the request failed).
    if (busy_ || !work_.empty() || predictor_ == nullptr || last_forward_ > inline_forward ||
        m.body().getServe().getInferBatch().getRetried()) {
      work_.push_back(m);
      cv_.notify_one();
      return;
    }
    busy_ = true;
  }
  answer(m);
  std::lock_guard lk(mu_);
  busy_ = false;
  if (!work_.empty()) cv_.notify_one();
}

void replica::compute_loop() {
  for (;;) {
    message m;
    {
      std::unique_lock lk(mu_);
      cv_.wait(lk, [&] { return stop_ || (!work_.empty() && !busy_); });
      if (stop_) return;
      m = std::move(work_.front());
      work_.pop_front();
      busy_ = true;
    }
    answer(m);
    std::lock_guard lk(mu_);
    busy_ = false;
    if (!work_.empty()) cv_.notify_one();
  }
}

void replica::answer(const message& m) {
  outbound out;
  try {
    auto b = m.body().getServe().getInferBatch();
    out = outbound(static_cast<unsigned>(b.getRows() * predictor_->width() / 2 + 64));
    compute_result(b, out.body().initServe().initInferResult());
  } catch (const std::exception& e) {
    spdlog::warn("{}: a malformed batch: {}", o_.name, e.what());
    return;
  }
  if (auto s = net_->send("serve", "serve", std::move(out), "replica"); !s)
    spdlog::warn("{}: result not sent: {}", o_.name, s.err().to_string());
}

void replica::compute_result(schema::InferBatch::Reader b, schema::InferResult::Builder r) {
  std::size_t rows = b.getRows(), width = predictor_->width();
  auto dense = b.getDense();
  auto ids = b.getIds();
  r.setBatchId(b.getBatchId());
  r.setRows(static_cast<std::uint32_t>(rows));
  r.setWidth(static_cast<std::uint32_t>(width));
  r.setVersion(version_);
  std::string error;
  if (dense.size() != rows * model_.dense_dim * sizeof(float) ||
      ids.size() != rows * model_.fields * sizeof(std::int64_t)) {
    error = "batch of " + std::to_string(rows) + " rows with " + std::to_string(dense.size()) +
            " bytes of dense and " + std::to_string(ids.size()) + " of ids";
  } else {
    auto logits = r.initLogits(rows * width * sizeof(float));
    auto t0 = clock_.now();
    error =
        predictor_->predict(reinterpret_cast<const float*>(dense.begin()),
                            model_.takes_ids ? reinterpret_cast<const std::int64_t*>(ids.begin()) : nullptr,
                            rows, reinterpret_cast<float*>(logits.begin()));
    auto took = std::chrono::duration_cast<std::chrono::microseconds>(clock_.now() - t0);
    r.setForwardUs(static_cast<std::uint32_t>(took.count()));
    std::lock_guard lk(mu_);
    last_forward_ = took;
  }
  if (!error.empty()) {
    r.disownLogits();
    r.setError(error);
  }
}

void replica::say_failed(const std::string& error) {
  outbound out;
  auto f = out.body().initServe().initReplicaFailed();
  f.setGeneration(o_.generation);
  f.setError(error);
  if (!net_->send("serve", "serve", std::move(out), "replica")) return;
  // Let the frame leave before the process does. The endpoint tells no one when its send queues
  // empty, so this polls them, for up to 1 s.
  auto until = clock_.now() + std::chrono::seconds(1);
  while (net_->stats().queued_bytes > 0 && clock_.now() < until)
    clock_.sleep_for(std::chrono::milliseconds(10));
}

void replica::say_ready() {
  outbound out;
  auto r = out.body().initServe().initReplicaReady();
  r.setGeneration(o_.generation);
  r.setVersion(version_);
  r.setPid(static_cast<std::uint32_t>(::getpid()));
  r.setPlacement(predictor_->placement());
  r.setLoadMs(predictor_->load_ms());
  r.setWarmupMs(predictor_->warmup_ms());
  if (auto s = net_->send("serve", "serve", std::move(out), "replica"); !s)
    spdlog::warn("{}: ReplicaReady not sent: {}", o_.name, s.err().to_string());
}

void replica::install_stop_handler() {
  ::sem_init(&stop_wake, 0, 0);
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGINT, SIGTERM}) ::sigaction(sig, &sa, nullptr);
}

expected<void> replica::load() {
  auto m = model::read_model_dir(o_.model_dir);
  if (!m) return m.err();
  model_ = *m;
  version_ = o_.version.empty() ? model_.version() : o_.version;
  auto po = model::options_for(model_);
  po.threads = o_.threads;
  po.device = o_.device;
  po.max_batch = o_.max_batch;
  po.warmup = o_.warmup;
  auto p = model::load_predictor(po);
  if (!p) return p.err();
  std::lock_guard lk(mu_);  // on_message reads it on the io thread
  predictor_ = std::move(*p);
  return {};
}

void replica::watch_signals() {
  for (;;) {
    while (::sem_wait(&stop_wake) != 0 && errno == EINTR) {
    }
    {
      std::lock_guard lk(mu_);
      if (stop_) return;
    }
    if (stop_signal) {
      spdlog::info("{}#{}: stopping ({})", o_.name, o_.incarnation,
                   stop_signal == SIGINT ? "SIGINT" : "SIGTERM");
      stop();
      return;
    }
  }
}

int replica::run() {
  install_stop_handler();
  auto started = clock_.now();
  if (auto r = pin(); !r) spdlog::warn("{}: not pinned: {}", o_.name, r.err().to_string());
  if (auto r = connect(); !r) {
    spdlog::error("{}: cannot reach the front end at {}: {}", o_.name, o_.connect, r.err().to_string());
    return cluster::exit_join_failed;  // as a node that cannot join: its host may be cut off
  }
  if (auto r = load(); !r) {
    say_failed(r.err().context());
    spdlog::error("{}", r.err().context());
    return 1;
  }
  spdlog::info(
      "{}#{}: {} version {} on {} ({} threads): loaded in {:.0f} ms, warmed up in {:.0f} ms, ready {:.0f} ms "
      "after start",
      o_.name, o_.incarnation, model_.pt_path, version_, predictor_->placement(), o_.threads,
      predictor_->load_ms(), predictor_->warmup_ms(),
      std::chrono::duration<double, std::milli>(clock_.now() - started).count());
  std::thread compute([this] { compute_loop(); });
  say_ready();
  std::thread signals([this] { watch_signals(); });
  compute.join();
  signals.join();
  net_.reset();
  return 0;
}

}  // namespace

int run_replica(const replica_options& o) {
  replica r(o, clock::system());
  return r.run();
}

}  // namespace troupe::serve
