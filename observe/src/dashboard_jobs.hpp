// /api/jobs: one row per job directory under the root (see dashboard.hpp), from the files of each
// job read through job_files.hpp. A file that cannot be read gives its job an "error" naming it;
// the other jobs still list.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>

#include "job_files.hpp"

namespace troupe::observe {

// What the dashboard reads of a file at most, and how deep JSON may nest.
inline constexpr std::size_t max_json_bytes = 4 << 20;  // nodes.json, result.json
inline constexpr std::size_t max_json_depth = 64;
inline constexpr std::size_t max_events_read = 4 << 20;  // of events.jsonl per request

// A JSON file of the job: parsed when it is a regular file within the size and depth limits;
// errors name the file (std::errc::no_such_file_or_directory when it is missing).
expected<nlohmann::json> read_json_file(const job_directory& dir, const std::string& name);

// Each call reads only what was appended to a job's events since the last one (a running job's file
// grows by a few lines a second), at most max_events_read per job per call; a file that shrank or
// was replaced is re-read. Safe to call from several threads.
class job_rows {
 public:
  nlohmann::json row(const job_directory& dir, std::int64_t now_ms);

 private:
  struct entry {
    std::uint64_t size = 0, offset = 0, inode = 0;
    std::int64_t mtime_ns = -1;
    nlohmann::json row;
  };
  nlohmann::json events_row(const job_directory& dir, std::string& problem);
  static void fold(const std::string& text, entry& e);
  static void add_result(const job_directory& dir, nlohmann::json& r);
  // `result`: the job's result.json read by row() (null when none): the master's alone means ending.
  static void add_liveness(const job_directory& dir, nlohmann::json& r, std::int64_t now_ms,
                           const nlohmann::json* result);

  std::mutex mu_;
  std::map<std::string, entry> by_job_;
};

}  // namespace troupe::observe
