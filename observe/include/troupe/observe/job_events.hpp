// A job's event timeline: one JSON object per line in <job dir>/events.jsonl, appended by the
// master (membership changes, re-queues, checkpoints, scale requests, periodic metrics) and read
// by `troupe status` and the dashboard, so a finished or crashed job can be read afterwards.
//
// Line format: {"t_ms": <unix ms>, "kind": "<kind>", <fields...>}; field values are strings,
// numbers or booleans. Crash safety: each event is one write(2) of a whole line in O_APPEND mode;
// a line cut short by a crash (no newline, or not JSON) is skipped by the reader, never fatal.
// Events marked `durable` are fdatasync'ed before append() returns.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "troupe/core/error.hpp"

namespace troupe::observe {

using event_value = std::variant<std::string, double, std::int64_t, bool>;

struct job_event {
  std::uint64_t t_ms = 0;  // unix time, milliseconds
  std::string
      kind;  // "join", "leave", "died", "preempted", "fenced", "requeue", "checkpoint", "metrics", ...
  std::vector<std::pair<std::string, event_value>> fields;

  const event_value* find(const std::string& key) const;
  std::string text(const std::string& key) const;                    // "" when absent or not a string
  double number(const std::string& key, double fallback = 0) const;  // ints and doubles
};

// The file name inside a job directory.
inline constexpr const char* events_file_name = "events.jsonl";

class event_log {
 public:
  // Opens (creates) the file for appending. Errors (core_errc::io_error) name the path and errno.
  static expected<std::unique_ptr<event_log>> open(const std::string& path);
  ~event_log();
  event_log(const event_log&) = delete;
  event_log& operator=(const event_log&) = delete;

  // Appends one line; t_ms 0 is stamped with the current time. Errors name the file and the
  // cause ("No space left on device"); nothing half-written is left behind but a torn line the
  // reader skips.
  expected<void> append(job_event e, bool durable = false);
  const std::string& path() const { return path_; }

 private:
  event_log(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  std::string path_;
  int fd_ = -1;
};

struct event_read {
  std::vector<job_event> events;
  std::uint64_t next_offset = 0;  // where the next read continues (after the last whole line)
  std::size_t skipped = 0;        // lines that were not valid events
};

// Reads whole lines from `offset`; a last line without its newline is left for the next read
// (still being written, or torn by a crash). A missing file reads as empty. With `parse`, only
// the lines it returns true for are parsed (the others are neither events nor skipped): a reader
// that wants a few kinds leaves the rest unparsed (see peek_kind).
using line_filter = std::function<bool(std::string_view line)>;
expected<event_read> read_events(const std::string& path, std::uint64_t offset = 0,
                                 const line_filter& parse = {});
// The events of whole lines of `text`, which starts at byte `offset` of an events file (the reader
// holds the bytes; read_events reads them from a path).
event_read parse_event_lines(std::string_view text, std::uint64_t offset, const line_filter& parse = {});
// The "kind" value of an event line without parsing it ("" when not found).
std::string_view peek_kind(std::string_view line);

// Whether JSON text nests objects and arrays at most `max_depth` deep (strings and their escapes
// skipped): checked before parsing, since building and destroying a deeper document recurses.
bool json_depth_within(std::string_view text, std::size_t max_depth);

// One event as its JSON line (no newline); and back (nullopt-like error for a bad line).
std::string to_json_line(const job_event& e);
expected<job_event> from_json_line(const std::string& line);

}  // namespace troupe::observe
