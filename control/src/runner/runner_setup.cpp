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
#include <cstdio>
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
#include "troupe/model/model_dir.hpp"
#include "troupe/model/state.hpp"
#include "troupe/storage/record_store.hpp"
#include "troupe/storage/task_journal.hpp"
#include "troupe/transport/endpoint.hpp"
#include "troupe/wire/job_token.hpp"

namespace troupe::control {

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

}  // namespace

int usage_refusal(const std::string& text, int rc) {
  std::fprintf(stderr, "troupe: error: %s\n", text.c_str());
  return rc;
}

// Past the job directory's creation, a setup failure ends the job with its error as the reason (in
// the final JSON and result.json), not only in logs/runner.log.
// A job the runner refuses to start (exit 2), with the reason result.json gives.
int runner::refuse(const std::string& why) {
  spdlog::error("{}", why);
  outcome_.fail(why);
  return 2;
}

int runner::setup_failed(const error& e, int rc) {
  spdlog::error("{}", e.to_string());
  outcome_.fail(e.to_string());
  return rc;
}

runner::~runner() {
  if (lock_fd_ >= 0) ::close(lock_fd_);
}

// The model must build for the data, and ring strategies replicate dense parameters only.
int runner::check_model() {
  auto store = storage::record_store::open(data_.train_dir);
  if (!store) return setup_failed(store.err(), 1);
  // No task to make: the master's journal refused it and the master crash-looped (11 starts, 38 s).
  if (store->count() == 0)
    return setup_failed(
        error(core_errc::invalid_argument, data_.train_dir + ": the dataset holds no records: nothing to " +
                                               (spec_.traits().trains ? "train on" : "score")),
        2);
  // The rows' shape and encoding kept with the job: its model can be exported once its store is gone.
  if (spec_.traits().trains)
    if (auto w = job::write_train_manifest(dir_->path(), store->info()); !w)
      spdlog::warn("{} (an export of this job will need its training store)", w.err().to_string());
  auto info = job::info_of(store->info(), store->dir());
  auto tables = actors::check_model(spec_, info);
  if (!tables) return setup_failed(tables.err(), 2);
  if (auto f = job::check_model_fits_strategy(spec_, *tables); !f) return setup_failed(f.err(), 2);
  if (auto l = actors::check_last_task(spec_, info, store->count()); !l) return setup_failed(l.err(), 2);
  if (!opt_.resume.empty()) return check_resumed_state(info);  // a resumed job has its init/
  if (spec_.nn.model.init.empty()) return 0;
  return start_from_init(info);
}

// A resumed job's own state (its final state or ring checkpoint, its shards' checkpoints) checked
// against the model its job.toml builds now: one edited since ([model]) is refused before any node
// starts (the nodes skipped or failed to restore what no longer fit, and the job trained on from
// initial values and finished "ok").
int runner::check_resumed_state(const nn::dataset_info& info) {
  auto st = model::job_state(model::places_of(dir_->path(), spec_.ps.checkpoints_of(dir_->path()),
                                              spec_.uses_ps() ? spec_.ps.shards : 0));
  if (!st && st.err() == storage::storage_errc::not_found) return 0;  // nothing written yet: nothing to fit
  // A checkpoint that cannot be read (a checksum, a truncated file): its shard or worker died 11
  // times over it (40 s) before the job failed.
  if (!st)
    return setup_failed(
        error(st.err().code(), "--resume " + dir_->path() +
                                   ": the job's state cannot be read: " + st.err().to_string() +
                                   " (restore the checkpoint, or run a new job from an earlier "
                                   "export with [model] init)"),
        1);
  if (auto c = actors::check_init_state(spec_, info, st->state, false); !c) {
    return refuse(
        "--resume " + dir_->path() + ": the job's state in " + st->dir +
        " does not fit the model its job.toml builds now: " + c.err().to_string() +
        " (was [model] changed since it was written? put job.toml back as it was, or run a new job)");
  }
  return 0;
}

