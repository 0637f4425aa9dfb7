#include "runner.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <random>
#include <thread>

#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include "data_model.hpp"
#include "troupe/actors/strategy.hpp"
#include "troupe/cluster/config.hpp"
#include "troupe/cluster/errc.hpp"
#include "troupe/collective/cleanup.hpp"
#include "troupe/gpu/cuda.hpp"

namespace troupe::control {

namespace {
volatile std::sig_atomic_t interrupted = 0;
void on_signal(int) {
  interrupted = 1;
}

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

std::string default_job_id(const std::string& name) {
  std::time_t t = std::time(nullptr);
  char when[32];
  std::strftime(when, sizeof when, "%Y%m%d-%H%M%S", std::localtime(&t));
  return name + "-" + when + "-" + random_hex(2);
}

// A free loopback port for the master, fixed for the job so a relaunched master is found again.
expected<std::uint16_t> free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return make_unexpected(core_errc::io_error, "socket for a free port");
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
            ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0;
  ::close(fd);
  if (!ok) return make_unexpected(core_errc::io_error, "no free loopback port");
  return ntohs(a.sin_port);
}

// [job] device = "gpu" needs a device here (the local launcher starts every worker on this host).
expected<void> check_gpu(const job_spec& spec) {
  if (!spec.uses_gpu()) return {};
  auto n = gpu::device_count();
  if (!n) return std::move(n).err().wrap("[job] device = \"gpu\", but this host cannot run GPU workers");
  auto all = gpu::describe_all();
  spdlog::info("GPU workers on: {}", all ? *all : std::to_string(*n) + " device(s)");
  return {};
}

}  // namespace

// The model must build for the data, and ring strategies replicate dense parameters only.
int runner::check_model() {
  auto store = storage::record_store::open(data_.train_dir);
  if (!store) return spdlog::error("{}", store.err().to_string()), 1;
  auto m = build_model(spec_, *store);
  if (!m) return spdlog::error("{}", m.err().to_string()), 2;
  if (!spec_.uses_ps() && !(*m)->embedding_tables().empty()) {
    spdlog::error(
        "strategy '{}' replicates dense parameters only; model '{}' has embedding tables: use "
        "[job] strategy = \"async_ps\"",
        spec_.job.strategy, spec_.nn.model.type);
    return 2;
  }
  return 0;
}

int runner::setup() {
  auto doc = config_doc::from_file(opt_.file);
  if (!doc) return spdlog::error("{}", doc.err().to_string()), 2;
  for (const auto& o : opt_.overrides)
    if (auto r = doc->apply_override(o); !r) return spdlog::error("{}", r.err().to_string()), 2;
  if (opt_.workers && !doc->apply_override("job.workers=" + std::to_string(*opt_.workers))) return 2;
  auto spec = job_spec::read(*doc);
  if (!spec) return spdlog::error("{}", spec.err().to_string()), 2;
  spec_ = std::move(*spec);
  if (auto s = make_strategy(spec_.job.strategy, spec_); !s)
    return spdlog::error("{}", s.err().to_string()), 2;
  if (auto g = check_gpu(spec_); !g) return spdlog::error("{}", g.err().to_string()), 2;
  target_workers_ = spec_.job.workers;

  std::string id = opt_.job_id.empty() ? default_job_id(spec_.job.name) : opt_.job_id;
  auto dir = cluster::job_dir::create(spec_.job.root, id, doc->to_toml());
  if (!dir) return spdlog::error("{}", dir.err().to_string()), 1;
  dir_.emplace(std::move(*dir));
  std::string token = random_hex(32);
  {
    std::ofstream(dir_->path() + "/token") << token << "\n";
    ::chmod((dir_->path() + "/token").c_str(), 0600);
  }
  auto data = actors::prepare_datasets(spec_.nn.data, spec_.job.dataset_cache);
  if (!data) return spdlog::error("{}", data.err().to_string()), 1;
  data_ = *data;
  if (int rc = check_model(); rc != 0) return rc;

  // Where the runner and the master listen: loopback for local nodes, addresses the cluster's
  // hosts reach for Slurm's (a broken Slurm set-up is found here first).
  auto plan = cluster::plan_control(spec_.cluster);
  if (!plan) return spdlog::error("{}", plan.err().to_string()), launcher_exit_code(plan.err());
  plan_ = *plan;
  auto cfg = spec_.transport;
  cfg.token = token;
  auto net = endpoint::create(node_id{"runner", 0}, cfg);
  if (!net) return spdlog::error("{}", net.err().to_string()), 1;
  net_ = std::move(*net);
  auto bound = net_->listen(plan_.runner_host, 0);
  if (!bound) return spdlog::error("{}", bound.err().to_string()), 1;
  self_addr_ = *bound;
  if (auto r = net_->register_name("runner", [this](const message& m) { on_message(m); }); !r) return 1;
  auto rpc = rpc_client::create(*net_, "rpc");
  if (!rpc) return 1;
  rpc_ = std::move(*rpc);
  auto port = free_port();
  if (!port) return spdlog::error("{}", port.err().to_string()), 1;
  master_addr_ = plan_.master_host + ":" + std::to_string(*port);

  auto l = cluster::make_launcher(spec_.cluster,
                                  [this](const cluster::node_handle& h, const cluster::exit_status& s) {
                                    std::lock_guard lk(mu_);
                                    exits_.emplace_back(h, s);
                                  },
                                  {dir_->job_id(), dir_->path() + "/slurm_jobs"});
  if (!l) return spdlog::error("{}", l.err().to_string()), launcher_exit_code(l.err());
  launcher_ = std::move(*l);
  return 0;
}

