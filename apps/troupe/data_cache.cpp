#include "data_cache.hpp"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <optional>

#include "age.hpp"
#include "troupe/core/clock.hpp"
#include "troupe/job/dataset_cache.hpp"

namespace troupe::cli {

namespace {

struct cache_flags {
  std::string root = "jobs", cache;
  bool root_given = false;
  std::string older_than = "0d";
  bool dry_run = false, prune = false;
  std::string dir() const { return cache.empty() ? job::default_dataset_cache(root) : cache; }
};

std::string megabytes(std::uint64_t bytes) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f MB", static_cast<double>(bytes) / 1e6);
  return b;
}

// "3.2 h ago", "2.0 d ago"; "never" for an entry with no pin and no file (it read as 1970).
std::string ago(std::int64_t then_ms, std::int64_t now_ms) {
  if (then_ms <= 0) return "never";
  const double h = static_cast<double>(now_ms - then_ms) / 3.6e6;
  char b[32];
  if (h < 48)
    std::snprintf(b, sizeof b, "%.1f h ago", std::max(0.0, h));
  else
    std::snprintf(b, sizeof b, "%.1f d ago", h / 24);
  return b;
}

// The source of an entry's train store, without ":train" (an entry holds the test store too).
std::string source_of(const job::cache_entry& e) {
  std::string s = e.source.empty() ? "?" : e.source;
  if (s.size() > 6 && s.compare(s.size() - 6, 6, ":train") == 0) s.resize(s.size() - 6);
  return s;
}

void print_entry(const job::cache_entry& e, std::int64_t now_ms, const char* tag) {
  if (!e.made_by_a_job) {
    std::printf("%s%-18s no dataset cache entry (no job made it): not opened, never pruned\n", tag,
                e.key.c_str());
    return;
  }
  if (!e.ours) {  // not opened: its size and last use are not this user's to read
    const std::string why = job::entry_problem(e.dir);
    std::printf("%s%-18s not this user's (%s): not opened, never pruned\n", tag, e.key.c_str(),
                why.substr(0, why.find(':')).c_str());
    return;
  }
  std::printf("%s%-18s %10s  last used %-10s %s%s\n", tag, e.key.c_str(), megabytes(e.bytes).c_str(),
              ago(e.last_used_ms, now_ms).c_str(), source_of(e).c_str(), e.in_use ? "  (in use)" : "");
}

int list(const cache_flags& f, std::int64_t now_ms) {
  auto entries = job::list_cache(f.dir());
  if (!entries) return run_error(entries.err());
  std::uint64_t total = 0;
  std::size_t n = 0;
  for (const auto& e : *entries) {
    print_entry(e, now_ms, "");
    total += e.bytes;
    n += e.made_by_a_job;
  }
  std::printf("%s: %zu entr%s, %s\n", f.dir().c_str(), n, n == 1 ? "y" : "ies", megabytes(total).c_str());
  return 0;
}

// --older-than: an age as `jobs prune` takes it (7d, 12h, 30m); a bare number is days, as before.
std::optional<double> older_than_seconds(const std::string& text) {
  if (!text.empty() && text.find_first_not_of("0123456789.") == std::string::npos)
    if (auto days = age_seconds(text + "d")) return days;
  return age_seconds(text);
}

int prune(const cache_flags& f, std::int64_t now_ms) {
  const auto age = older_than_seconds(f.older_than);
  if (!age) return usage_error(age_refusal(f.older_than));
  const auto before = now_ms - static_cast<std::int64_t>(std::llround(*age * 1000.0));
  std::vector<job::cache_entry> kept, theirs;
  auto removed = job::prune_cache(f.dir(), before + 1, f.dry_run, &kept, &theirs);
  if (!removed) return run_error(removed.err());
  std::uint64_t freed = 0;
  for (const auto& e : *removed) {
    print_entry(e, now_ms, f.dry_run ? "would remove " : "removed ");
    freed += e.bytes;
  }
  for (const auto& e : kept) print_entry(e, now_ms, "kept (a job uses it) ");
  for (const auto& e : theirs) print_entry(e, now_ms, "skipped ");
  std::printf("%s: %s %zu entr%s, %s\n", f.dir().c_str(), f.dry_run ? "would remove" : "removed",
              removed->size(), removed->size() == 1 ? "y" : "ies", megabytes(freed).c_str());
  return 0;
}

int run_cache(const cache_flags& f) {
  // `data cache --root R prune --cache C`: the two flags of two subcommands, one or the other still.
  if (!f.cache.empty() && f.root_given) return usage_error("--root excludes --cache: give one of them");
  // A mistyped --root or --cache read as an empty cache ("0 entries"): named instead.
  std::error_code ec;
  if (!std::filesystem::is_directory(f.dir(), ec)) {
    std::string where = !f.cache.empty() ? "--cache " + f.cache
                        : f.root_given   ? "--root " + f.root
                                         : "the default root " + f.root + " (give --root or --cache)";
    std::string why = "no such directory";
    if (f.cache.empty() && f.dir() != f.root + "/datasets")
      why += "; " + f.root + "/datasets is another user's, so this user's cache is " + f.dir();
    return usage_error(where + ": no dataset cache at " + f.dir() + " (" + why + ")");
  }
  const auto now_ms = clock::system().wall_ms();
  return f.prune ? prune(f, now_ms) : list(f, now_ms);
}

}  // namespace

runner add_data_cache(CLI::App& data_cmd, std::shared_ptr<int> mode, int id) {
  auto f = std::make_shared<cache_flags>();
  auto* c =
      data_cmd.add_subcommand("cache", "List the dataset cache's entries (size, last use, in use); prune");
  auto where = [f](CLI::App* app) {
    auto* root =
        app->add_option("--root", f->root,
                        "jobs root (the cache: ROOT/datasets, or ROOT/datasets-UID where another user "
                        "has that; default jobs)");
    app->add_option("--cache", f->cache, "the cache directory itself ([job] dataset_cache)")->excludes(root);
    app->parse_complete_callback([f, root] { f->root_given = f->root_given || root->count() > 0; });
  };
  where(c);
  auto* p = c->add_subcommand("prune", "Remove the entries no job uses (a running job's is kept)");
  where(p);
  p->add_option("--older-than", f->older_than,
                "only entries last used longer ago than this: 2w, 7d, 12h, 30m, 90s (a bare number: days; "
                "default 0: all)");
  p->add_flag("--dry-run", f->dry_run, "say what would be removed; remove nothing");
  c->callback([mode, id] { *mode = id; });
  p->callback([mode, id, f] {
    *mode = id;
    f->prune = true;
  });
  return [f] { return run_cache(*f); };
}

}  // namespace troupe::cli
