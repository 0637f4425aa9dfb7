// Model swaps (frontend.hpp): a reload, SIGHUP or --watch stages a new generation of replicas beside
// the serving one; once every one of them is ready, traffic moves and the old generation drains. A
// staged generation that fails (a replica says ReplicaFailed, exits before it is ready, or is not
// ready within load_timeout_ms) is dropped and the serving one goes on: the reload is refused with
// the reason.
//
// Each generation serves a snapshot of its model (copies in <state>/models/<generation>/), so a
// replica relaunched later loads the same version even when the job has since replaced, removed or
// overwritten its model directory; a generation's snapshot goes with it (drained or refused), and a
// server starts with none of an earlier run's.
#include <spdlog/spdlog.h>

#include <sys/stat.h>
#include <unistd.h>

#include <xxhash.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <utility>
#include <vector>

#include "frontend.hpp"
#include "troupe/cluster/own_path.hpp"
#include "troupe/wire/rpc.hpp"

namespace troupe::serve {

namespace fs = std::filesystem;

namespace {
// XXH64 of the file at `path` (0 when it cannot be read: the replicas' load then says why).
std::uint64_t file_digest(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  XXH64_state_t* st = in ? XXH64_createState() : nullptr;
  if (!st) return 0;
  XXH64_reset(st, 0);
  std::vector<char> buf(1 << 20);
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    XXH64_update(st, buf.data(), static_cast<std::size_t>(in.gcount()));
  }
  const std::uint64_t d = in.bad() ? 0 : XXH64_digest(st);
  XXH64_freeState(st);
  return d;
}
}  // namespace

expected<frontend::snapshot_copy> frontend::snapshot(const model::model_info& m, std::uint32_t gen) {
  std::string dir = state_dir_ + "/models/" + std::to_string(gen);
  std::error_code ec;
  fs::remove_all(dir, ec);
  fs::create_directories(dir, ec);
  if (ec) return make_unexpected(core_errc::io_error, dir + ": " + ec.message());
  // The copies are the server's user's alone, whatever the modes of the files they came from.
  fs::permissions(dir, fs::perms::owner_all, ec);
  // Copies, not hard links: a link shares the job's file, and a model.pt overwritten in place (`cp`
  // over it) changed what the snapshot served under the old version's name.
  for (const char* f : {"model.pt", "model.json"}) {
    std::string from = m.dir + "/" + f, to = dir + "/" + f;
    fs::copy_file(from, to, fs::copy_options::overwrite_existing, ec);
    if (ec)
      return make_unexpected(core_errc::io_error, "copying " + from + " to " + to + ": " + ec.message());
  }
  auto snap = model::read_model_dir(dir);
  if (!snap) return snap.err();
  // Its name and version stay those of the directory it was asked to serve.
  snapshot_copy out{m, file_digest(snap->pt_path)};
  out.info.pt_path = snap->pt_path;
  return out;
}

std::optional<frontend::reload_request> frontend::next_reload(model_view& serving) {
  std::lock_guard lk(mu_);
  if (stopping_ || reloads_.empty()) return std::nullopt;
  for (const auto& [n, g] : gens_)
    if (g.state == gen_state::staging) return std::nullopt;  // one swap at a time: the next waits
  auto view = current_view();
  if (!view) return std::nullopt;  // the first model is not up yet: reloads wait for it
  serving = *view;
  reload_request req = std::move(reloads_.front());
  reloads_.pop_front();
  return req;
}

void frontend::refuse_reload(const reload_request& req, const model_view& serving, const std::string& why) {
  spdlog::error("serve: {} of {} refused: {} (version {} keeps serving)", req.source, req.dir, why,
                serving.info.version());
  metrics_.swaps_refused.inc();
  std::lock_guard lk(mu_);
  last_swap_error_ = why;
  if (req.reply) answer_reload(*req.reply, false, why, serving.info.version(), serving.generation);
}

std::uint64_t frontend::served_digest(std::uint32_t gen) {
  std::lock_guard lk(mu_);
  auto it = gens_.find(gen);
  return it == gens_.end() ? 0 : it->second.pt_digest;
}

void frontend::stage(const reload_request& req, std::uint32_t gen, snapshot_copy snap) {
  generation g;
  g.info = std::move(snap.info);
  g.pt_digest = snap.pt_digest;
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
}

std::string frontend::served_dir() const {
  for (const auto& [n, g] : gens_)
    if (g.state == gen_state::active) return g.info.dir;
  return cfg_.model;
}

