// The control plane at N workers (issue 29). One real master process (`troupe node --role master`:
// real transport, real task journal on disk with fsync) and N simulated workers in this process,
// each with its own transport endpoint (own node identity, TCP connection, heartbeats and io
// thread, as a real worker process has; the transport does not multiplex identities over one
// connection). The workers join, then lease and report tasks of --task-ms (0: report at once)
// without training; then one worker dies (its endpoint is destroyed: its socket closes as when a
// process is SIGKILLed) and every survivor's time to a view without it is measured. Then the same
// task-queue work against etcd (bench/control/etcd_queue.hpp) with the same client count.
// Prints one JSON object per phase on stdout.
//
// Usage: control_bench --troupe BIN --workers N [--seconds S] [--task-ms L] [--work DIR]
//                      [--etcd /usr/bin/etcd] [--no-etcd] [--no-troupe] [--no-join]
//                      [--heartbeat-ms H]  (heartbeats every H ms, timeout 4 H, master and workers:
//                      at 4,000 the bench's io threads on 2 cores miss the default 250 / 1,000 ms)
//                      [--io-threads K]  (the simulated workers' endpoints share K io threads;
//                      default 0: one each, as worker processes have)
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <spdlog/spdlog.h>
#include <boost/asio/ip/tcp.hpp>
#include <nlohmann/json.hpp>

#include "etcd_queue.hpp"
#include "troupe/cluster/bootstrap.hpp"
#include "troupe/cluster/job_dir.hpp"
#include "troupe/job/data.hpp"
#include "troupe/transport/endpoint.hpp"
#include "troupe/transport/message.hpp"
#include "troupe/wire/messages.hpp"

using namespace troupe;
using clk = std::chrono::steady_clock;
using json = nlohmann::json;

namespace {

struct options {
  std::string troupe, etcd = "/usr/bin/etcd", work;
  std::size_t workers = 64;
  double seconds = 5, warmup = 1, idle_seconds = 3;
  int task_ms = 0;
  int heartbeat_ms = 0;  // 0: the transport's defaults
  // 0: an io thread per simulated worker, as a worker process has; K: the workers' endpoints share
  // K io threads (transport io_group), a lighter load generator that leaves the cores to the master.
  unsigned io_threads = 0;
  unsigned etcd_window = 64;
  bool run_troupe = true, run_etcd = true;
  // The workers do not join the membership (no view broadcasts; no death measured): for N where one
  // full-view broadcast (N messages of N members) is too large to run on a shared machine.
  bool join = true;
};

double ms_since(clk::time_point t) {
  return std::chrono::duration<double, std::milli>(clk::now() - t).count();
}

double pct(std::vector<double>& v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<std::size_t>(p * static_cast<double>(v.size())))];
}

std::uint16_t free_port() {
  boost::asio::io_context io;
  boost::asio::ip::tcp::acceptor a(io, {boost::asio::ip::make_address("127.0.0.1"), 0});
  return a.local_endpoint().port();
}

// CPU seconds (user + system) and resident KiB of a process, from /proc: all of it, and the
// anonymous part alone (the heap, stacks: what grows per worker), without the file-backed pages of
// the binary and its libraries, which vary from run to run with the code paths touched.
struct proc_sample {
  double cpu_s = 0;
  long rss_kib = 0, rss_anon_kib = 0;
};
proc_sample sample(pid_t pid) {
  proc_sample s;
  std::ifstream st("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(st)), {});
  auto close = text.rfind(')');
  if (close != std::string::npos) {
    std::istringstream in(text.substr(close + 2));
    std::string f;
    unsigned long utime = 0, stime = 0;
    for (int i = 3; i <= 15 && in >> f; ++i) {
      if (i == 14) utime = std::stoul(f);
      if (i == 15) stime = std::stoul(f);
    }
    s.cpu_s = static_cast<double>(utime + stime) / static_cast<double>(::sysconf(_SC_CLK_TCK));
  }
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind("VmRSS:", 0) == 0)
      s.rss_kib = std::atol(line.c_str() + 6);
    else if (line.rfind("RssAnon:", 0) == 0)
      s.rss_anon_kib = std::atol(line.c_str() + 8);
  return s;
}

