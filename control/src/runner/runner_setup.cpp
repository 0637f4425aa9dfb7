// The runner's setup: the job's configuration, its directory (new, or resumed after its runner
// died, with what that runner left cleaned up), the lock that keeps a second runner out, the
// runner's own log, the datasets, the endpoint and the launcher.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <future>
#include <random>
#include <thread>

#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include "runner.hpp"
#include "troupe/actors/backends.hpp"
#include "troupe/actors/strategy.hpp"
#include "troupe/cluster/config.hpp"
#include "troupe/cluster/errc.hpp"
#include "troupe/cluster/process.hpp"
#include "troupe/collective/cleanup.hpp"
#include "troupe/core/log.hpp"
#include "troupe/gpu/cuda.hpp"
#include "troupe/job/data.hpp"
#include "troupe/job/data_model.hpp"
#include "troupe/job/job_check.hpp"
#include "troupe/job/job_file.hpp"
#include "troupe/model/state.hpp"
#include "troupe/transport/endpoint.hpp"
#include "troupe/wire/job_token.hpp"

namespace troupe::control {

namespace {

std::string random_hex(std::size_t bytes) {
  std::random_device rd;
  static const char* hex = "0123456789abcdef";
  std::string s;
  for (std::size_t i = 0; i < bytes; ++i) {
    unsigned v = rd() & 0xff;
    s += hex[v >> 4];
    s += hex[v & 15];
  }
  return s;
}

}  // namespace

std::string default_job_id(const std::string& name) {
  std::time_t t = std::time(nullptr);
  char when[32];
  std::strftime(when, sizeof when, "%Y%m%d-%H%M%S", std::localtime(&t));
  return name + "-" + when + "-" + random_hex(2);
}

namespace {

// A free port for the master, fixed for the job so a relaunched master is found again. Probed on
// the wildcard address, not loopback: a port bound on another address (the runner's own listener on
// the bridge, say) is taken there, and the kernel only skips it for a wildcard probe.
expected<std::uint16_t> free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return make_unexpected(core_errc::io_error, "socket for a free port");
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  socklen_t len = sizeof a;
  bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
            ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0;
  ::close(fd);
  if (!ok) return make_unexpected(core_errc::io_error, "no free port for the master");
  return ntohs(a.sin_port);
}

// [job] device = "gpu" needs a device here (the local launcher starts every worker on this host).
expected<void> check_gpu(const job::job_spec& spec) {
  if (!spec.uses_gpu()) return {};
  auto n = gpu::device_count();
  if (!n) return std::move(n).err().wrap("[job] device = \"gpu\", but this host cannot run GPU workers");
  auto all = gpu::describe_all();
  spdlog::info("GPU workers on: {}", all ? *all : std::to_string(*n) + " device(s)");
  return {};
}

// What the launcher knows of the job: a batch backend records the jobs it submits in the job dir.
cluster::launch_site launch_site_of(const cluster::job_dir& dir) {
  return {dir.job_id(), dir.path() + "/slurm_jobs"};
}

// SIGKILLs the process group of a node a dead runner left running (PR_SET_PDEATHSIG normally
// takes them down with it; a node between fork and prctl, or one whose parent was not the runner,
// can survive) and waits (up to 5 s on `clk`) until it is gone. The pid counts only with its recorded
// start time.
void kill_orphan(const cluster::node_record& n, troupe::clock& clk) {
  if (n.pid <= 0 || n.start_time == 0 || !cluster::process_alive(n.pid, n.start_time)) return;
  auto st = cluster::read_process_stat(n.pid);
  spdlog::warn("{} (pid {}) outlived its runner: killing it", n.id.to_string(), n.pid);
  ::kill(st && st->pgid == n.pid ? -n.pid : n.pid, SIGKILL);
  auto deadline = clk.now() + std::chrono::seconds(5);
  while (cluster::process_alive(n.pid, n.start_time) && clk.now() < deadline)
    clk.sleep_for(std::chrono::milliseconds(10));
}

}  // namespace

// Past the job directory's creation, a setup failure ends the job with its error as the reason (in
// the final JSON and result.json), not only in logs/runner.log.
int runner::setup_failed(const error& e, int rc) {
  spdlog::error("{}", e.to_string());
  fatal_ = e.to_string();
  return rc;
}

runner::~runner() {
  if (lock_fd_ >= 0) ::close(lock_fd_);
}