// [model] init: the state it names, checked against the model, into <job dir>/checkpoints/init,
// where every node of the job reads it (workers' replicas, PS shards without a checkpoint).
int runner::start_from_init(const nn::dataset_info& info) {
  const auto& from = spec_.nn.model.init;
  auto st = actors::load_init_state(spec_, info);
  if (!st) return setup_failed(st.err(), 2);
  if (spec_.nn.data.source == "store")
    if (auto e = model::check_init_encoding(from, spec_.nn.data.train_path); e && !e->empty())
      spdlog::warn("{}", *e);
  auto meta = st->meta;
  meta.from = "init";
  meta.writer = from;
  auto w = model::write_state(dir_->path() + "/checkpoints/init", st->state, meta);
  if (!w) return setup_failed(w.err(), 1);
  spdlog::info("the job starts from {} ({}: {} dense tensors, step {})", from, st->dir,
               st->state.dense.size(), st->meta.step);
  init_loaded_.emplace(st->dir, st->meta.step);
  return 0;
}

// The job file with --set overrides, or a resumed job's job.toml as its first runner resolved it.
int runner::read_config(config_doc& doc) {
  if (!opt_.resume.empty()) {
    auto dir = cluster::job_dir::open(opt_.resume);
    if (!dir) return usage_refusal("--resume " + dir.err().context());
    // A live runner refuses this one at the lock; said first (its /metrics port was warned of as
    // taken, by itself, before the refusal).
    if (auto pid = dir->runner_pid())
      return usage_refusal("job " + dir->job_id() + " is running: its runner (pid " + std::to_string(*pid) +
                               ") holds " + dir->lock_path() + " (stop it first: troupe stop --job-dir " +
                               dir->path() + ")",
                           1);
    auto text = dir->read_job_toml();
    if (!text) return usage_refusal("--resume: " + text.err().describe());
    auto d = config_doc::from_string(*text, dir->job_toml_path());
    if (!d) return usage_refusal(d.err().describe());
    doc = std::move(*d);
  } else {
    auto d = job::read_job_file(opt_.file, opt_.overrides);
    if (!d) return usage_refusal(d.err().describe());
    doc = std::move(*d);
  }
  if (opt_.workers)
    if (auto w = doc.apply_override("job.workers=" + std::to_string(*opt_.workers),
                                    "--workers " + std::to_string(*opt_.workers));
        !w)
      return usage_refusal(w.err().describe());
  auto spec = job::job_spec::read(doc);
  if (!spec) return usage_refusal(spec.err().describe());
  spec_ = std::move(*spec);
  return apply_spec(doc);
}

void make_absolute(std::string& path) {
  std::error_code ec;
  if (auto abs = std::filesystem::absolute(path, ec); !ec) path = abs.lexically_normal().string();
}

// The job's spec, read: checked, and the parts of the runner set from it.
int runner::apply_spec(config_doc& doc) {
  // What `troupe config check` checks too (strategy, model, data paths): exit 2 before a job dir.
  // A new job's [model] init too (a resumed one has its copy in checkpoints/init).
  if (auto c = job::check_job(spec_, actors::strategy_names(),
                              opt_.resume.empty() ? actors::check_model_and_init : actors::check_model);
      !c)
    return usage_refusal((!opt_.resume.empty()     ? opt_.resume
                          : opt_.file_name.empty() ? opt_.file
                                                   : opt_.file_name) +
                         ": " + c.err().describe());
  if (auto g = check_gpu(spec_); !g) return usage_refusal(g.err().describe());
  for (auto& n : job::job_notes(spec_)) setup_warnings_.push_back(std::move(n));
  // The nodes get absolute paths (job directory, stores): a node on another host runs where its host
  // command puts it (ssh, nsenter), not in the runner's working directory.
  for (auto* p : {&spec_.job.root, &spec_.job.dataset_cache}) make_absolute(*p);
  slots_.set_policy(runner_slot_policy(spec_));
  slots_.set_target(spec_.job.workers);
  watch_.set_limits(runner_watch_limits(spec_));
  auto metrics = pin_metrics_address(doc, spec_);
  if (!metrics && opt_.resume.empty()) return usage_refusal(metrics.err().describe());
  // A resumed job's port was pinned by its first run (or its file): taken since, this run serves no
  // /metrics, and nodes.json names none (it named the other job's).
  if (!metrics)
    setup_warnings_.push_back(metrics.err().to_string() + ": this run of the job serves no /metrics");
  metrics_addr_ = metrics ? *metrics : std::string();
  return 0;
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
  // The import's end is the event waited for; each wait lasts 20 ms at most, the bound on noticing a
  // signal (its handler cannot notify).
  while (done.wait_for(std::chrono::milliseconds(20)) != std::future_status::ready)
    if (int sig = interrupted_by(); sig != 0) {
      prepare_running_ = running;
      return 128 + sig;
    } else if (stop_asked_in_setup()) {
      prepare_running_ = running;
      return 3;
    }
  auto data = done.get();
  if (!data) return setup_failed(data.err(), 1);
  data_ = *data;
  for (auto* p : {&data_.train_dir, &data_.test_dir})  // a store the job file names may be relative
    if (!p->empty()) make_absolute(*p);
  return 0;
}

