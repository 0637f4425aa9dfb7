// --watch (frontend.hpp): every watch_interval_ms (or at once on SIGHUP) the newest model under the
// watched directory that the server's user owns, that takes the served model's inputs and gives its
// outputs and that was not tried before, staged as a reload.
#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <filesystem>
#include <utility>

#include "frontend.hpp"
#include "troupe/cluster/own_path.hpp"

namespace troupe::serve {

namespace fs = std::filesystem;

namespace {
// Whether `path` exists and is this user's own (cluster/own_path.hpp): --watch takes only such model
// directories and files. In a jobs root other users write in, one dropped a model directory with a
// far-future created_unix_ms and the server swapped to it (and to no later one), and a model.pt
// linked to a file only the server's user could read was copied into a snapshot others could read.
bool own(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0 && cluster::not_own(path).empty();
}
}  // namespace

// A model directory found under --watch `root` ("root/x" or "root/x/model") whose every component
// below the root, model.json and model.pt are the user's own and no link (a link in the middle of the
// path was followed: the server swapped to a model outside the watched directory, or, swapped in
// at the right moment, to another user's).
std::string watch_key(const std::string& dir) {
  std::error_code ec;
  auto p = fs::absolute(dir, ec);
  return (ec ? fs::path(dir) : p).lexically_normal().string();
}

watch_stamp stamp_of(const std::string& dir, std::int64_t created_unix_ms) {
  watch_stamp s;
  s.created_unix_ms = created_unix_ms;
  struct stat st {};
  if (::stat((dir + "/model.pt").c_str(), &st) == 0) {
    s.pt_size = static_cast<std::int64_t>(st.st_size);
    s.pt_mtime_ns = static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
  }
  return s;
}

bool own_model_dir(const std::string& root, const std::string& dir) {
  if (!own(dir) || !own(dir + "/model.json") || !own(dir + "/model.pt")) return false;
  const auto parent = fs::path(dir).parent_path();
  return dir == root || parent == fs::path(root) || own(parent.string());
}

void frontend::watch_for_models() {
  auto now = clock_.now();
  bool hup = false;  // a SIGHUP asked for this look: its outcome is logged
  {
    std::lock_guard lk(mu_);
    if (next_watch_ && now < *next_watch_) return;
    next_watch_ = now + cfg_.watch_interval;
    hup = std::exchange(hup_look_, false);
    bool busy = !reloads_.empty();
    for (const auto& [n, g] : gens_) busy = busy || g.state == gen_state::staging;
    if (busy) {
      if (hup) spdlog::info("serve: SIGHUP: a swap is under way; --watch looks again once it is over");
      return;
    }
  }
  auto serving = current_view();
  if (!serving) return;
  auto best = newest_watched(serving->info);
  std::lock_guard lk(mu_);
  if (hup && !best)
    spdlog::info("serve: SIGHUP: no model under {} newer than version {} that it has not tried", cfg_.watch,
                 serving->info.version());
  if (!best) return;
  reloads_.push_back({best->dir, std::nullopt, "watch"});
  wake_.notify_all();
}

namespace {
// Where --watch looks for a model: DIR, each DIR/<x> and DIR/<x>/model (not the servers' state).
std::vector<std::string> watched_dirs(const std::string& watch) {
  std::vector<std::string> dirs{watch};
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(watch, ec)) {
    std::error_code job_ec;
    if (cluster::is_own_subdir_name(e.path().filename().string(), "serve") &&
        !fs::exists(e.path() / "job.toml", job_ec))
      continue;  // the servers' state (a job of that name is a job)
    dirs.push_back(e.path().string());
    dirs.push_back(e.path().string() + "/model");
  }
  return dirs;
}
}  // namespace

bool frontend::untried_or_settled(const std::string& key, const watch_stamp& stamp) {
  auto r = tried_.find(key);
  if (r == tried_.end()) return true;
  if (r->second == stamp) return false;
  // Tried, and changed since (a copy under way): taken once it has held still for a poll, not
  // swapped to (and refused) at every poll while a large model.pt is written.
  if (auto [at, added] = settling_.try_emplace(key, stamp); added || !(at->second == stamp)) {
    at->second = stamp;
    return false;
  }
  settling_.erase(key);
  return true;
}

bool frontend::passes_over(const std::string& d, const model::model_info& current,
                           const model::model_info& m) {
  if (m.created_unix_ms < current.created_unix_ms) {
    // An older model copied in later (a rollback by copy) did nothing and said nothing: said once.
    // Those there at the first look are not (every earlier job's model under jobs/).
    std::lock_guard lk(mu_);
    if (older_seen_.insert(d).second && watch_primed_)
      spdlog::info(
          "serve: --watch passes over {}: made before the model serving ({}); --watch takes newer "
          "models only: `troupe serve reload {}` serves it",
          d, current.version(), d);
    return true;
  }
  if (m.created_unix_ms == current.created_unix_ms) return true;
  if (auto why = model::incompatibility(current, m); !why.empty()) {
    std::lock_guard lk(mu_);
    if (auto [at, added] = incompatible_.try_emplace(d, m.created_unix_ms);
        added || std::exchange(at->second, m.created_unix_ms) != m.created_unix_ms)
      spdlog::warn(
          "serve: --watch passes over {}: {} (clients of this endpoint could not use it; serve it "
          "under another name)",
          d, why);
    return true;
  }
  return false;
}

std::optional<model::model_info> frontend::newest_watched(const model::model_info& current) {
  std::optional<model::model_info> best;
  std::error_code ec;
  for (const auto& d : watched_dirs(cfg_.watch)) {
    if (!fs::exists(d + "/model.json", ec)) continue;
    // A model.pt not there yet is a model being copied, not another user's (it said "not this
    // user's own (or a link)"): looked at again at the next poll.
    if (struct stat st{}; ::lstat((d + "/model.pt").c_str(), &st) != 0) continue;
    if (!own_model_dir(cfg_.watch, d)) {
      std::lock_guard lk(mu_);
      if (passed_over_.insert(d).second)
        spdlog::warn(
            "serve: --watch passes over {}: not this user's own (or a link): a model is taken only "
            "from directories and files the server's user owns",
            d);
      continue;
    }
    auto m = model::read_model_dir(d);
    if (!m || passes_over(d, current, *m)) continue;
    const auto stamp = stamp_of(d, m->created_unix_ms);  // a stat (over NFS, maybe): not under the lock
    const auto key = watch_key(d);
    std::lock_guard lk(mu_);
    if (!untried_or_settled(key, stamp)) continue;
    if (!best || m->created_unix_ms > best->created_unix_ms) best = *m;
  }
  std::lock_guard lk(mu_);
  watch_primed_ = true;
  return best;
}

expected<std::string> newest_watched_model(const std::string& watch) {
  std::error_code ec;
  fs::directory_iterator(watch, ec);
  if (ec) return make_unexpected(core_errc::io_error, "--watch " + watch + ": " + ec.message());
  std::optional<model::model_info> best;
  for (const auto& d : watched_dirs(watch)) {
    if (!fs::exists(d + "/model.json", ec) || !own_model_dir(watch, d)) continue;
    auto m = model::read_model_dir(d);
    if (m && (!best || m->created_unix_ms > best->created_unix_ms)) best = *m;
  }
  if (!best)
    return make_unexpected(core_errc::invalid_argument,
                           "--watch " + watch + ": no model directory of this user's under it yet");
  return best->dir;
}

}  // namespace troupe::serve
