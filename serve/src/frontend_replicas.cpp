// The replicas' supervisor and the model swaps (frontend.hpp).
//
// A generation is one model version served by `replicas` processes. The first is staged at start;
// a reload stages the next: its replicas load and warm up beside the serving ones, and once every
// one of them is ready, traffic moves (the core's active generation), and the previous
// generation's replicas drain and are stopped. A staged generation that fails (a replica says
// ReplicaFailed, exits before it is ready, or is not ready within load_timeout_ms) is dropped and
// the serving one goes on: the reload is refused with the reason.
//
// Each generation serves a snapshot of its model (hard links, else copies, in
// <state>/models/<generation>/), so a replica relaunched later loads the same version even when the
// job has since replaced or removed its model directory.
#include <signal.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <filesystem>

#include "frontend.hpp"
#include "troupe/cluster/process.hpp"
#include "troupe/wire/rpc.hpp"

namespace troupe::serve {

namespace fs = std::filesystem;

namespace {

std::string ms_text(clock::duration d) {
  return std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(d).count()) + " ms";
}

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

expected<model::model_info> frontend::snapshot(const model::model_info& m, std::uint32_t gen) {
  std::string dir = state_dir_ + "/models/" + std::to_string(gen);
  std::error_code ec;
  fs::remove_all(dir, ec);
  fs::create_directories(dir, ec);
  if (ec) return make_unexpected(core_errc::io_error, dir + ": " + ec.message());
  for (const char* f : {"model.pt", "model.json"}) {
    std::string from = m.dir + "/" + f, to = dir + "/" + f;
    fs::create_hard_link(from, to, ec);
    if (ec) {
      ec.clear();
      fs::copy_file(from, to, fs::copy_options::overwrite_existing, ec);
    }
    if (ec)
      return make_unexpected(core_errc::io_error, "copying " + from + " to " + to + ": " + ec.message());
  }
  auto snap = model::read_model_dir(dir);
  if (!snap) return snap.err();
  // Its name and version stay those of the directory it was asked to serve.
  model::model_info out = m;
  out.pt_path = snap->pt_path;
  return out;
}

expected<void> frontend::launch(slot& s, const std::string& version) {
  std::string snap = state_dir_ + "/models/" + std::to_string(s.generation);
  cluster::node_spec spec;
  spec.id = node_id{s.node, s.incarnation};
  spec.argv = {"troupe",        "serve-replica",
               "--connect",     control_address_,
               "--name",        s.node,
               "--incarnation", std::to_string(s.incarnation),
               "--generation",  std::to_string(s.generation),
               "--model",       snap,
               "--version",     version,
               "--threads",     std::to_string(cfg_.threads),
               "--device",      cfg_.device,
               "--max-batch",   std::to_string(cfg_.max_batch),
               "--warmup",      std::to_string(cfg_.warmup),
               "--token-file",  state_dir_ + "/token"};
  if (cfg_.pin_cpus) {
    std::string cpus;
    for (int t = 0; t < cfg_.threads; ++t) {
      if (t) cpus += ',';
      cpus += std::to_string(static_cast<int>(s.index) * cfg_.threads + t);
    }
    spec.argv.insert(spec.argv.end(), {"--cpus", cpus});
  }
  spec.log_file = state_dir_ + "/logs/" + s.node + ".log";
  spec.env = {{"TROUPE_NODE", spec.id.to_string()}};
  // Slurm sizes each replica's job by it; the local launcher needs no reservation (a swap runs two
  // generations at once for a moment).
  if (settings_.cluster.launcher == "slurm") spec.need.cpus = cfg_.threads;
  auto h = launcher_->launch(spec);
  if (!h) return h.err();
  s.handle = *h;
  return {};
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
    slot copy;
    std::string version;
    {
      std::lock_guard lk(mu_);
      slot* s = find_slot(node);
      generation* g = s ? gen_of(*s) : nullptr;
      if (!g || s->retired) continue;
      s->relaunch_at.reset();
      if (s->launched != clock::time_point{}) ++s->incarnation;
      s->launched = clock_.now();
      s->ready = false;
      core_->add_replica(s->node, s->incarnation, s->generation, s->index);
      copy = *s;
      version = g->info.version();
    }
    auto r = launch(copy, version);
    std::lock_guard lk(mu_);
    slot* s = find_slot(node);
    if (!s) continue;
    if (r) {
      s->handle = copy.handle;
      spdlog::info("serve: {} launched (pid {})", node_id{s->node, s->incarnation}.to_string(),
                   copy.handle->pid);
      continue;
    }
    spdlog::error("serve: cannot launch {}: {}", node, r.err().to_string());
    s->last_exit = r.err().to_string();
    generation* g = gen_of(*s);
    if (!g) continue;
    if (g->state == gen_state::staging) {
      if (g->failure.empty()) g->failure = node + " could not be launched: " + r.err().to_string();
    } else {
      s->relaunch_at = clock_.now() + std::chrono::seconds(1);
    }
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
    slot* s = find_slot(h.id.name);
    if (!s || !s->handle || s->handle->serial != h.serial) continue;
    s->handle.reset();
    s->last_exit = st.to_string();
    generation* g = gen_of(*s);
    std::string why = h.id.to_string() + " " + st.to_string();
    if (auto line = last_line(st.trace.output); !line.empty() && !st.success() && !s->retired)
      why += ": " + in_their_words(line, s->generation);
    if (s->retired || !g || g->state == gen_state::draining) {
      spdlog::info("serve: {} (generation {}, stopped)", why, s->generation);
      slots_.erase(h.id.name);
      continue;
    }
    if (g->state == gen_state::staging) {
      spdlog::warn("serve: {} before the new model was ready", why);
      if (g->failure.empty()) g->failure = why;
      s->retired = true;
      continue;
    }
    if (stopping_) continue;
    // Served a while: a fresh death, relaunched at once; dying again and again backs off to 5 s.
    if (s->ready && clock_.now() - s->ready_at > std::chrono::seconds(10)) s->failures = 0;
    ++s->failures;
    auto backoff = s->failures <= 1
                       ? clock::duration::zero()
                       : std::min<clock::duration>(std::chrono::milliseconds(100 << std::min(s->failures, 6)),
                                                   std::chrono::seconds(5));
    s->relaunch_at = clock_.now() + backoff;
    s->ready = false;
    ++restarts_;
    metrics_.replica_restarts.inc();
    spdlog::warn("serve: {}; relaunching it as #{} in {}", why, s->incarnation + 1, ms_text(backoff));
  }
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

void frontend::start_reloads() {
  std::unique_lock lk(mu_);
  if (stopping_ || reloads_.empty()) return;
  for (const auto& [n, g] : gens_)
    if (g.state == gen_state::staging) return;  // one swap at a time: the next waits
  auto serving = current_view();
  if (!serving) return;  // the first model is not up yet: reloads wait for it
  reload_request req = std::move(reloads_.front());
  reloads_.pop_front();
  const model_view current = *serving;
  lk.unlock();
  auto refuse = [&](const std::string& why) {
    spdlog::error("serve: {} of {} refused: {} (version {} keeps serving)", req.source, req.dir, why,
                  current.info.version());
    metrics_.swaps_refused.inc();
    std::lock_guard l(mu_);
    last_swap_error_ = why;
    if (req.reply) answer_reload(*req.reply, false, why, current.info.version(), current.generation);
  };
  auto m = model::read_model_dir(req.dir);
  if (!m) return refuse(m.err().context());
  if (auto why = model::incompatibility(current.info, *m); !why.empty())
    return refuse("its inputs or outputs differ from the served model's (" + why +
                  "): clients of this endpoint could not use it; serve it under another name");
  lk.lock();
  std::uint32_t gen = next_gen_++;
  lk.unlock();
  auto snap = snapshot(*m, gen);
  if (!snap) return refuse(snap.err().to_string());
  lk.lock();
  generation g;
  g.info = *snap;
  g.deadline = clock_.now() + cfg_.load_timeout;
  if (req.reply) g.waiting.push_back(*req.reply);
  gens_[gen] = std::move(g);
  for (std::size_t i = 0; i < cfg_.replicas; ++i) {
    slot s;
    s.generation = gen;
    s.index = i;
    s.node = "replica-" + std::to_string(gen) + "-" + std::to_string(i);
    s.relaunch_at = clock_.now();
    slots_[s.node] = s;
  }
  spdlog::info("serve: {}: loading {} (version {}) as generation {} beside version {}", req.source, req.dir,
               gens_[gen].info.version(), gen, current.info.version());
}

void frontend::advance_swaps() {
  std::vector<std::string> fence;
  std::vector<cluster::node_handle> to_fence;
  std::optional<std::uint32_t> commit;
  {
    std::lock_guard lk(mu_);
    auto now = clock_.now();
    for (auto it = gens_.begin(); it != gens_.end();) {
      auto& [gen, g] = *it;
      if (g.state == gen_state::draining) {
        bool any = std::any_of(slots_.begin(), slots_.end(),
                               [&](const auto& s) { return s.second.generation == gen; });
        it = any ? std::next(it) : gens_.erase(it);
        continue;
      }
      if (g.state == gen_state::active) {
        // A relaunched replica that never becomes ready is fenced (and relaunched again).
        for (auto& [name, s] : slots_)
          if (s.generation == gen && s.handle && !s.ready && now - s.launched > cfg_.load_timeout) {
            spdlog::warn("serve: {} not ready {} after its launch: fenced",
                         node_id{s.node, s.incarnation}.to_string(), ms_text(now - s.launched));
            to_fence.push_back(*s.handle);
            s.launched = now;  // once per timeout
          }
        ++it;
        continue;
      }
      std::size_t ready = 0;
      for (const auto& [name, s] : slots_) ready += s.generation == gen && s.ready;
      if (g.failure.empty() && now > g.deadline)
        g.failure = "not every replica was ready within load_timeout_ms (" + ms_text(cfg_.load_timeout) +
                    "): " + std::to_string(ready) + " of " + std::to_string(cfg_.replicas);
      bool first = !std::any_of(gens_.begin(), gens_.end(),
                                [](const auto& x) { return x.second.state == gen_state::active; });
      if (!g.failure.empty()) {
        if (first) {
          wake_.notify_all();  // run() reports it and stops
          ++it;
          continue;
        }
        spdlog::error("serve: generation {} ({}) refused: {}", gen, g.info.version(), g.failure);
        metrics_.swaps_refused.inc();
        last_swap_error_ = g.failure;
        refused_[g.info.dir] = g.info.created_unix_ms;
        auto cur = current_view();
        for (const auto& w : g.waiting)
          answer_reload(w, false, g.failure, cur->info.version(), cur->generation);
        for (auto& [name, s] : slots_)
          if (s.generation == gen) {
            s.retired = true;
            if (s.handle) to_fence.push_back(*s.handle);
          }
        for (auto s = slots_.begin(); s != slots_.end();)
          s = s->second.generation == gen && !s->second.handle ? slots_.erase(s) : std::next(s);
        it = gens_.erase(it);
        continue;
      }
      if (ready == cfg_.replicas && !commit) commit = gen;
      ++it;
    }
  }
  for (const auto& h : to_fence) (void)launcher_->fence(h);
  if (!commit) return;
  std::uint32_t gen = *commit;
  // In this order: the routes' view of the new version, then the traffic, then the states that
  // say it serves (run() starts the endpoint on them; a reload's answer goes with them).
  {
    std::lock_guard lk(mu_);
    auto view = std::make_shared<model_view>();
    view->info = gens_.at(gen).info;
    view->shape = shape_of(view->info, cfg_.max_batch);
    view->generation = gen;
    view->serving_since_ms = clock_.wall_ms();
    std::lock_guard vl(views_mu_);
    views_[gen] = view;
    active_ = gen;
    while (views_.size() > 8) views_.erase(views_.begin());
  }
  core_->activate(gen);
  std::string old_version, version;
  {
    std::lock_guard lk(mu_);
    auto& g = gens_.at(gen);
    for (auto& [n, other] : gens_)
      if (other.state == gen_state::active) {
        other.state = gen_state::draining;
        old_version = other.info.version();
      }
    g.state = gen_state::active;
    version = g.info.version();
    for (const auto& w : g.waiting) answer_reload(w, true, "", version, gen);
    g.waiting.clear();
    last_swap_error_.clear();
    wake_.notify_all();
  }
  if (old_version.empty()) {
    spdlog::info("serve: generation {} serves version {}", gen, version);
  } else {
    metrics_.swaps_done.inc();
    spdlog::info("serve: swapped {} -> {} (generation {}); the old replicas drain", old_version, version,
                 gen);
  }
}

void frontend::answer_reload(const message& request, bool ok, const std::string& error,
                             const std::string& version, std::uint32_t generation) {
  auto out = reply_to(request, 64);
  auto r = out.body().initServe().initReloadReply();
  r.setOk(ok);
  r.setError(error);
  r.setVersion(version);
  r.setGeneration(generation);
  if (auto s = wire::send_reply(*net_, request, std::move(out), "serve"); !s)
    spdlog::warn("serve: reload answer not sent: {}", s.err().to_string());
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

void frontend::fence_replicas(const std::vector<replica_ref>& who) {
  std::vector<cluster::node_handle> handles;
  {
    std::lock_guard lk(mu_);
    for (const auto& w : who) {
      slot* s = find_slot(w.node);
      if (s && s->incarnation == w.incarnation && s->handle) handles.push_back(*s->handle);
    }
  }
  for (const auto& h : handles) {
    spdlog::warn("serve: {} holds a batch past replica_timeout_ms or cannot be reached: fenced",
                 h.id.to_string());
    (void)launcher_->fence(h);
  }
}

void frontend::watch_for_models() {
  auto now = clock_.now();
  model::model_info current;
  {
    std::lock_guard lk(mu_);
    if (next_watch_ && now < *next_watch_) return;
    next_watch_ = now + cfg_.watch_interval;
    if (!reloads_.empty()) return;
    for (const auto& [n, g] : gens_)
      if (g.state == gen_state::staging) return;
  }
  auto serving = current_view();
  if (!serving) return;
  current = serving->info;
  std::optional<model::model_info> best;
  std::error_code ec;
  std::vector<std::string> dirs{cfg_.watch};
  for (const auto& e : fs::directory_iterator(cfg_.watch, ec)) {
    if (e.path().filename() == "serve") continue;
    dirs.push_back(e.path().string());
    dirs.push_back(e.path().string() + "/model");
  }
  for (const auto& d : dirs) {
    if (!fs::exists(d + "/model.json", ec)) continue;
    auto m = model::read_model_dir(d);
    if (!m || m->created_unix_ms <= current.created_unix_ms) continue;
    if (!model::incompatibility(current, *m).empty()) continue;
    std::lock_guard lk(mu_);
    if (auto r = refused_.find(d); r != refused_.end() && r->second == m->created_unix_ms) continue;
    if (!best || m->created_unix_ms > best->created_unix_ms) best = *m;
  }
  if (!best) return;
  std::lock_guard lk(mu_);
  // Tried once: not again until that directory holds another model.
  refused_[best->dir] = best->created_unix_ms;
  reloads_.push_back({best->dir, std::nullopt, "watch"});
  wake_.notify_all();
}

}  // namespace troupe::serve