// `troupe stop` of a job that has not started its nodes (no nodes.json to reach the runner by): its
// request file, looked for while the data is prepared and once more after.
bool runner::stop_asked_in_setup() {
  std::error_code ec;
  if (!dir_ || !std::filesystem::exists(cluster::stop_request_path(dir_->path()), ec)) return false;
  outcome_.stop_requested("troupe stop, while the job was " + setup_step_);
  return true;
}

int runner::setup() {
  setup_step_ = "reading the job file";
  config_doc doc;
  if (int rc = read_config(doc); rc != 0) return rc;
  setup_step_ = "creating the job directory";
  if (int rc = open_job_dir(doc); rc != 0) return rc;
  std::string token;
  if (int rc = write_token(token); rc != 0) return rc;
  if (int rc = prepare_data(); rc != 0) return rc;
  if (stop_asked_in_setup()) return 3;
  if (int rc = check_journal_matches(); rc != 0) return rc;
  setup_step_ = "checking the model";
  if (int rc = check_model(); rc != 0) return rc;
  if (int rc = begin_resumed_run(); rc != 0) return rc;
  if (int rc = start_transport(token); rc != 0) return rc;
  return start_launcher();
}

// The job's token: a new job's, written owner-only, or a resumed job's, read.
int runner::write_token(std::string& token) {
  if (!opt_.resume.empty()) {
    auto t = wire::read_job_token(dir_->path());
    if (!t) return setup_failed(t.err(), 1);
    token = *t;
    return 0;
  }
  token = random_hex(32);
  // Owner-only from its creation: written, then chmod-ed, it was readable by every user for a
  // moment, and a user watching the jobs root took it (and with it, control of the job).
  if (auto w = cluster::write_file_atomic(dir_->path() + "/token", token + "\n", 0600); !w)
    return setup_failed(w.err(), 1);
  return 0;
}

// Where the runner and the master listen: loopback for local nodes, addresses the cluster's hosts
// reach for Slurm's (a broken Slurm set-up is found here first). The runner's name answers status,
// scale and stop.
int runner::start_transport(const std::string& token) {
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
  if (metrics_addr_.rfind(':', 0) == 0) metrics_addr_.insert(0, plan_.master_host);  // the master's host
  return 0;
}

// The launcher; its exit reports go to the loop's event queue, the slot table launches through it.
int runner::start_launcher() {
  auto l = cluster::make_launcher(
      spec_.cluster,
      [this](const cluster::node_handle& h, const cluster::exit_status& s) {
        events_.push(node_exit_event{h, s});
      },
      launch_site_of(*dir_), clock_);
  if (!l) return setup_failed(l.err(), launcher_exit_code(l.err()));
  launcher_ = std::move(*l);
  placer_ = launcher_.get();
  // A worker_host the launcher cannot place workers on is the job file's error, before any node.
  if (const auto& h = spec_.cluster.worker_host; !h.empty())
    if (auto ok = launcher_->check_host(h); !ok)
      return setup_failed(error(ok.err().code(), "cluster.worker_host: " + ok.err().context()),
                          launcher_exit_code(ok.err()));
  slot_hooks hooks;
  hooks.spec_of = [this](const node_slot& slot, bool spare) { return spec_of(slot, spare); };
  hooks.launched = [this](node_slot& slot) { launched(slot); };
  slots_.bind(*launcher_, std::move(hooks));
  publish_status();
  return 0;
}

}  // namespace troupe::control