// Forks argv with stdout and stderr into `log`, with `env` added to the environment.
pid_t spawn(const std::vector<std::string>& argv, const std::string& log,
            const std::vector<std::pair<std::string, std::string>>& env = {}) {
  pid_t pid = ::fork();
  if (pid == 0) {
    ::setenv("TROUPE_NODE", "1", 1);  // run until SIGTERM, as under the runner
    for (const auto& [k, v] : env) ::setenv(k.c_str(), v.c_str(), 1);
    std::FILE* f = std::freopen(log.c_str(), "w", stdout);
    if (f) ::dup2(::fileno(stdout), 2);
    std::vector<char*> a;
    for (const auto& s : argv) a.push_back(const_cast<char*>(s.c_str()));
    a.push_back(nullptr);
    ::execv(a[0], a.data());
    std::_Exit(127);
  }
  return pid;
}

void stop(pid_t pid) {
  if (pid <= 0) return;
  ::kill(pid, SIGTERM);
  for (int i = 0; i < 100; ++i) {  // 10 s, then SIGKILL
    if (::waitpid(pid, nullptr, WNOHANG) == pid) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
}

// Deferred calls (a task's length, a retry after "none") posted to each worker's io thread.
class timer_thread {
 public:
  timer_thread() : t_([this] { run(); }) {}
  ~timer_thread() {
    {
      std::lock_guard l(mu_);
      done_ = true;
    }
    cv_.notify_all();
    t_.join();
  }
  void at(clk::time_point when, std::function<void()> fn) {
    {
      std::lock_guard l(mu_);
      q_.emplace(when, std::move(fn));
    }
    cv_.notify_all();
  }

 private:
  void run() {
    std::unique_lock l(mu_);
    while (!done_) {
      if (q_.empty()) {
        cv_.wait(l);
        continue;
      }
      auto it = q_.begin();
      if (it->first > clk::now()) {
        cv_.wait_until(l, it->first);
        continue;
      }
      auto fn = std::move(it->second);
      q_.erase(it);
      l.unlock();
      fn();
      l.lock();
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::multimap<clk::time_point, std::function<void()>> q_;
  bool done_ = false;
  std::thread t_;
};

struct shared_state {
  std::atomic<bool> leasing{false}, measuring{false};
  std::atomic<std::int64_t> in_flight{0};
  std::atomic<std::uint64_t> joined{0}, leases{0}, nones{0}, reports{0};
  // The death under test: its node name, when it died, and the survivors that saw it gone.
  std::string victim;
  std::atomic<bool> victim_dead{false};
  clk::time_point died;
  std::atomic<std::uint64_t> saw_death{0}, views_after{0}, view_bytes_after{0}, views_total{0};
  int task_ms = 0;
  timer_thread* timers = nullptr;
};

// One simulated worker: all of its state is touched on its endpoint's io thread only.
struct sim_worker {
  std::unique_ptr<endpoint> net;
  std::string name;
  shared_state* sh = nullptr;
  bool joined = false, saw_death = false;
  std::uint64_t next_cid = 0, held = 0;
  std::uint32_t attempt = 0;
  clk::time_point sent;
  std::vector<double> latencies_ms;
  double death_ms = -1;

  void request() {
    if (!sh->leasing.load()) return;
    outbound o(outbound::small_words);
    o.body().initTaskRequest();
    o.set_correlation_id(++next_cid);
    sent = clk::now();
    sh->in_flight.fetch_add(1);
    if (!net->send("master", "dispenser", std::move(o), "rpc")) sh->in_flight.fetch_sub(1);
  }
  void report() {
    outbound o(outbound::small_words);
    auto r = o.body().initTaskReport();
    r.setTaskId(held);
    r.setAttempt(attempt);
    r.setDone();
    o.set_correlation_id(++next_cid);
    sh->in_flight.fetch_add(1);
    if (!net->send("master", "dispenser", std::move(o), "rpc")) sh->in_flight.fetch_sub(1);
  }
  void later(int ms, void (sim_worker::*fn)()) {
    sh->timers->at(clk::now() + std::chrono::milliseconds(ms),
                   [this, fn] { net->post([this, fn] { (this->*fn)(); }); });
  }
  void on_rpc(const message& m) {
    sh->in_flight.fetch_sub(1);
    using B = schema::Envelope::Body;
    if (m.kind() == B::TASK_LEASE) {
      auto l = m.body().getTaskLease();
      if (l.which() == schema::TaskLease::TASK) {
        if (sh->measuring.load()) {
          latencies_ms.push_back(ms_since(sent));
          sh->leases.fetch_add(1);
        }
        held = l.getTask().getId();
        attempt = l.getTask().getAttempt();
        if (sh->task_ms > 0)
          later(sh->task_ms, &sim_worker::report);
        else
          report();
      } else if (l.which() == schema::TaskLease::NONE) {
        sh->nones.fetch_add(1);
        later(5, &sim_worker::request);
      }
    } else if (m.kind() == B::TASK_REPORT_ACK) {
      if (sh->measuring.load()) sh->reports.fetch_add(1);
      request();
    }
  }
  void on_view(const message& m) {
    if (m.kind() != schema::Envelope::Body::MEMBERSHIP) return;
    sh->views_total.fetch_add(1);
    // A whole view lists every member (the victim is dead once it is absent); a delta lists the
    // members added or changed and the ones gone (the victim is dead once it is gone).
    auto v = m.body().getMembership();
    const bool delta = v.getBaseEpoch() != 0;
    bool me = false, victim_listed = false, victim_gone = false;
    for (auto mem : v.getMembers()) {
      auto n = mem.getNode().getName();
      std::string_view nv(n.cStr(), n.size());
      if (nv == name) me = true;
      if (nv == sh->victim) victim_listed = true;
    }
    for (auto g : v.getGone())
      if (std::string_view(g.getName().cStr(), g.getName().size()) == sh->victim) victim_gone = true;
    const bool victim = delta ? !victim_gone : victim_listed;  // still alive in this view
    if (me && !joined) {
      joined = true;
      sh->joined.fetch_add(1);
    }
    if (sh->victim_dead.load()) {
      sh->views_after.fetch_add(1);
      sh->view_bytes_after.fetch_add(m.size_bytes());
      if (!victim && !saw_death) {
        saw_death = true;
        death_ms = ms_since(sh->died);
        sh->saw_death.fetch_add(1);
      }
    }
  }
};

template <class Pred>
bool wait_for(Pred p, double seconds) {
  auto until = clk::now() + std::chrono::duration<double>(seconds);
  while (!p()) {
    if (clk::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));  // polling counters the io threads bump
  }
  return true;
}

std::string job_toml(const options& o) {
  std::ostringstream t;
  t << "[job]\nname = \"control\"\nstrategy = \"async_ps\"\nworkers = 1\nmin_workers = 0\nmax_workers = "
    << o.workers << "\nrecords_per_task = 1\nlease_timeout_ms = 60000\n"
    << "[ps]\nshards = 1\n[model]\ntype = \"deepfm\"\nembedding_dim = 2\nhidden = [2]\n"
    << "[train]\nepochs = 1\nbatch_size = 1\n"
    << "[data]\nsource = \"synthetic-ctr\"\nrows = 1000\ntest_rows = 10\nfields = 1\nvocab_per_field = 2\n";
  if (o.heartbeat_ms > 0)
    t << "[transport]\nheartbeat_ms = " << o.heartbeat_ms << "\nheartbeat_timeout_ms = " << 4 * o.heartbeat_ms
      << "\n";
  return t.str();
}

// Records for `tasks` tasks of one record (only their count matters: workers do not read them).
void write_store(const std::string& dir, std::size_t rows) {
  nn::dataset d;
  d.info.name = "control";
  d.info.dense_dim = 1;
  d.info.num_classes = 2;
  d.rows = rows;
  d.dense.assign(rows, 0.f);
  d.labels.assign(rows, 0.f);
  for (std::size_t i = 0; i < rows; i += 2) d.labels[i] = 1.f;
  auto m = job::write_dataset(d, dir, "control_bench");
  if (!m) throw std::runtime_error(m.err().to_string());
}

json run_troupe(const options& o) {
  namespace fs = std::filesystem;
  json out = {{"system", "troupe"}, {"workers", o.workers}, {"task_ms", o.task_ms}};
  std::string root = o.work + "/troupe-" + std::to_string(o.workers);
  fs::remove_all(root);
  fs::create_directories(root);
  // Enough one-record tasks that the phase never runs dry at 20k leases/s.
  std::size_t tasks = static_cast<std::size_t>((o.seconds + o.warmup + 2) * 20000);
  write_store(root + "/train", tasks);
  write_store(root + "/test", 10);
  auto jd = cluster::job_dir::create(root + "/jobs", "control", job_toml(o));
  if (!jd) throw std::runtime_error(jd.err().to_string());
  const std::string token = "control-bench-token";
  std::ofstream(jd->path() + "/token") << token << "\n";
  std::uint16_t port = free_port();
  std::string addr = "127.0.0.1:" + std::to_string(port);
  pid_t master = spawn({o.troupe, "node", "--job-dir", jd->path(), "--role", "master", "--listen", addr,
                        "--train", root + "/train", "--test", root + "/test"},
                       root + "/master.log",
                       cluster::node_environment(cluster::node_role::master, std::getenv("GLIBC_TUNABLES")));
  transport_config cfg;
  cfg.token = token;
  cfg.reconnect_attempts = 0;
  if (o.heartbeat_ms > 0) {
    cfg.heartbeat_interval = std::chrono::milliseconds(o.heartbeat_ms);
    cfg.heartbeat_timeout = 4 * cfg.heartbeat_interval;
  }
  out["heartbeat_ms"] = cfg.heartbeat_interval.count();
  shared_state sh;
  sh.task_ms = o.task_ms;
  timer_thread timers;
  sh.timers = &timers;
  out["io_threads"] = o.io_threads;
  std::unique_ptr<io_group> group;  // outlives the workers' endpoints
  if (o.io_threads > 0) group = std::make_unique<io_group>(o.io_threads);
  std::vector<std::unique_ptr<sim_worker>> ws;
  // The master is up when the first worker connects.
  auto t_start = clk::now();
  for (std::size_t i = 0; i < o.workers; ++i) {
    auto w = std::make_unique<sim_worker>();
    w->name = "worker-" + std::to_string(i);
    w->sh = &sh;
    auto net = endpoint::create(node_id{w->name, 1}, cfg, group.get());
    if (!net) throw std::runtime_error(net.err().to_string());
    w->net = std::move(*net);
    sim_worker* self = w.get();
    (void)w->net->register_name("rpc", [self](const message& m) { self->on_rpc(m); });
    (void)w->net->register_name("node", [self](const message& m) { self->on_view(m); });
    for (int attempt = 0;; ++attempt) {
      auto c = w->net->connect(addr, false);
      if (c) break;
      if (i > 0 || attempt > 300) throw std::runtime_error("connect to the master: " + c.err().to_string());
      std::this_thread::sleep_for(std::chrono::milliseconds(100));  // the master is starting
    }
    if (i == 0) {
      out["master_start_ms"] = ms_since(t_start);
      auto base = sample(master);
      out["master_rss_kib_one_worker"] = base.rss_kib;
    }
    ws.push_back(std::move(w));
  }
  out["connect_ms"] = ms_since(t_start);
  auto before_join = sample(master);
  auto t_join = clk::now();
  out["joined_membership"] = o.join;
  for (auto& w : ws) {
    if (!o.join) break;
    auto j = wire::join(node_id{w->name, 1}, cluster::node_role::worker, "127.0.0.1:1", ::getpid());
    (void)w->net->send("master", "master", std::move(j), "node");
  }
  bool all_joined = !o.join || wait_for([&] { return sh.joined.load() == o.workers; }, 600);
  out["join_ms"] = ms_since(t_join);
  out["joined"] = sh.joined.load();
  out["views_during_join"] = sh.views_total.load();
  if (!all_joined)
    std::fprintf(stderr, "control_bench: only %llu of %zu joined\n",
                 static_cast<unsigned long long>(sh.joined.load()), o.workers);
  // Idle: joined, heartbeating, no tasks. The master's CPU and memory per worker.
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // let the join storm's sends drain
  // Bytes and frames the simulated workers' endpoints sent and received so far.
  auto traffic = [&] {
    std::pair<std::uint64_t, std::uint64_t> t{0, 0};
    for (auto& w : ws) {
      auto s = w->net->stats();
      t.first += s.bytes_sent + s.bytes_received;
      t.second += s.frames_sent + s.frames_received;
    }
    return t;
  };
  auto idle0 = sample(master);
  auto [bytes0, frames0] = traffic();
  auto t_idle = clk::now();
  std::this_thread::sleep_for(std::chrono::duration<double>(o.idle_seconds));  // a measured window
  double idle_s = ms_since(t_idle) / 1000;
  auto idle1 = sample(master);
  auto [bytes1, frames1] = traffic();
  out["master_rss_kib_before_join"] = before_join.rss_kib;
  out["master_rss_kib_idle"] = idle1.rss_kib;
  out["master_rss_anon_kib_before_join"] = before_join.rss_anon_kib;
  out["master_rss_anon_kib_idle"] = idle1.rss_anon_kib;
  out["master_rss_bytes_per_worker"] =
      static_cast<double>(idle1.rss_kib - before_join.rss_kib) * 1024 / static_cast<double>(o.workers);
  out["master_idle_cpu_frac"] = (idle1.cpu_s - idle0.cpu_s) / idle_s;
  out["master_idle_cpu_frac_per_worker"] =
      (idle1.cpu_s - idle0.cpu_s) / idle_s / static_cast<double>(o.workers);
  out["heartbeat_bytes_per_s"] = static_cast<double>(bytes1 - bytes0) / idle_s;
  out["heartbeat_frames_per_s"] = static_cast<double>(frames1 - frames0) / idle_s;

  // Leasing: every worker leases, (after task_ms) reports, leases again.
  sh.leasing = true;
  for (auto& w : ws) {
    sim_worker* self = w.get();
    w->net->post([self] { self->request(); });
  }
  std::this_thread::sleep_for(std::chrono::duration<double>(o.warmup));  // warm-up, not measured
  auto cpu0 = sample(master), self0 = sample(::getpid());
  auto t_measure = clk::now();
  sh.measuring = true;
  std::this_thread::sleep_for(std::chrono::duration<double>(o.seconds));  // the measured window
  sh.measuring = false;
  double measured_s = ms_since(t_measure) / 1000;
  auto cpu1 = sample(master), self1 = sample(::getpid());
  sh.leasing = false;
  wait_for([&] { return sh.in_flight.load() <= 0; }, 30);
  std::this_thread::sleep_for(std::chrono::milliseconds(std::max(50, o.task_ms * 2)));  // timers due
  wait_for([&] { return sh.in_flight.load() <= 0; }, 30);
  std::vector<double> lat;
  for (auto& w : ws) {
    sim_worker* self = w.get();
    std::promise<std::vector<double>> p;
    auto f = p.get_future();
    w->net->post([self, &p] { p.set_value(self->latencies_ms); });
    auto v = f.get();
    lat.insert(lat.end(), v.begin(), v.end());
  }
  out["leases"] = sh.leases.load();
  out["leases_per_s"] = static_cast<double>(sh.leases.load()) / measured_s;
  out["reports_per_s"] = static_cast<double>(sh.reports.load()) / measured_s;
  out["nones"] = sh.nones.load();
  out["lease_p50_ms"] = pct(lat, 0.5);
  out["lease_p99_ms"] = pct(lat, 0.99);
  out["lease_max_ms"] = lat.empty() ? 0 : lat.back();
  out["master_cpu_frac_leasing"] = (cpu1.cpu_s - cpu0.cpu_s) / measured_s;
  out["bench_cpu_frac_leasing"] = (self1.cpu_s - self0.cpu_s) / measured_s;  // the load generator's

  // One worker dies: the time until every survivor holds a view without it.
  if (o.workers >= 2 && o.join) {
    sh.victim = ws.back()->name;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));  // quiet
    sh.died = clk::now();
    sh.victim_dead = true;
    ws.back()->net.reset();  // its socket closes, as when the process is killed
    bool all = wait_for([&] { return sh.saw_death.load() == o.workers - 1; }, 120);
    std::vector<double> seen;
    for (std::size_t i = 0; i + 1 < ws.size(); ++i) {
      sim_worker* self = ws[i].get();
      std::promise<double> p;
      auto f = p.get_future();
      self->net->post([self, &p] { p.set_value(self->death_ms); });
      seen.push_back(f.get());
    }
    out["death_all_seen"] = all;
    out["death_seen_by"] = sh.saw_death.load();
    out["death_p50_ms"] = pct(seen, 0.5);
    out["death_last_ms"] = seen.empty() ? 0 : seen.back();
    out["death_view_messages"] = sh.views_after.load();
    out["death_view_bytes"] = sh.view_bytes_after.load();
  }
  ws.clear();
  stop(master);
  return out;
}