// The model must build for the data, and ring strategies replicate dense parameters only.
int runner::check_model() {
  auto store = storage::record_store::open(data_.train_dir);
  if (!store) return setup_failed(store.err(), 1);
  auto info = job::info_of(store->info(), store->dir());
  auto tables = actors::check_model(spec_, info);
  if (!tables) return setup_failed(tables.err(), 2);
  if (auto f = job::check_model_fits_strategy(spec_, *tables); !f) return setup_failed(f.err(), 2);
  if (spec_.nn.model.init.empty() || !opt_.resume.empty()) return 0;  // a resumed job has its init/
  return start_from_init(info);
}

// [model] init: the state it names, checked against the model, into <job dir>/checkpoints/init,
// where every node of the job reads it (workers' replicas, PS shards without a checkpoint).
int runner::start_from_init(const nn::dataset_info& info) {
  const auto& from = spec_.nn.model.init;
  auto st = model::init_state(from);
  if (!st) return setup_failed(std::move(st).err().wrap("model.init " + from), 2);
  if (auto c = actors::check_init_state(spec_, info, st->state); !c)
    return setup_failed(
        std::move(c).err().wrap("model.init " + from + ": the state does not fit this job's model"), 2);
  auto meta = st->meta;
  meta.from = "init";
  meta.writer = from;
  auto w = model::write_state(dir_->path() + "/checkpoints/init", st->state, meta);
  if (!w) return setup_failed(w.err(), 1);
  spdlog::info("the job starts from {} ({}: {} dense tensors, step {})", from, st->dir,
               st->state.dense.size(), st->meta.step);
  return 0;
}

// The job file with --set overrides, or a resumed job's job.toml as its first runner resolved it.
int runner::read_config(config_doc& doc) {
  if (!opt_.resume.empty()) {
    auto dir = cluster::job_dir::open(opt_.resume);
    if (!dir) return spdlog::error("--resume: {}", dir.err().to_string()), 2;
    auto text = dir->read_job_toml();
    if (!text) return spdlog::error("--resume: {}", text.err().to_string()), 2;
    auto d = config_doc::from_string(*text, dir->job_toml_path());
    if (!d) return spdlog::error("{}", d.err().to_string()), 2;
    doc = std::move(*d);
  } else {
    auto d = job::read_job_file(opt_.file);
    if (!d) return spdlog::error("{}", d.err().to_string()), 2;
    doc = std::move(*d);
    for (const auto& o : opt_.overrides)
      if (auto r = doc.apply_override(o); !r) return spdlog::error("{}", r.err().to_string()), 2;
  }
  if (opt_.workers && !doc.apply_override("job.workers=" + std::to_string(*opt_.workers))) return 2;
  auto spec = job::job_spec::read(doc);
  if (!spec) return spdlog::error("{}", spec.err().to_string()), 2;
  spec_ = std::move(*spec);
  if (!opt_.resume.empty() && !spec_.uses_ps()) {
    // Ring strategies resume from the ring's latest checkpoint (the first ring of the resumed job
    // finds no trained replica and starts from it: replicas::restore_if_untrained).
    if (spec_.job.checkpoint_every.count() == 0) {
      spdlog::error(
          "--resume {}: strategy '{}' with job.checkpoint_every_ms = 0 kept its model only in the workers' "
          "memory, so a resumed job would train the remaining tasks on a fresh model",
          opt_.resume, spec_.job.strategy);
      return 2;
    }
    std::error_code ec;
    if (!std::filesystem::exists(opt_.resume + "/checkpoints/ring/state.json", ec))
      spdlog::warn(
          "--resume {}: no ring checkpoint was written before the runner died: the tasks not done "
          "yet train on a fresh model (the DONE ones are not trained again)",
          opt_.resume);
  }
  // What `troupe config check` checks too (strategy, model, data paths): exit 2 before a job dir.
  if (auto c = job::check_job(spec_, actors::strategy_names(), actors::check_model); !c)
    return spdlog::error("{}: {}", opt_.resume.empty() ? opt_.file : opt_.resume, c.err().to_string()), 2;
  if (auto g = check_gpu(spec_); !g) return spdlog::error("{}", g.err().to_string()), 2;
  for (const auto& n : job::job_notes(spec_)) spdlog::warn("{}", n);
  target_workers_ = spec_.job.workers;
  auto metrics = pin_metrics_address(doc, spec_);
  if (!metrics) return spdlog::error("{}", metrics.err().to_string()), 2;
  metrics_addr_ = *metrics;
  return 0;
}

// Holds runner.lock for the runner's life: a held lock means a live runner, a free one a job that
// may be resumed.
int runner::lock_job_dir() {
  auto fd = dir_->lock_runner();
  if (!fd) {
    spdlog::error("{} (stop it first: troupe stop --job-dir {})", fd.err().to_string(), dir_->path());
    return 1;
  }
  lock_fd_ = *fd;
  return 0;
}

