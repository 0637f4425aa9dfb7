// The replicas' supervisor (frontend.hpp): launching the replicas of a generation, their exit
// reports and relaunches with backoff, their ReplicaReady and ReplicaFailed, stopping the drained
// ones and fencing the hung ones. A generation is one model version served by `replicas` processes;
// the swaps between generations are frontend_swaps.cpp's.
#include <signal.h>
#include <spdlog/spdlog.h>

#include <algorithm>

#include "frontend.hpp"
#include "troupe/cluster/process.hpp"
#include "troupe/cluster/start_failure.hpp"
#include "troupe/wire/rpc.hpp"

namespace troupe::serve {

std::string ms_text(clock::duration d) {
  return std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(d).count()) + " ms";
}

namespace {

// The last line of a replica's output (its error, usually).
std::string last_line(const std::string& text) {
  std::string t = text;
  while (!t.empty() && (t.back() == '\n' || t.back() == ' ')) t.pop_back();
  auto nl = t.rfind('\n');
  return nl == std::string::npos ? t : t.substr(nl + 1);
}

}  // namespace

frontend::generation* frontend::gen_of(const slot& s) {
  auto it = gens_.find(s.generation);
  return it == gens_.end() ? nullptr : &it->second;
}

std::string frontend::in_their_words(std::string text, std::uint32_t gen) {
  // A replica loads its generation's snapshot; people know the directory they asked for.
  auto it = gens_.find(gen);
  if (it == gens_.end()) return text;
  std::string snap = state_dir_ + "/models/" + std::to_string(gen);
  for (auto at = text.find(snap); at != std::string::npos;
       at = text.find(snap, at + it->second.info.dir.size()))
    text.replace(at, snap.size(), it->second.info.dir);
  return text;
}

frontend::slot* frontend::find_slot(const std::string& node) {
  auto it = slots_.find(node);
  return it == slots_.end() ? nullptr : &it->second;
}

std::vector<std::string> frontend::replica_argv(const slot& s, const std::string& version) const {
  std::vector<std::string> argv = {"troupe",
                                   "serve-replica",
                                   "--connect",
                                   control_address_,
                                   "--name",
                                   s.node,
                                   "--incarnation",
                                   std::to_string(s.incarnation),
                                   "--generation",
                                   std::to_string(s.generation),
                                   "--model",
                                   state_dir_ + "/models/" + std::to_string(s.generation),
                                   "--version",
                                   version,
                                   "--threads",
                                   std::to_string(cfg_.threads),
                                   "--device",
                                   cfg_.device,
                                   "--max-batch",
                                   std::to_string(cfg_.max_batch),
                                   "--warmup",
                                   std::to_string(cfg_.warmup),
                                   "--token-file",
                                   state_dir_ + "/token",
                                   "--heartbeat-ms",
                                   std::to_string(settings_.transport.heartbeat_interval.count()),
                                   "--heartbeat-timeout-ms",
                                   std::to_string(settings_.transport.heartbeat_timeout.count())};
  if (cfg_.pin_cpus) {
    // Slot i takes cores [i * threads, (i + 1) * threads).
    std::string cpus;
    for (int t = 0; t < cfg_.threads; ++t) {
      if (t) cpus += ',';
      cpus += std::to_string(static_cast<int>(s.index) * cfg_.threads + t);
    }
    argv.insert(argv.end(), {"--cpus", cpus});
  }
  return argv;
}

expected<void> frontend::launch(slot& s, const std::string& version) {
  cluster::node_spec spec;
  spec.id = node_id{s.node, s.incarnation};
  spec.argv = replica_argv(s, version);
  spec.log_file = state_dir_ + "/logs/" + s.node + ".log";
  spec.env = {{"TROUPE_NODE", spec.id.to_string()}};
  // Slurm sizes each replica's job by it; the local launcher needs no reservation (a swap runs two
  // generations at once for a moment).
  if (settings_.cluster.launcher == "slurm") spec.need.cpus = cfg_.threads;
  spec.avoid = s.avoid;
  auto h = launcher_->launch(spec);
  if (!h) return h.err();
  s.handle = *h;
  return {};
}

