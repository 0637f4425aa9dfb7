#include "troupe/actors/node.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <malloc.h>
#include <poll.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>

#include <spdlog/spdlog.h>
#include <caf/all.hpp>

#include "caf_types.hpp"
#include "node_runtime.hpp"
#include "roles.hpp"
#include "troupe/cluster/addresses.hpp"
#include "troupe/cluster/job_dir.hpp"
#include "troupe/cluster/start_failure.hpp"
#include "troupe/collective/cleanup.hpp"
#include "troupe/core/clock.hpp"
#include "troupe/job/job_file.hpp"
#include "troupe/observe/timeline.hpp"
#include "troupe/supervision/node_root.hpp"
#include "troupe/wire/messages.hpp"

namespace troupe::actors {

namespace {

// SIGTERM/SIGINT wake the main thread at once through a pipe (a node leaving on preemption
// has milliseconds to matter, not a polling period).
int stop_pipe[2] = {-1, -1};
void on_signal(int) {
  if (stop_pipe[1] >= 0) (void)!::write(stop_pipe[1], "x", 1);
}

// A node's log (its stderr, which the launcher appends to <job dir>/logs/<node>.log) on a full or
// failing disk: its lines are lost without an error anywhere. Checked once a second; the fault is
// told to the master like a PS checkpoint's (it pauses the job and names it), and is over once the
// log's filesystem has room again.
struct log_watch {
  std::string path;
  std::string fault;
  troupe::clock::time_point next{};

  void check(node_runtime* r, troupe::clock::time_point now) {
    if (now < next) return;
    next = now + std::chrono::seconds(1);
    std::fflush(stderr);
    bool failed = std::ferror(stderr) != 0;
    std::clearerr(stderr);
    struct statvfs v {};
    auto dir = std::filesystem::path(path).parent_path();
    bool full = ::statvfs(dir.c_str(), &v) == 0 && v.f_bavail * v.f_frsize < (1u << 20);
    std::string f = fault;
    if (failed)
      f = std::string(full ? "no space left on device: " : "input/output error: ") + path + " (log write)";
    else if (!full)
      f.clear();
    if (f.empty() && fault.empty()) return;
    fault = f;
    if (auto s = r->send("master", "master", wire::disk_fault("log", fault), "node"); !s)
      spdlog::debug("log fault report: {}", s.err().to_string());
  }
};

// A node started by hand stops when its job is over: the runner wrote result.json after the node
// started (checked once a second; the job directory is shared, as it must be for such a node).
struct job_end_watch {
  std::string result;
  std::filesystem::file_time_type started = std::filesystem::file_time_type::clock::now();
  troupe::clock::time_point next{};

  void check(troupe::clock::time_point now) {
    if (result.empty() || now < next) return;
    next = now + std::chrono::seconds(1);
    std::error_code ec;
    auto t = std::filesystem::last_write_time(result, ec);
    if (ec || t < started) return;
    spdlog::info("the job is over ({} written)", result);
    result.clear();
    on_signal(SIGTERM);
  }
};

// A node the runner started ends itself when the runner's heartbeat (<job dir>/runner.beat,
// rewritten every second: runner_beat.hpp) has not changed for [cluster] runner_timeout_s: a runner
// killed with SIGKILL leaves no node running where PR_SET_PDEATHSIG cannot reach (Slurm jobs, other
// hosts). The file's content is compared, not its time (hosts' clocks and NFS attribute caches
// differ); the watch is armed by the first beat it reads. Checked once a second.
struct runner_watch {
  std::string path;
  troupe::clock::duration timeout{};
  std::string last;
  std::optional<troupe::clock::time_point> heard;  // when the beat last changed
  troupe::clock::time_point next{};