// What a runner that died (SIGKILL, OOM, power) left of this job: nodes that outlived it and its
// instance's shared memory (rings, liveness beacons).
void runner::clean_dead_runner(const cluster::job_dir& dir) {
  if (auto old = dir.read_nodes()) {
    for (const auto& n : old->nodes)
      if (n.state != "exited") kill_orphan(n, clock_);
    resume_ids(*old);
  }
  if (auto old = dir.read_instance(); !old.empty()) {
    collective::remove_job_leftovers(collective::instance_key(dir.job_id(), old));
    spdlog::info("removed what instance {} of job {} left in shared memory", old, dir.job_id());
  }
  // Nodes on a batch cluster outlive their runner (no death signal reaches them): cancel them.
  auto n = cluster::cancel_leftovers(spec_.cluster, launch_site_of(dir));
  if (!n)
    spdlog::warn("could not cancel the Slurm jobs the dead runner left: {}", n.err().to_string());
  else if (*n > 0)
    spdlog::info("cancelled {} Slurm job(s) the dead runner left", *n);
}

// A resumed job uses new ids: every node's incarnation continues after the dead runner's, and
// workers take indices after the highest it used.
void runner::resume_ids(const cluster::nodes_file& old) {
  for (const auto& n : old.nodes) {
    auto& inc = resumed_incarnations_[n.id.name];
    inc = std::max(inc, n.id.incarnation + 1);
    if (n.role == cluster::node_role::worker) {
      auto dash = n.id.name.rfind('-');
      auto index = dash == std::string::npos ? 0 : std::strtoull(n.id.name.c_str() + dash + 1, nullptr, 10);
      next_worker_index_ = std::max<std::size_t>(next_worker_index_, index + 1);
    }
  }
}

std::uint64_t runner::first_incarnation(const std::string& name) const {
  auto it = resumed_incarnations_.find(name);
  return it == resumed_incarnations_.end() ? 0 : it->second;
}

namespace {
// A job id whose directory would be (or hold) the dataset cache, or the cache's default name: the
// job's files would land among the cached datasets (and a cache cleanup would take the job).
expected<void> check_job_id(const std::string& id, const job::job_spec& spec) {
  namespace fs = std::filesystem;
  auto norm = [](const fs::path& p) {
    std::error_code ec;
    auto n = fs::weakly_canonical(fs::absolute(p, ec), ec).lexically_normal();
    return n.has_filename() ? n : n.parent_path();
  };
  const auto job = norm(fs::path(spec.job.root) / id), cache = norm(spec.job.dataset_cache);
  const auto [c, j] = std::mismatch(cache.begin(), cache.end(), job.begin(), job.end());
  if (id == "datasets" || c == cache.end() || j == job.end())
    return make_unexpected(core_errc::invalid_argument,
                           "job id '" + id + "': reserved (" + (fs::path(spec.job.root) / id).string() +
                               " is, holds or lies in the dataset cache " + spec.job.dataset_cache + ")");
  return {};
}
}  // namespace

int runner::open_job_dir(const config_doc& doc) {
  if (!opt_.resume.empty()) {
    auto dir = cluster::job_dir::open(opt_.resume);
    if (!dir) return spdlog::error("--resume: {}", dir.err().to_string()), 2;
    std::ifstream in(dir->result_path());
    auto result = nlohmann::json::parse(in, nullptr, false);
    if (result.is_object() && result.value("status", "") == "finished") {
      spdlog::error("--resume {}: the job finished (see {}): nothing to resume", dir->path(),
                    dir->result_path());
      return 2;
    }
    dir_.emplace(std::move(*dir));
  } else {
    std::string id = opt_.job_id.empty() ? default_job_id(spec_.job.name) : opt_.job_id;
    if (auto c = check_job_id(id, spec_); !c) return spdlog::error("{}", c.err().to_string()), 2;
    // The nodes read the job directory's copy: a module path relative to the job file would be
    // relative to that copy, so the resolved (absolute) path goes in.
    config_doc stored = doc;
    for (const auto& [key, value] :
         {std::pair{"model.path", &spec_.nn.model.path}, std::pair{"model.init", &spec_.nn.model.init}})
      if (!value->empty())
        if (auto o = stored.apply_override(std::string(key) + "=\"" + *value + "\""); !o)
          return spdlog::error("{}", o.err().to_string()), 2;
    auto dir = cluster::job_dir::create(spec_.job.root, id, stored.to_toml());
    if (!dir) {
      // A bad or taken --job-id is bad usage (exit 2); a directory that cannot be made is not.
      const bool taken = dir.err() == cluster::cluster_errc::already_exists;
      spdlog::error("{}{}", dir.err().to_string(),
                    taken ? " (continue it with: troupe run --resume " + spec_.job.root + "/" + id + ")"
                          : std::string());
      return taken || dir.err() == cluster::cluster_errc::invalid_spec ? 2 : 1;
    }
    dir_.emplace(std::move(*dir));
  }
  if (int rc = lock_job_dir(); rc != 0) return rc;
  start_log();
  timeline_.open(dir_->path());
  if (!opt_.resume.empty()) {
    spdlog::info("resuming job {} in {}", dir_->job_id(), dir_->path());
    clean_dead_runner(*dir_);
    std::error_code ec;
    std::filesystem::remove(dir_->result_path(), ec);  // the resumed run writes its own
  }
  instance_ = random_hex(4);
  if (auto w = dir_->write_instance(instance_); !w) return spdlog::error("{}", w.err().to_string()), 1;
  return 0;
}