std::optional<std::string> frontend::begin_launch(const std::string& node, slot& copy) {
  std::lock_guard lk(mu_);
  slot* s = find_slot(node);
  generation* g = s ? gen_of(*s) : nullptr;
  if (!g || s->retired) return std::nullopt;
  s->relaunch_at.reset();
  if (s->launched != clock::time_point{}) ++s->incarnation;
  s->launched = clock_.now();
  s->ready = false;
  s->peer_host.clear();
  core_->add_replica(s->node, s->incarnation, s->generation, s->index);
  s->avoid = cut_off_.at(s->launched);
  copy = *s;
  return g->info.version();
}

void frontend::end_launch(const std::string& node, const slot& copy, const expected<void>& launched) {
  std::lock_guard lk(mu_);
  slot* s = find_slot(node);
  if (!s) return;
  if (launched) {
    s->handle = copy.handle;
    const std::string host = launcher_->host_of(*copy.handle);
    spdlog::info("serve: {} launched ({} {}{})", node_id{s->node, s->incarnation}.to_string(),
                 settings_.cluster.launcher == "slurm" ? "Slurm job" : "pid", copy.handle->pid,
                 host.empty() ? "" : " on host " + host);
    return;
  }
  spdlog::error("serve: cannot launch {}: {}", node, launched.err().to_string());
  s->last_exit = launched.err().to_string();
  generation* g = gen_of(*s);
  if (!g) return;
  if (g->state == gen_state::staging) {
    if (g->failure.empty()) g->failure = node + " could not be launched: " + launched.err().to_string();
  } else {
    s->relaunch_at = clock_.now() + std::chrono::seconds(1);
  }
}

void frontend::launch_due() {
  std::vector<std::string> nodes;
  auto now = clock_.now();
  {
    std::lock_guard lk(mu_);
    if (stopping_) return;
    for (auto& [name, s] : slots_)
      if (!s.handle && !s.retired && s.relaunch_at && *s.relaunch_at <= now) nodes.push_back(name);
  }
  for (const auto& node : nodes) {
    // Only this thread adds or removes slots: the slot stays; its fields are written under mu_.
    // The launch itself runs without the lock, on a copy.
    slot copy;
    auto version = begin_launch(node, copy);
    if (!version) continue;
    end_launch(node, copy, launch(copy, *version));
  }
}

void frontend::on_exit(const cluster::node_handle& h, const cluster::exit_status& st) {
  std::lock_guard lk(mu_);
  exits_.emplace_back(h, st);
  wake_.notify_all();
}

void frontend::handle_exits() {
  std::deque<std::pair<cluster::node_handle, cluster::exit_status>> exits;
  {
    std::lock_guard lk(mu_);
    exits.swap(exits_);
  }
  for (auto& [h, st] : exits) {
    core_->replica_gone(h.id.name, h.id.incarnation);
    std::lock_guard lk(mu_);
    handle_exit(h, st);
  }
}