  void check(troupe::clock::time_point now) {
    if (path.empty() || now < next) return;
    next = now + std::chrono::seconds(1);
    std::ifstream in(path);
    std::string beat;
    if (in) std::getline(in, beat);
    if (!beat.empty() && beat != last) {
      last = beat;
      heard = now;
      return;
    }
    if (!heard || now - *heard < timeout) return;
    spdlog::error(
        "the runner's heartbeat ({}) has not changed for {:.0f} s: the runner is gone; stopping "
        "(continue the job with: troupe run --resume {})",
        path, std::chrono::duration<double>(now - *heard).count(),
        std::filesystem::path(path).parent_path().string());
    path.clear();
    on_signal(SIGTERM);
  }
};

// Where the node listens: --advertise's address on --listen's port, else --listen ("@host:0":
// this host's address). Errors name the flag.
expected<std::string> listen_address(const node_options& o) {
  if (o.advertise.empty()) return cluster::resolve_listen(o.listen);
  in_addr a{};
  if (::inet_pton(AF_INET, o.advertise.c_str(), &a) != 1)
    return make_unexpected(core_errc::invalid_argument,
                           "--advertise '" + o.advertise + "': expected this host's IPv4 address");
  auto colon = o.listen.rfind(':');
  return o.advertise + (colon == std::string::npos ? ":0" : o.listen.substr(colon));
}

// Joins the master at --join, dialling for up to --connect-timeout; the error names both.
bool join(node_runtime* r, const node_options& o, const node_id& id) {
  auto timeout = std::chrono::milliseconds(static_cast<std::int64_t>(o.connect_timeout_s * 1000));
  if (auto j = r->join_master(o.join, timeout); !j) {
    spdlog::error("{}: cannot reach the master at --join {} within {} s: {}", id.to_string(), o.join,
                  o.connect_timeout_s, j.err().to_string());
    return false;
  }
  return true;
}

// Blocks until a stop signal or the root supervisor's exit; true on a signal. `tick` runs about
// every 20 ms meanwhile.
bool wait_for_stop(const supervision::node_root& root, const std::function<void()>& tick) {
  pollfd p{stop_pipe[0], POLLIN, 0};
  while (!root.terminated()) {
    if (::poll(&p, 1, 20) > 0) return true;
    tick();
  }
  return false;
}

void install_stop_signals() {
  if (::pipe2(stop_pipe, O_CLOEXEC | O_NONBLOCK) != 0) spdlog::warn("stop pipe: {}", std::strerror(errno));
  std::signal(SIGTERM, on_signal);
  std::signal(SIGINT, on_signal);
}

// A worker leaving on SIGTERM stops training, hands back the task it trains with the rows it
// trained (its loop: hand_back_on_leave, within leave_hand_back_bound: node_context.hpp; past it the
// master re-queues the task whole), then
// tells the master and waits (briefly) for the view without it: its leases are back in TODO and its
// ring rebuilt before the process even starts to shut down.
void leave_job(node_runtime* r) {
  if (!r->ready()) return;  // never joined: nothing to hand back, nobody's ring to rebuild
  auto t0 = r->clock().now();
  r->stop_training();
  if (!r->await_hand_back(leave_hand_back_bound))
    spdlog::warn("{}: the training loop did not hand its task back within {} ms: it goes back whole",
                 r->self().to_string(), leave_hand_back_bound.count());
  if (!r->leave("left on SIGTERM")) return;
  bool answered = r->await_left(std::chrono::milliseconds(1000));
  auto us = std::chrono::duration_cast<std::chrono::microseconds>(r->clock().now() - t0);
  if (answered)
    spdlog::info("{}: left the job ({} us to the master's answer)", r->self().to_string(), us.count());
  else
    spdlog::info("{}: leaving without the master's answer (it is gone, or 1 s passed)",
                 r->self().to_string());
}

supervision::child_spec child(const std::string& name,
                              std::function<caf::actor(caf::actor_system&, std::uint32_t)> f) {
  supervision::child_spec c;
  c.name = name;
  c.start = [f](supervision::spawn_context& ctx) { return f(ctx.system, ctx.restarts); };
  c.restart = supervision::restart_type::permanent;
  c.shutdown = std::chrono::milliseconds(3000);
  return c;
}

std::vector<supervision::child_spec> children_of(node_runtime* rt, const node_options& o,
                                                 cluster::node_role role) {
  data_paths data{o.train_dir, o.test_dir};
  std::vector<supervision::child_spec> kids;
  switch (role) {
    case cluster::node_role::master:
      kids.push_back(child("dispenser", [rt, data](caf::actor_system& s, std::uint32_t) {
        return spawn_dispenser(s, *rt, data);
      }));
      kids.push_back(child("records", [rt, data](caf::actor_system& s, std::uint32_t) {
        return spawn_record_server(s, *rt, data);
      }));
      kids.push_back(child("master", [rt](caf::actor_system& s, std::uint32_t n) {
        return spawn_master(s, *rt, rt->names(), n);
      }));
      break;
    case cluster::node_role::ps:
      kids.push_back(child(
          "ps", [rt, data](caf::actor_system& s, std::uint32_t) { return spawn_ps_shard(s, *rt, data); }));
      break;
    default:
      kids.push_back(child(
          "worker", [rt, data](caf::actor_system& s, std::uint32_t) { return spawn_worker(s, *rt, data); }));
      break;
  }
  return kids;
}

}  // namespace

namespace {

// The node's identity from its flags and job directory; logging set up under its name.
node_runtime::identity identify(const node_options& o, cluster::node_role role, const job::job_spec& spec) {
  node_runtime::identity who;
  who.role = role;
  who.index = o.index;
  who.slot = o.slot >= 0 ? static_cast<std::size_t>(o.slot) : o.index;
  who.id = {role == cluster::node_role::master ? "master" : cluster::node_name(role, o.index), o.incarnation};
  who.job_dir = o.job_dir;
  auto dir = cluster::job_dir::open(o.job_dir);
  who.job_id = dir ? dir->job_id() : "job";
  who.host_key = collective::instance_key(who.job_id, dir ? dir->read_instance() : std::string());
  log_config lc = spec.log;
  lc.name = who.id.to_string();
  lc.job = who.job_id;
  (void)init_logging(lc);
  return who;
}

// Bridges the role's actors to the transport; the master also hears of peers going down.
bool wire_up(node_runtime* r, const node_options& o, cluster::node_role role) {
  for (const auto& k : children_of(r, o, role))
    if (auto b = r->bridge(k.name); !b) {
      spdlog::error("{}", b.err().to_string());
      return false;
    }
  if (role == cluster::node_role::master) {
    r->on_peer_down([r](const peer_event& e) {
      if (auto a = r->names().get("master"))
        caf::anon_send(a, peer_down_atom::value, e.node.name, e.node.incarnation, e.reason);
    });
  }
  return true;
}

// A worker's liveness beacon: ring partners notice this process's death before its teardown ends.
std::unique_ptr<collective::liveness::beacon> start_beacon(node_runtime* r, const node_id& id) {
  auto b = r->liveness().start(id);
  if (b) return std::move(*b);
  spdlog::warn("liveness beacon: {} (partners fall back to the pid)", b.err().to_string());
  return nullptr;
}

// Joins the job (a worker first defers its join and starts its liveness beacon). A node that never
// joined has nothing to hand back; an actor may still be blocked asking the same unreachable master
// (a served-records manifest), so the process ends here rather than tearing the runtime down under it,
// and without waiting for its actors (the worker's waited out the supervisor's 3 s, then was killed
// with a warning: a node given --connect-timeout 3 ended after 6 s).
void join_or_exit(node_runtime* r, const node_options& o, const node_id& id, cluster::node_role role,
                  std::unique_ptr<collective::liveness::beacon>& beacon) {
  if (role == cluster::node_role::worker) {
    r->defer_join();
    beacon = start_beacon(r, id);
  }
  if (join(r, o, id)) return;
  beacon.reset();
  std::fflush(nullptr);
  std::_Exit(cluster::exit_join_failed);  // the runner counts it as an end before the node joined
}

// A started node's life: its role actors under the root supervisor, its join (not the master's),
// its log and job-end watches, until a stop signal or the supervisor's end; then the runtime goes
// (before the supervisor handle and the liveness beacon). The exit code.
int run_roles(std::unique_ptr<node_runtime>& rt, const node_options& o, cluster::node_role role) {
  node_runtime* r = rt.get();
  const auto who = r->who();
  observe::node_stats_reporter stats(o.job_dir, who.id.to_string());  // CPU and RSS on the timeline
  if (!wire_up(r, o, role)) return 1;
  supervision::supervisor_config sc;
  std::unique_ptr<collective::liveness::beacon> beacon;
  auto root = supervision::run_node_root(r->system(), r->names(), sc, children_of(r, o, role));
  if (role != cluster::node_role::master) join_or_exit(r, o, who.id, role, beacon);
  spdlog::info("{} ({}) up at {}", who.id.to_string(), o.role, r->address());
  log_watch logs;
  logs.path = o.job_dir + "/logs/" + who.id.name + ".log";
  job_end_watch end;
  if (o.by_hand) end.result = o.job_dir + "/result.json";
  runner_watch runner;
  if (const double t = r->spec().cluster.runner_timeout_s; !o.by_hand && t > 0) {
    runner.path = cluster::runner_beat_path(o.job_dir);
    runner.timeout = std::chrono::duration_cast<troupe::clock::duration>(std::chrono::duration<double>(t));
  }
  auto tick = [&] {
    auto now = r->clock().now();
    if (role != cluster::node_role::master) logs.check(r, now);  // the master's own: its journal pauses
    end.check(now);
    runner.check(now);
  };
  if (!wait_for_stop(root, tick)) {
    spdlog::critical("{}: root supervisor exited: {}", who.id.to_string(), root.exit_reason().value_or(""));
    return 1;
  }
  spdlog::info("{}: stopping", who.id.to_string());
  if (role == cluster::node_role::worker) leave_job(r);
  root.shutdown(std::chrono::seconds(5));
  rt.reset();
  return 0;
}

}  // namespace

int run_node(const node_options& o) {
  auto role = cluster::parse_role(o.role);
  if (!role) {
    spdlog::error("{}", role.err().to_string());
    return 2;
  }
  auto spec = job::load_job_spec(o.job_dir);
  if (!spec) {
    spdlog::error("{}", spec.err().to_string());
    return 2;
  }
  auto who = identify(o, *role, *spec);
  // The master's threads share one malloc arena, so that the trims after its broadcasts
  // (master_status.cpp trim_heap) can give back what a join storm freed; with an arena per thread
  // most of it stayed resident (docs/benchmarks.md, "The master's memory per worker, again"). The
  // master moves no bulk data.
  if (*role == cluster::node_role::master) ::mallopt(M_ARENA_MAX, 1);
  if (!o.standby_note.empty()) spdlog::info("{}: {}", who.id.to_string(), o.standby_note);
  install_stop_signals();  // before any thread starts: a SIGTERM during start-up is not lost
  auto listen = listen_address(o);
  if (!listen) {
    spdlog::error("{}", listen.err().to_string());
    return 2;
  }
  auto rt = node_runtime::start(*spec, who, *listen);
  if (!rt) {
    spdlog::error("{}: {}{}", who.id.to_string(),
                  o.advertise.empty() ? "" : "--advertise " + o.advertise + ": ", rt.err().to_string());
    return o.advertise.empty() ? 1 : 2;
  }
  return run_roles(*rt, o, *role);
}

}  // namespace troupe::actors