// The runner's log goes to logs/runner.log as well as stderr, at the level the CLI set.
void runner::start_log() {
  log_config lc;
  lc.level = std::string(spdlog::level::to_string_view(spdlog::get_level()).data());
  lc.file = dir_->logs_dir() + "/runner.log";
  lc.name = "runner";
  if (auto r = init_logging(lc); !r) spdlog::warn("{}", r.err().to_string());
}

int runner::prepare_data() {
  setup_step_ = "preparing the data";
  auto running = std::make_shared<std::atomic<bool>>(true);
  auto task = std::make_shared<std::packaged_task<expected<job::prepared_data>()>>(
      [c = spec_.nn.data, cache = spec_.job.dataset_cache] { return job::prepare_datasets(c, cache); });
  auto done = task->get_future();
  std::thread([task, running] {
    (*task)();
    *running = false;
  }).detach();
  while (done.wait_for(std::chrono::milliseconds(20)) != std::future_status::ready)
    if (int sig = interrupted_by(); sig != 0) {
      prepare_running_ = running;
      return 128 + sig;
    }
  auto data = done.get();
  if (!data) return setup_failed(data.err(), 1);
  data_ = *data;
  return 0;
}

int runner::setup() {
  setup_step_ = "reading the job file";
  config_doc doc;
  if (int rc = read_config(doc); rc != 0) return rc;
  setup_step_ = "creating the job directory";
  if (int rc = open_job_dir(doc); rc != 0) return rc;
  std::string token;
  if (!opt_.resume.empty()) {
    auto t = wire::read_job_token(dir_->path());
    if (!t) return setup_failed(t.err(), 1);
    token = *t;
  } else {
    token = random_hex(32);
    std::ofstream(dir_->path() + "/token") << token << "\n";
    ::chmod((dir_->path() + "/token").c_str(), 0600);
  }
  if (int rc = prepare_data(); rc != 0) return rc;
  setup_step_ = "checking the model";
  if (int rc = check_model(); rc != 0) return rc;

  // Where the runner and the master listen: loopback for local nodes, addresses the cluster's
  // hosts reach for Slurm's (a broken Slurm set-up is found here first).
  auto plan = cluster::plan_control(spec_.cluster);
  if (!plan) return setup_failed(plan.err(), launcher_exit_code(plan.err()));
  plan_ = *plan;
  auto cfg = spec_.transport;
  cfg.token = token;
  auto net = endpoint::create(node_id{"runner", 0}, cfg);
  if (!net) return setup_failed(net.err(), 1);
  net_ = std::move(*net);
  auto bound = net_->listen(plan_.runner_host, 0);
  if (!bound) return setup_failed(bound.err(), 1);
  self_addr_ = *bound;
  if (auto r = net_->register_name("runner", [this](const message& m) { on_message(m); }); !r) return 1;
  auto rpc = wire::rpc_client::create(*net_, "rpc", clock_);
  if (!rpc) return 1;
  rpc_ = std::move(*rpc);
  auto port = free_port();
  if (!port) return setup_failed(port.err(), 1);
  master_addr_ = plan_.master_host + ":" + std::to_string(*port);

  auto l = cluster::make_launcher(
      spec_.cluster,
      [this](const cluster::node_handle& h, const cluster::exit_status& s) {
        std::lock_guard lk(mu_);
        exits_.emplace_back(h, s);
        wake_.notify_one();
      },
      launch_site_of(*dir_), clock_);
  if (!l) return setup_failed(l.err(), launcher_exit_code(l.err()));
  launcher_ = std::move(*l);
  return 0;
}

}  // namespace troupe::control
