// The dataset cache's entries (`<cache>/<key>/`, [job] dataset_cache: a built-in dataset imported
// once for every job that names it): what `troupe data cache` lists and `troupe data cache prune`
// removes. A job holds a pin on the entry it reads (a shared lock on `<entry>/in_use`, from before
// its preparation to the job's end), so prune never removes an entry a job uses (deleting one
// mid-job failed the job at its evaluation), and each pin marks the entry's last use (the file's
// modification time).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "troupe/core/error.hpp"

namespace troupe::job {

struct cache_entry {
  std::string key, dir;
  std::string source;  // the train store's manifest source ("fashion-mnist:train"); "" if unreadable
  std::uint64_t bytes = 0;
  std::int64_t last_used_ms = 0;  // unix ms of the last pin (else of the entry's newest file)
  bool in_use = false;            // a job pins it now (or a preparer holds it)
  bool ours = true;               // this user's alone (entry_problem): else listed, never opened or pruned
  // A directory a job made (its name a dataset key, `<source>-<16 hex digits>`, holding the entry's
  // pin, its preparation lock or a train store): else listed, never opened, measured or pruned (a
  // mistyped --cache pointed at a directory of the user's own files pruned them all).
  bool made_by_a_job = true;
};

// The directory name of a cache entry: the source with every character but a letter or digit as
// '-', then '-' and the config's hash in 16 hex digits ("fashion-mnist-0123456789abcdef").
std::string cache_entry_name(std::string_view source, std::uint64_t hash);
// Whether `name` is one cache_entry_name could give.
bool is_cache_entry_name(std::string_view name);

// The dataset cache of jobs under `root` whose job file names none ([job] dataset_cache):
// root/datasets, or root/datasets-<uid> where that is not the user's own (a root several users
// share: the first user's cache is no place for another's entries, and each gets one of their own).
std::string default_dataset_cache(const std::string& root);

// Why the entry `entry_dir` is no place this user's job may read or prepare (cluster/own_path.hpp: a
// link, another user's, others may write in it, or its cache directory lets another user replace it:
// records read back are trusted, and another user who could write them fed a job labels of theirs);
// empty when it is fine or does not exist yet.
std::string entry_problem(const std::string& entry_dir);

// A job's pin on one entry: held while the object lives.
class cache_pin {
 public:
  // Creates `entry_dir` if missing, takes the shared lock (blocking while a prune removes the entry:
  // the job then prepares it anew) and marks the entry used now. Errors name the file.
  static expected<std::shared_ptr<cache_pin>> take(const std::string& entry_dir);
  ~cache_pin();
  cache_pin(const cache_pin&) = delete;
  cache_pin& operator=(const cache_pin&) = delete;

 private:
  explicit cache_pin(int fd) : fd_(fd) {}
  int fd_ = -1;
};

// Every entry of `cache`, most recently used first; a missing cache is an empty list.
expected<std::vector<cache_entry>> list_cache(const std::string& cache);

// Removes the entries no job pins that were last used before `used_before_ms` (unix ms; a value
// past now: every unpinned entry); with `dry_run`, removes nothing. Returns the entries removed (or
// that would be), in `kept_in_use` those passed over because a job uses them, and in `theirs` the
// entries of another user and the directories no job made (never pruned: cache_entry::ours,
// cache_entry::made_by_a_job).
expected<std::vector<cache_entry>> prune_cache(const std::string& cache, std::int64_t used_before_ms,
                                               bool dry_run, std::vector<cache_entry>* kept_in_use = nullptr,
                                               std::vector<cache_entry>* theirs = nullptr);

}  // namespace troupe::job