void frontend::start_reloads() {
  model_view serving;
  auto req = next_reload(serving);
  if (!req) return;
  auto m = model::read_model_dir(req->dir);
  if (!m) return refuse_reload(*req, serving, m.err().context());
  // Tried, whoever asked: --watch takes it again once its directory changes (untried_or_settled).
  {
    const auto stamp = stamp_of(req->dir, m->created_unix_ms);  // the stat before the lock
    std::lock_guard lk(mu_);
    tried_[watch_key(req->dir)] = stamp;
  }
  if (auto why = model::incompatibility(serving.info, *m); !why.empty())
    return refuse_reload(*req, serving,
                         "its inputs or outputs differ from the served model's (" + why +
                             "): clients of this endpoint could not use it; serve it under another name");
  std::uint32_t gen;
  {
    std::lock_guard lk(mu_);
    gen = next_gen_++;
  }
  // What --watch chose is checked again as it is copied: a component swapped for a link since.
  if (req->source == "watch" && !own_model_dir(cfg_.watch, req->dir))
    return refuse_reload(*req, serving, "no longer this user's own (a link or another user's file now)");
  auto snap = snapshot(*m, gen);
  if (!snap) return refuse_reload(*req, serving, snap.err().to_string());
  if (const auto served = served_digest(serving.generation);
      snap->info.version() == serving.info.version() && served != 0 && snap->pt_digest != served) {
    // Answers name the model that answered by its version: two contents under one name would not.
    drop_snapshot(gen);
    return refuse_reload(*req, serving,
                         "its model.json names version " + serving.info.version() +
                             ", the one serving, but its model.pt is another (written over it?): a model of "
                             "its own gets its own version from `troupe export` or a job");
  }
  std::lock_guard lk(mu_);
  stage(*req, gen, std::move(*snap));
  spdlog::info("serve: {}: loading {} (version {}) as generation {} beside version {}", req->source, req->dir,
               gens_[gen].info.version(), gen, serving.info.version());
}

void frontend::advance_swaps() {
  std::vector<cluster::node_handle> to_fence;
  std::optional<std::uint32_t> ready;
  {
    std::lock_guard lk(mu_);
    auto now = clock_.now();
    drop_drained_generations();
    fence_slow_loaders(now, to_fence);
    ready = check_staged(now, to_fence);
  }
  for (const auto& h : to_fence) (void)launcher_->fence(h);
  if (ready) commit(*ready);
}

void frontend::drop_drained_generations() {
  for (auto it = gens_.begin(); it != gens_.end();) {
    std::uint32_t gen = it->first;
    bool left =
        std::any_of(slots_.begin(), slots_.end(), [&](const auto& s) { return s.second.generation == gen; });
    if (it->second.state != gen_state::draining || left) {
      ++it;
      continue;
    }
    drop_snapshot(gen);
    it = gens_.erase(it);
  }
}

void frontend::set_aside_earlier_logs() {
  std::error_code ec;
  const std::string logs = state_dir_ + "/logs", previous = logs + "/previous";
  fs::remove_all(previous, ec);
  bool made = false;
  for (const auto& e : fs::directory_iterator(logs, ec)) {
    const auto name = e.path().filename().string();
    if (name.rfind("replica-", 0) != 0 || !e.is_regular_file(ec)) continue;
    if (!made) made = fs::create_directory(previous, ec) || fs::is_directory(previous, ec);
    fs::rename(e.path(), previous + "/" + name, ec);
  }
}

void frontend::drop_snapshot(std::uint32_t gen) {
  std::error_code ec;
  fs::remove_all(state_dir_ + "/models/" + std::to_string(gen), ec);
  const std::uint32_t newest = gens_.empty() ? gen : std::max(gen, gens_.rbegin()->first);
  for (const auto& e : fs::directory_iterator(state_dir_ + "/logs", ec)) {
    const auto name = e.path().filename().string();  // replica-<generation>-<slot>.log
    unsigned long g = 0;
    if (name.rfind("replica-", 0) != 0 || std::sscanf(name.c_str(), "replica-%lu-", &g) != 1) continue;
    if (g + kept_log_generations <= newest) fs::remove(e.path(), ec);
  }
}

void frontend::fence_slow_loaders(clock::time_point now, std::vector<cluster::node_handle>& to_fence) {
  // A relaunched replica of the serving generation that never becomes ready is fenced (and
  // relaunched again).
  for (auto& [name, s] : slots_) {
    generation* g = gen_of(s);
    if (!g || g->state != gen_state::active || !s.handle || s.ready || now - s.launched <= cfg_.load_timeout)
      continue;
    s.fenced_for = "not ready " + ms_text(now - s.launched) + " after its launch (load_timeout_ms)";
    spdlog::warn("serve: {}: {}: fenced", node_id{s.node, s.incarnation}.to_string(), s.fenced_for);
    to_fence.push_back(*s.handle);
    s.launched = now;  // once per timeout
  }
}