json run_etcd(const options& o) {
  namespace fs = std::filesystem;
  json out = {{"system", "etcd"}, {"workers", o.workers}, {"task_ms", o.task_ms}};
  std::string dir = o.work + "/etcd-" + std::to_string(o.workers);
  fs::remove_all(dir);
  std::uint16_t cport = free_port(), pport = free_port();
  std::string curl = "http://127.0.0.1:" + std::to_string(cport);
  pid_t etcd = spawn({o.etcd, "--data-dir", dir, "--listen-client-urls", curl, "--advertise-client-urls",
                      curl, "--listen-peer-urls", "http://127.0.0.1:" + std::to_string(pport),
                      "--initial-advertise-peer-urls", "http://127.0.0.1:" + std::to_string(pport),
                      "--initial-cluster", "default=http://127.0.0.1:" + std::to_string(pport)},
                     o.work + "/etcd-" + std::to_string(o.workers) + ".log");
  if (!bench::etcd_wait_healthy(cport, 30)) {
    stop(etcd);
    throw std::runtime_error("etcd did not become healthy (see its log in " + o.work + ")");
  }
  std::size_t tasks = static_cast<std::size_t>((o.seconds + o.warmup + 2) * 5000);
  {
    bench::etcd_client c(cport, 1);
    c.fill(0, tasks);
  }
  std::atomic<bool> leasing{true}, measuring{false};
  std::atomic<std::uint64_t> leases{0}, conflicts{0}, errors{0};
  std::vector<std::vector<double>> lat(o.workers);
  std::vector<std::thread> clients;
  for (std::size_t i = 0; i < o.workers; ++i)
    clients.emplace_back([&, i] {
      try {
        bench::etcd_client c(cport, i + 7);
        std::string holder = "worker-" + std::to_string(i);
        std::uint64_t lost = 0;
        while (leasing.load()) {
          auto t0 = clk::now();
          auto id = c.lease(holder, o.etcd_window, lost, leasing);
          if (!id) break;
          if (measuring.load()) {
            lat[i].push_back(ms_since(t0));
            leases.fetch_add(1);
          }
          if (o.task_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(o.task_ms));  // the task
          c.report(*id);
        }
        conflicts.fetch_add(lost);
      } catch (const std::exception& e) {
        if (errors.fetch_add(1) == 0) std::fprintf(stderr, "control_bench: etcd client: %s\n", e.what());
      }
    });
  std::this_thread::sleep_for(std::chrono::duration<double>(o.warmup));  // warm-up, not measured
  auto cpu0 = sample(etcd);
  auto t_measure = clk::now();
  measuring = true;
  std::this_thread::sleep_for(std::chrono::duration<double>(o.seconds));  // the measured window
  measuring = false;
  double measured_s = ms_since(t_measure) / 1000;
  auto cpu1 = sample(etcd);
  leasing = false;
  for (auto& t : clients) t.join();
  std::vector<double> all;
  for (auto& v : lat) all.insert(all.end(), v.begin(), v.end());
  out["leases"] = leases.load();
  out["leases_per_s"] = static_cast<double>(leases.load()) / measured_s;
  out["lease_p50_ms"] = pct(all, 0.5);
  out["lease_p99_ms"] = pct(all, 0.99);
  out["lease_max_ms"] = all.empty() ? 0 : all.back();
  out["conflicts"] = conflicts.load();
  out["client_errors"] = errors.load();
  out["etcd_cpu_frac"] = (cpu1.cpu_s - cpu0.cpu_s) / measured_s;
  out["etcd_rss_kib"] = cpu1.rss_kib;
  stop(etcd);
  fs::remove_all(dir);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "control_bench: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--troupe")
      o.troupe = next();
    else if (a == "--etcd")
      o.etcd = next();
    else if (a == "--work")
      o.work = next();
    else if (a == "--workers")
      o.workers = std::stoul(next());
    else if (a == "--seconds")
      o.seconds = std::stod(next());
    else if (a == "--idle-seconds")
      o.idle_seconds = std::stod(next());
    else if (a == "--task-ms")
      o.task_ms = std::stoi(next());
    else if (a == "--heartbeat-ms")
      o.heartbeat_ms = std::stoi(next());
    else if (a == "--io-threads")
      o.io_threads = static_cast<unsigned>(std::stoul(next()));
    else if (a == "--etcd-window")
      o.etcd_window = static_cast<unsigned>(std::stoul(next()));
    else if (a == "--no-etcd")
      o.run_etcd = false;
    else if (a == "--no-troupe")
      o.run_troupe = false;
    else if (a == "--no-join")
      o.join = false;
    else {
      std::fprintf(stderr, "control_bench: unknown argument '%s'\n", a.c_str());
      return 2;
    }
  }
  if (o.run_troupe && o.troupe.empty()) {
    std::fprintf(stderr, "control_bench: --troupe BIN (the troupe binary) is required\n");
    return 2;
  }
  if (o.workers < 1) {
    std::fprintf(stderr, "control_bench: --workers must be at least 1\n");
    return 2;
  }
  if (o.work.empty()) o.work = "/tmp/control-bench-" + std::to_string(::getpid());
  std::filesystem::create_directories(o.work);
  rlimit nofile{};
  if (::getrlimit(RLIMIT_NOFILE, &nofile) == 0) {
    nofile.rlim_cur = nofile.rlim_max;  // a socket per worker here and in the master
    ::setrlimit(RLIMIT_NOFILE, &nofile);
  }
  ::signal(SIGPIPE, SIG_IGN);
  spdlog::set_level(spdlog::level::warn);  // stdout is the JSON lines; the transport logs peers up/down
  try {
    if (o.run_troupe) std::printf("%s\n", run_troupe(o).dump().c_str());
    std::fflush(stdout);
    if (o.run_etcd) std::printf("%s\n", run_etcd(o).dump().c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "control_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
