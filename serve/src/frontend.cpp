// The front end's set-up, its ticker and its signals (frontend.hpp).
#include "frontend.hpp"
#include "troupe/transport/errc.hpp"

#include <fcntl.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "troupe/cluster/config.hpp"
#include "troupe/cluster/job_dir.hpp"
#include "troupe/cluster/own_path.hpp"
#include "troupe/wire/rpc.hpp"

namespace troupe::serve {

namespace {

std::string random_token() {
  std::random_device rd;
  static const char* hex = "0123456789abcdef";
  std::string t;
  for (int i = 0; i < 64; ++i) t.push_back(hex[rd() % 16]);
  return t;
}
// A start refused or failed: the CLI's error line, as every other command says it (not a log line).
int refused(int rc, const std::string& why) {
  std::fprintf(stderr, "troupe: error: %s\n", why.c_str());
  return rc;
}

}  // namespace

frontend::frontend(serve_settings settings, model::model_info first, troupe::clock& clk)
    : settings_(std::move(settings)),
      cfg_(settings_.serve),
      clock_(clk),
      name_(cfg_.name.empty() ? first.model : cfg_.name),
      metrics_(registry_, name_) {
  generation g;
  g.info = std::move(first);
  g.state = gen_state::staging;
  gens_[next_gen_++] = std::move(g);
}

frontend::~frontend() {
  stop_everything();
  if (lock_fd_ >= 0) ::close(lock_fd_);
}

// Why the servers' directory or this server's own is no place to write: a job's directory, or not
// this user's (cluster/own_path.hpp). Empty: fine.
std::string frontend::place_problem(const std::string& servers) const {
  std::error_code ec;
  if (std::filesystem::exists(servers + "/job.toml", ec))
    return servers + " is a job's directory: serve state would go into it (use another [serve] root)";
  if (auto why = cluster::shared_parent_problem(servers); !why.empty())
    return servers + ": " + why + ": no place for this user's servers (use another [serve] root)";
  if (auto why = cluster::not_own(state_dir_); !why.empty())
    return state_dir_ + ": " + why + ": not written into (use another name or root)";
  return {};
}

// The server's directory under the root, checked and made, its lock taken and token written; the
// listen address checked before anything is made.
int frontend::claim_state_dir() {
  const std::string servers = servers_dir(cfg_.root);
  state_dir_ = servers + "/" + name_;
  auto already_runs = [&] {
    return refused(2, "a server named '" + name_ + "' already runs under " + cfg_.root + " (" + state_dir_ +
                          "/server.json): stop it, or --name another");
  };
  if (auto why = place_problem(servers); !why.empty()) return refused(2, "serve: " + why);
  // The same command twice is the name's problem, not the port's (both are taken).
  if (server_running(state_dir_)) return already_runs();
  // A listen address taken now fails now, before any replica is launched or anything is made under
  // the root (a failed start left serve/<name>/ behind). Taken, or no address ("nonsense", port
  // 99999): exit 2, as `troupe run`'s taken metrics_port and `troupe dashboard`'s --listen are (a
  // taken port was exit 1 here alone).
  if (auto free = observe::http_server::check_listen(cfg_.listen); !free)
    return refused(2, "serve: --listen " + cfg_.listen + ": " + free.err().describe());
  std::error_code ec;
  std::filesystem::create_directories(state_dir_ + "/logs", ec);
  std::filesystem::create_directories(state_dir_ + "/models", ec);
  if (ec) return refused(1, state_dir_ + ": " + ec.message());
  // Checked again once made: another user may have made them first.
  if (auto why = place_problem(servers); !why.empty()) return refused(2, "serve: " + why);
  // One server per name and root: the lock is held for the process's life (released by the kernel
  // whatever way it ends).
  lock_fd_ = ::open((state_dir_ + "/server.lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lock_fd_ < 0) return refused(1, state_dir_ + "/server.lock: " + std::strerror(errno));
  if (!take_server_lock(lock_fd_, clock_)) return already_runs();
  token_ = random_token();
  // Owner-only from its creation (written, then chmod-ed, another user could open it in between and
  // reload the server with a model of theirs).
  if (auto w = cluster::write_file_atomic(state_dir_ + "/token", token_ + "\n", 0600); !w)
    return refused(1, "serve: " + w.err().describe());
  write_phase("starting");
  return 0;
}

// The transport endpoint `troupe serve reload` and the replicas reach.
int frontend::open_control() {
  auto plan = cluster::plan_control(settings_.cluster);
  if (!plan) return refused(1, plan.err().describe());
  auto tcfg = settings_.transport;
  tcfg.token = token_;
  auto net = endpoint::create(node_id{"serve", 0}, tcfg);
  if (!net) return refused(1, net.err().describe());
  net_ = std::move(*net);
  auto bound = net_->listen(plan->runner_host, 0);
  if (!bound) return refused(1, bound.err().describe());
  control_address_ = *bound;
  if (auto r = net_->register_name("serve", [this](const message& m) { on_message(m); }); !r)
    return refused(1, r.err().describe());
  // Slurm places each replica itself: where one runs is where its connection comes from.
  net_->on_peer_up([this](const peer_event& e) {
    if (e.node.name.rfind("replica-", 0) != 0) return;
    std::lock_guard lk(mu_);
    slot* s = find_slot(e.node.name);
    if (s && s->incarnation == e.node.incarnation) s->peer_host = e.address.substr(0, e.address.rfind(':'));
  });
  net_->on_peer_down([this](const peer_event& e) {
    if (e.node.name.rfind("replica-", 0) == 0) {
      spdlog::info("serve: {} down: {}", e.node.to_string(), e.reason);
      core_->replica_gone(e.node.name, e.node.incarnation);
      if (e.reason.rfind("heartbeat timeout", 0) == 0)
        replica_silent({e.node.name, e.node.incarnation}, e.reason);
    }
  });
  return 0;
}

int frontend::setup() {
  if (int rc = claim_state_dir(); rc != 0) return rc;
  if (int rc = open_control(); rc != 0) return rc;
  core_options co;
  co.limits = {cfg_.max_batch, cfg_.max_delay, cfg_.max_queue_rows};
  co.pipeline = cfg_.pipeline;
  co.replica_timeout = cfg_.replica_timeout;
  co.max_attempts = cfg_.max_attempts;
  core_ = std::make_unique<serving_core>(co, *this, metrics_, clock_);

  cluster::launch_site site;
  site.job_id = "serve-" + name_;
  site.jobs_file = state_dir_ + "/slurm_jobs";
  auto l = cluster::make_launcher(
      settings_.cluster,
      [this](const cluster::node_handle& h, const cluster::exit_status& s) { on_exit(h, s); }, site, clock_);
  if (!l) return refused(1, l.err().describe());
  launcher_ = std::move(*l);
  started_ = clock_.now();
  started_ms_ = clock_.wall_ms();
  return 0;
}

int frontend::run() {
  // Handlers before any thread starts (troupe/core/signal_wait.hpp: why not a mask and sigwait).
  signals_.emplace(std::initializer_list<int>{SIGINT, SIGTERM, SIGHUP});
  if (int rc = setup(); rc != 0) return rc;
  if (int rc = stage_first_generation(); rc != 0) return rc;
  // The endpoint opens first (routes.cpp, open_http).
  if (!open_http()) {
    stop_everything();
    return 1;
  }
  ticker_ = std::thread([this] { ticker_loop(); });
  // The first generation must come up before the server is announced: a model that cannot be
  // served is the command's error.
  if (!first_generation_up()) {
    bool asked;  // a signal, not a model that could not load (read before stop_everything sets it)
    {
      std::lock_guard lk(mu_);
      asked = stopping_;
    }
    stop_everything();
    write_phase(asked ? "stopped" : "failed");
    return asked ? 0 : 1;
  }
  auto v = current_view();
  spdlog::info("serve: {} (version {}, {} replicas) at http://{}/v2/models/{}", name_, v->info.version(),
               cfg_.replicas, http_->address(), name_);
  std::fprintf(stderr, "serving %s at http://%s/v2/models/%s/infer\n", name_.c_str(),
               http_->address().c_str(), name_.c_str());
  write_state(false);
  announced_ = true;
  wait_for_signals();
  drain();
  print_progress(true);
  stop_everything();
  return 0;
}

void frontend::stop_everything() {
  if (stopped_.exchange(true)) return;
  // New requests are refused (503); those queued and in flight are answered for up to 5 s while
  // the replicas, the ticker and the HTTP threads still run; what is left then gets 503.
  if (core_ && http_) {
    core_->stop_accepting();
    (void)core_->wait_idle(clock_.now() + std::chrono::seconds(5));
  }
  {
    std::lock_guard lk(mu_);
    stopping_ = true;
    wake_.notify_all();
  }
  if (ticker_.joinable()) ticker_.join();
  // Every request's answer is written before the HTTP server goes (a responder must not outlive it).
  if (core_) core_->shutdown();
  if (http_) write_state(true);
  http_.reset();
  stop_replicas_at_exit();
  launcher_.reset();
  net_.reset();
}

void frontend::ticker_loop() {
  auto last_second = clock_.now();
  std::unique_lock lk(mu_);
  while (!stopping_) {
    lk.unlock();
    handle_exits();
    start_reloads();
    launch_due();
    auto t = core_->tick();
    fence_replicas(t.fence, "it held a batch past replica_timeout_ms, or a batch could not be sent to it");
    for (const auto& [who, why] : take_silent()) fence_replicas({who}, why);
    stop_replicas(t.stop);
    advance_swaps();
    auto now = clock_.now();
    if (now - last_second >= std::chrono::seconds(1)) {
      last_second = now;
      write_state(false);
      print_progress(false);
    }
    if (!cfg_.watch.empty()) watch_for_models();
    lk.lock();
    // Up to 50 ms between looks at deadlines and launches; a batch due sooner (max_delay) sets the
    // wake-up, as does anything queued for the ticker (notify).
    auto until = now + std::chrono::milliseconds(50);
    if (t.next && *t.next < until) until = *t.next;
    if (!exits_.empty() || !reloads_.empty()) continue;
    wake_.wait_for(lk, until - clock_.now());
  }
}

void frontend::on_message(const message& m) {
  if (m.kind() != schema::Envelope::Body::SERVE) return;
  auto body = m.body().getServe();
  switch (body.which()) {
    case schema::ServeMessage::INFER_RESULT: {
      auto r = body.getInferResult();
      auto logits = r.getLogits();
      std::size_t rows = r.getRows(), width = r.getWidth();
      std::string error = r.getError();
      if (error.empty() && logits.size() != rows * width * sizeof(float))
        error = "a result of " + std::to_string(logits.size()) + " bytes for " + std::to_string(rows) +
                " x " + std::to_string(width) + " logits";
      core_->result(r.getBatchId(), reinterpret_cast<const float*>(logits.begin()), rows, width, error,
                    r.getVersion(), r.getForwardUs());
      return;
    }
    case schema::ServeMessage::REPLICA_READY:
      return on_ready(m);
    case schema::ServeMessage::REPLICA_FAILED:
      return on_failed(m);
    case schema::ServeMessage::RELOAD: {
      std::lock_guard lk(mu_);
      std::string dir = body.getReload().getModelDir();
      reloads_.push_back({dir.empty() ? served_dir() : dir, m, "reload"});
      wake_.notify_all();
      return;
    }
    default:
      return;
  }
}

bool frontend::send_batch(const std::string& node, std::uint64_t batch_id,
                          const std::vector<request_ptr>& requests, std::size_t rows) {
  std::size_t dense_bytes = 0, ids_bytes = 0;
  bool retried = false;  // some rows were sent before, to a replica lost with them
  for (const auto& r : requests) {
    dense_bytes += r->dense.size() * sizeof(float);
    ids_bytes += r->ids.size() * sizeof(std::int64_t);
    retried = retried || r->attempts > 1;
  }
  outbound out(static_cast<unsigned>((dense_bytes + ids_bytes) / 8 + 32));
  auto b = out.body().initServe().initInferBatch();
  b.setBatchId(batch_id);
  b.setRows(static_cast<std::uint32_t>(rows));
  b.setRetried(retried);
  auto dense = b.initDense(dense_bytes);
  auto* d = dense.begin();
  for (const auto& r : requests) {
    std::memcpy(d, r->dense.data(), r->dense.size() * sizeof(float));
    d += r->dense.size() * sizeof(float);
  }
  if (ids_bytes) {
    auto ids = b.initIds(ids_bytes);
    auto* p = ids.begin();
    for (const auto& r : requests) {
      std::memcpy(p, r->ids.data(), r->ids.size() * sizeof(std::int64_t));
      p += r->ids.size() * sizeof(std::int64_t);
    }
  }
  auto s = net_->send(node, "replica", std::move(out), "serve");
  if (!s) spdlog::warn("serve: batch {} not sent to {}: {}", batch_id, node, s.err().to_string());
  return static_cast<bool>(s);
}

}  // namespace troupe::serve

namespace troupe::serve {

int run_frontend(const serve_settings& settings) {
  auto m = model::read_model_dir(settings.serve.model);
  if (!m) {
    std::fprintf(stderr, "troupe: error: %s\n", m.err().context().c_str());
    return 2;
  }
  if (settings.serve.name.empty() && !valid_model_name(m->model)) {
    std::fprintf(stderr,
                 "troupe: error: model '%s' (model.json) is not usable in URLs: name it with --name\n",
                 m->model.c_str());
    return 2;
  }
  frontend f(settings, *m, clock::system());
  return f.run();
}

}  // namespace troupe::serve