void frontend::handle_exit(const cluster::node_handle& h, const cluster::exit_status& st) {
  slot* s = find_slot(h.id.name);
  if (!s || !s->handle || s->handle->serial != h.serial) return;
  s->handle.reset();
  s->last_exit = st.to_string();
  generation* g = gen_of(*s);
  // Who ended it, and its own last word labelled as such: "killed by SIGKILL: <its ready line>" read
  // as if the ready line were the cause.
  std::string why = h.id.to_string() + " " + st.to_string();
  const bool fenced = !s->fenced_for.empty();
  if (fenced) why += " (fenced by the server: " + std::exchange(s->fenced_for, {}) + ")";
  if (!st.success() && !s->retired) {
    if (auto error = cluster::last_logged_error(st); !error.empty())
      why += "; its last error: " + in_their_words(error, s->generation);
    else if (auto line = last_line(st.trace.output); !line.empty())
      why += "; its last log line: " + in_their_words(line, s->generation);
  }
  if (s->retired || !g || g->state == gen_state::draining) {
    spdlog::info("serve: {} (generation {}, stopped)", why, s->generation);
    slots_.erase(h.id.name);
    return;
  }
  const bool cut = note_cut_off(*s, h, st, fenced);
  if (g->state == gen_state::staging) {
    // Killed while it loads (the OOM killer, an operator), it is launched again within the
    // generation's load deadline, twice at most: one such death refused the whole swap, and under
    // --watch that model for good. So is one whose host could not reach the front end (the server
    // failed to start): it goes to another host. A model that cannot load says so itself (on_failed).
    const bool killed = st.signal == SIGKILL || st.signal == SIGTERM || st.signal == SIGINT;  // not a crash
    if ((killed || cut) && g->failure.empty() && s->failures < 2 && !stopping_) {
      schedule_relaunch(*s, why + (cut ? "; its host is cut off" : " while it loaded the new model"));
      return;
    }
    spdlog::warn("serve: {} before the new model was ready", why);
    if (g->failure.empty()) g->failure = why;
    s->retired = true;
    return;
  }
  if (!stopping_) schedule_relaunch(*s, why);
}

bool frontend::note_cut_off(const slot& s, const cluster::node_handle& h, const cluster::exit_status& st,
                            bool fenced) {
  // The job runner's rule for an end before a node joined: not fenced or killed by someone, and
  // could not connect (exit_join_failed) or never ran as troupe (a host command that failed).
  if (settings_.cluster.launcher != "local" || s.retired || !s.peer_host.empty() ||
      !cluster::start_failure(st, h.id, fenced))
    return false;
  const std::string host = st.trace.host.empty() ? launcher_->host_of(h) : st.trace.host;
  if (host.empty()) return false;  // this machine: not a host to avoid
  if (cut_off_.cut(host, clock_.now()))
    spdlog::info(
        "serve: host {}: {} ended before it reached the front end ({}): the next replicas go to other hosts "
        "where one has a free slot, for {} s",
        host, h.id.to_string(), st.to_string(), cluster::cut_off_hosts::period_seconds());
  return true;
}

void frontend::schedule_relaunch(slot& s, const std::string& why) {
  // Served a while: a fresh death, relaunched at once; dying again and again backs off to 5 s.
  if (s.ready && clock_.now() - s.ready_at > std::chrono::seconds(10)) s.failures = 0;
  ++s.failures;
  auto backoff = s.failures <= 1
                     ? clock::duration::zero()
                     : std::min<clock::duration>(std::chrono::milliseconds(100 << std::min(s.failures, 6)),
                                                 std::chrono::seconds(5));
  s.relaunch_at = clock_.now() + backoff;
  s.ready = false;
  ++restarts_;
  metrics_.replica_restarts.inc();
  spdlog::warn("serve: {}; relaunching it as #{} in {}", why, s.incarnation + 1, ms_text(backoff));
}

void frontend::on_ready(const message& m) {
  auto r = m.body().getServe().getReplicaReady();
  const node_id& who = m.from_node();
  std::string version = r.getVersion();
  std::string placement = r.getPlacement();
  {
    std::lock_guard lk(mu_);
    slot* s = find_slot(who.name);
    if (!s || s->incarnation != who.incarnation || s->retired) return;
  }
  // The core first: a generation is committed once its slots are ready, and by then the core must
  // know every one of its replicas.
  if (!core_->replica_ready(who.name, who.incarnation, version, placement, static_cast<int>(r.getPid())))
    return;
  std::lock_guard lk(mu_);
  slot* s = find_slot(who.name);
  if (!s || s->incarnation != who.incarnation) return;
  s->ready = true;
  s->ready_at = clock_.now();
  spdlog::info(
      "serve: {} ready: version {} on {} (pid {}; loaded in {:.0f} ms, warmed up in {:.0f} ms, {} after "
      "launch)",
      who.to_string(), version, placement, r.getPid(), r.getLoadMs(), r.getWarmupMs(),
      ms_text(s->ready_at - s->launched));
  wake_.notify_all();
}