int runner::run() {
  started_ = steady::now();
  started_wall_ms_ = std::chrono::duration_cast<std::chrono::milliseconds>(
                         std::chrono::system_clock::now().time_since_epoch())
                         .count();
  if (int rc = setup(); rc != 0) return rc;
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  spdlog::info("job {} in {} ({} workers, strategy {}{})", dir_->job_id(), dir_->path(), target_workers_,
               spec_.job.strategy,
               spec_.uses_ps() ? ", " + std::to_string(spec_.ps.shards) + " PS shards" : "");
  node_slot master = new_slot({"master", 0}, cluster::node_role::master, 0);
  nodes_["master"] = master;
  if (auto r = launch(nodes_["master"]); !r) return spdlog::error("{}", r.err().to_string()), 1;
  // The master must be up before anyone joins it.
  auto deadline = steady::now() + std::chrono::seconds(20);
  while (!net_->connected("master")) {
    if (steady::now() > deadline) return spdlog::error("the master did not come up at {}", master_addr_), 1;
    handle_exits();
    if (!fatal_.empty()) return spdlog::error("{}", fatal_), 1;
    if (!net_->connect(master_addr_, true)) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (spec_.uses_ps())
    for (std::uint32_t i = 0; i < spec_.ps.shards; ++i) {
      auto name = cluster::node_name(cluster::node_role::ps, i);
      nodes_[name] = new_slot({name, 0}, cluster::node_role::ps, i);
      if (auto r = launch(nodes_[name]); !r) return spdlog::error("{}", r.err().to_string()), 1;
    }
  scale_to(target_workers_);
  write_nodes_file();
  int rc = loop();
  poll_status(true);
  shutdown_nodes();
  collective::remove_job_leftovers(dir_->job_id());
  print_progress(true);
  if (!result_json_.empty()) {
    // The runner adds what only it knows: wall time, node relaunches, the planted model's AUC.
    auto j = nlohmann::json::parse(result_json_, nullptr, false);
    if (!j.is_discarded()) {
      j["wall_seconds"] = std::chrono::duration<double>(steady::now() - started_).count();
      j["node_restarts"] = restarts_;
      j["runner_start_wall_ms"] = started_wall_ms_;
      // Worker clocks are this machine's clock (local launcher), so wall times compare.
      if (j.contains("first_step_wall_ms") && j["first_step_wall_ms"].is_number())
        j["first_step_seconds"] =
            static_cast<double>(j["first_step_wall_ms"].get<std::int64_t>() - started_wall_ms_) / 1000.0;
      if (data_.true_auc > 0) j["true_auc"] = data_.true_auc;
      result_json_ = j.dump();
    }
    std::printf("%s\n", result_json_.c_str());
  }
  std::fflush(stdout);
  return rc;
}

int runner::loop() {
  while (true) {
    handle_exits();
    {
      std::unique_lock lk(mu_);
      while (!scale_requests_.empty()) {
        auto n = scale_requests_.front();
        scale_requests_.pop_front();
        lk.unlock();
        scale_to(n);
        lk.lock();
      }
    }
    if (!fatal_.empty()) return spdlog::error("{}", fatal_), 1;
    if (finished_) return result_ok_ ? 0 : 1;
    if (stop_) return spdlog::warn("stopped on request"), 1;
    if (interrupted) return spdlog::warn("interrupted"), 130;
    poll_status();
    fence_dead_nodes();
    print_progress(false);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

void runner::shutdown_nodes() {
  for (auto& [name, slot] : nodes_) {
    slot.wanted = false;
    if (slot.handle) (void)launcher_->signal(*slot.handle, SIGTERM);
  }
  auto deadline = steady::now() + std::chrono::seconds(5);
  for (auto& [name, slot] : nodes_)
    if (slot.handle) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - steady::now());
      (void)launcher_->wait(*slot.handle, std::max(left, std::chrono::milliseconds(1)));
    }
  launcher_->kill_all();
  rpc_.reset();
  net_.reset();
  write_nodes_file();
}

int launcher_exit_code(const error& e) {
  return e == cluster::cluster_errc::invalid_spec ? 2 : 1;
}

int run_job(const run_options& o) {
  runner r(o);
  return r.run();
}

}  // namespace troupe::control