std::optional<std::uint32_t> frontend::check_staged(clock::time_point now,
                                                    std::vector<cluster::node_handle>& to_fence) {
  bool serving = std::any_of(gens_.begin(), gens_.end(),
                             [](const auto& x) { return x.second.state == gen_state::active; });
  for (auto it = gens_.begin(); it != gens_.end(); ++it) {
    auto& [gen, g] = *it;
    if (g.state != gen_state::staging) continue;
    std::size_t ready = 0;
    for (const auto& [name, s] : slots_) ready += s.generation == gen && s.ready;
    if (g.failure.empty() && now > g.deadline)
      g.failure = "not every replica was ready within load_timeout_ms (" + ms_text(cfg_.load_timeout) +
                  "): " + std::to_string(ready) + " of " + std::to_string(cfg_.replicas);
    if (g.failure.empty()) {
      if (ready == cfg_.replicas) return gen;
      continue;
    }
    if (!serving) {
      wake_.notify_all();  // the first model: run() reports it and stops
      continue;
    }
    refuse(gen, to_fence);
    return std::nullopt;  // gens_ changed; the next tick looks again
  }
  return std::nullopt;
}

void frontend::refuse(std::uint32_t gen, std::vector<cluster::node_handle>& to_fence) {
  auto& g = gens_.at(gen);
  spdlog::error("serve: generation {} ({}) refused: {}", gen, g.info.version(), g.failure);
  metrics_.swaps_refused.inc();
  last_swap_error_ = g.failure;
  auto cur = current_view();
  for (const auto& w : g.waiting) answer_reload(w, false, g.failure, cur->info.version(), cur->generation);
  // Its replicas go; the ones still running are erased with their exit report.
  for (auto s = slots_.begin(); s != slots_.end();) {
    if (s->second.generation != gen) {
      ++s;
      continue;
    }
    s->second.retired = true;
    if (s->second.handle) {
      to_fence.push_back(*s->second.handle);
      ++s;
    } else {
      s = slots_.erase(s);
    }
  }
  drop_snapshot(gen);  // a replica still loading it keeps its open files
  gens_.erase(gen);
}

namespace {

// What the routes check a version's requests against, with its raw rows' encoder when model.json
// has columns.
std::shared_ptr<model_view> make_view(const model::model_info& info, std::size_t max_batch) {
  auto view = std::make_shared<model_view>();
  view->info = info;
  view->shape = shape_of(info, max_batch);
  if (auto f = model::row_format_of(info); !f)
    view->rows_why = f.err().context();
  else if (auto e = job::row_encoder::create(*f, info.dir + "/model.json"); !e)
    view->rows_why = e.err().context();
  else
    view->rows = std::make_shared<const job::row_encoder>(std::move(*e));
  return view;
}

}  // namespace

void frontend::publish_view(std::uint32_t gen) {
  std::lock_guard lk(mu_);
  auto view = make_view(gens_.at(gen).info, cfg_.max_batch);
  view->generation = gen;
  view->serving_since_ms = clock_.wall_ms();
  std::lock_guard vl(views_mu_);
  views_[gen] = view;
  active_ = gen;
  while (views_.size() > 8) views_.erase(views_.begin());
}

void frontend::commit(std::uint32_t gen) {
  // In this order: the routes' view of the new version, then the traffic, then the states that
  // say it serves (run() starts the endpoint on them; a reload's answer goes with them).
  publish_view(gen);
  core_->activate(gen);
  std::string old_version, version;
  std::vector<message> waiting;
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
    waiting = std::exchange(g.waiting, {});
    last_swap_error_.clear();
    wake_.notify_all();
  }
  // server.json names the new version before a reload's answer does (`troupe serve status` right
  // after `troupe serve reload` read the old one for up to a second, as did jobs prune's model_path).
  if (!old_version.empty()) write_state(false);
  for (const auto& w : waiting) answer_reload(w, true, "", version, gen);
  if (!old_version.empty()) metrics_.swaps_done.inc();
  if (old_version.empty())
    spdlog::info("serve: generation {} serves version {}", gen, version);
  else
    spdlog::info("serve: swapped {} -> {} (generation {}); the old replicas drain", old_version, version,
                 gen);
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

}  // namespace troupe::serve