void frontend::on_failed(const message& m) {
  auto f = m.body().getServe().getReplicaFailed();
  const node_id& who = m.from_node();
  std::lock_guard lk(mu_);
  slot* s = find_slot(who.name);
  if (!s || s->incarnation != who.incarnation) return;
  std::string error = in_their_words(f.getError(), s->generation);
  spdlog::error("serve: {} cannot load its model: {}", who.to_string(), error);
  generation* g = gen_of(*s);
  if (g && g->state == gen_state::staging && g->failure.empty()) g->failure = error;
  wake_.notify_all();
}

void frontend::stop_replicas(const std::vector<std::string>& nodes) {
  std::vector<cluster::node_handle> handles;
  {
    std::lock_guard lk(mu_);
    for (const auto& n : nodes) {
      slot* s = find_slot(n);
      if (!s) continue;
      s->retired = true;
      if (s->handle) handles.push_back(*s->handle);
    }
  }
  for (const auto& h : handles) {
    spdlog::info("serve: {} drained: stopping it", h.id.to_string());
    (void)launcher_->signal(h, SIGTERM);
  }
}

void frontend::replica_silent(const replica_ref& who, const std::string& why) {
  // A closed connection is an exit, whose report relaunches the replica; a silent replica's process
  // may live on, stopped or hung, and would never be replaced: the ticker fences it.
  std::lock_guard lk(mu_);
  silent_.emplace_back(who, why);
  wake_.notify_all();
}

std::vector<std::pair<replica_ref, std::string>> frontend::take_silent() {
  std::lock_guard lk(mu_);
  return std::exchange(silent_, {});
}

void frontend::fence_replicas(const std::vector<replica_ref>& who, const std::string& why) {
  std::vector<cluster::node_handle> handles;
  {
    std::lock_guard lk(mu_);
    for (const auto& w : who) {
      slot* s = find_slot(w.node);
      // Fenced already (a hung replica is both late with a batch and silent): once, one reason.
      if (!s || s->incarnation != w.incarnation || !s->handle || !s->fenced_for.empty()) continue;
      handles.push_back(*s->handle);
      s->fenced_for = why;
    }
  }
  // The one cause (it listed every possible one: "holds a batch past replica_timeout_ms, cannot be
  // reached or missed its heartbeats").
  for (const auto& h : handles) {
    spdlog::warn("serve: {}: {}: fenced", h.id.to_string(), why);
    (void)launcher_->fence(h);
  }
}

void frontend::stop_replicas_at_exit() {
  if (!launcher_) return;
  // SIGTERM first: a replica ends on it (its log says it exited, not "killed by SIGKILL", after every
  // clean stop); one still there after 2 s is killed.
  const auto running = launcher_->running();
  for (const auto& h : running) (void)launcher_->signal(h, SIGTERM);
  const auto deadline = clock_.now() + std::chrono::seconds(2);
  for (const auto& h : running) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock_.now());
    if (left.count() <= 0) break;
    (void)launcher_->wait(h, left);
  }
  launcher_->kill_all();
}

// The first generation's snapshot and slots (an earlier run's models and logs set aside first).
int frontend::stage_first_generation() {
  std::lock_guard lk(mu_);
  auto& g = gens_.begin()->second;
  std::error_code ec;
  std::filesystem::remove_all(state_dir_ + "/models", ec);  // an earlier run's (server.lock is ours)
  set_aside_earlier_logs();
  auto snap = snapshot(g.info, gens_.begin()->first);
  if (!snap) {
    spdlog::error("{}", snap.err().to_string());
    return 1;
  }
  g.info = snap->info;
  g.pt_digest = snap->pt_digest;
  g.deadline = clock_.now() + cfg_.load_timeout;
  for (std::size_t i = 0; i < cfg_.replicas; ++i) {
    slot s;
    s.generation = gens_.begin()->first;
    s.index = i;
    s.node = "replica-" + std::to_string(s.generation) + "-" + std::to_string(i);
    s.relaunch_at = clock_.now();
    slots_[s.node] = s;
  }
  return 0;
}

}  // namespace troupe::serve
