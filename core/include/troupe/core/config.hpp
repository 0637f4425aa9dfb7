// Typed configuration from TOML files and `--set key=value` flags.
//
// A module reads its section into its own struct with a config_reader, then calls finish() once:
// the first problem (missing key, wrong type, value out of range, key nobody read) comes back as
// one error that names the file, the line, the dotted key and the reason, e.g.
//   "config: wrong type: job.toml:4: key 'job.workers': expected an integer, got a string".
// toml++ stays out of this header (it is heavy); config_doc hides it.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <limits>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "troupe/core/error.hpp"

namespace troupe {

// A parsed TOML document plus the name of its source (for error messages). Cheap to copy
// (shared, immutable after the overrides are applied). Not thread-safe while overrides are applied.
class config_doc {
 public:
  struct impl;

  config_doc();
  static expected<config_doc> from_file(const std::string& path);
  static expected<config_doc> from_string(std::string_view text, std::string source = "<string>");

  // Applies "a.b.c=value" (value parsed as a TOML value, else taken as a string), creating tables.
  // A reader's error about the key names `origin` ("--set a.b.c=value"; default: "--set" and the
  // assignment), not the file.
  expected<void> apply_override(std::string_view assignment, std::string origin = "");

  const std::string& source() const;
  bool has(std::string_view dotted_key) const;
  // Where a key was given, for an error about it: the --set flag that set it (or a table holding
  // it), else "<source>:<line>", else the source alone (a key left at its default).
  std::string where(std::string_view dotted_key) const;
  // The document as TOML text (used to hand a job's config to child nodes).
  std::string to_toml() const;

  const impl& get_impl() const { return *impl_; }

 private:
  friend class config_reader;
  std::shared_ptr<impl> impl_;
};

class config_reader;

// A view of one table of a document. Getters never throw: a problem is recorded in the reader
// (first one wins) and the default is returned, so a module reads all its keys and checks once.
class config_section {
 public:
  using i64 = std::int64_t;
  static constexpr i64 i64_min = std::numeric_limits<i64>::min();
  static constexpr i64 i64_max = std::numeric_limits<i64>::max();

  const std::string& path() const { return path_; }
  bool has(std::string_view key) const;

  i64 get_int(std::string_view key, i64 def, i64 min = i64_min, i64 max = i64_max);
  i64 require_int(std::string_view key, i64 min = i64_min, i64 max = i64_max);
  double get_double(std::string_view key, double def, double min = -1e308, double max = 1e308);
  bool get_bool(std::string_view key, bool def);
  std::string get_string(std::string_view key, const std::string& def);
  std::string require_string(std::string_view key);
  // A string that must be one of `allowed`.
  std::string get_enum(std::string_view key, const std::string& def,
                       std::initializer_list<std::string_view> allowed);
  std::vector<i64> get_ints(std::string_view key, const std::vector<i64>& def);
  std::vector<std::string> get_strings(std::string_view key, const std::vector<std::string>& def);
  // An array of numbers (integers read as doubles).
  std::vector<double> get_doubles(std::string_view key, const std::vector<double>& def);
  // A nested table; an absent one reads as empty (every getter returns its default).
  config_section section(std::string_view key);

  // Records a problem found by the caller's own validation (e.g. min_workers > max_workers).
  void fail(std::string_view key, core_errc code, const std::string& reason);
  // `key` is read only where `when` says (another `source`): set where it is not read, it is
  // refused saying that instead of "unknown key".
  void read_with(std::string_view key, const std::string& when);

 private:
  friend class config_reader;
  config_section(config_reader* reader, std::string path) : reader_(reader), path_(std::move(path)) {}
  std::string full_key(std::string_view key) const;
  config_reader* reader_;
  std::string path_;
};

class config_reader {
 public:
  explicit config_reader(const config_doc& doc);
  config_reader(const config_reader&) = delete;
  config_reader& operator=(const config_reader&) = delete;

  config_section root() { return config_section(this, ""); }
  config_section section(std::string_view path) { return root().section(path); }

  // Marks every key under `path` as read (for sections owned by someone else).
  void ignore(std::string_view path);

  // The first recorded problem; else, with reject_unknown, an error for the first key that no
  // getter asked for (a typo such as `wrokers`).
  expected<void> finish(bool reject_unknown = true);

  // The document as the readers saw it: every key the document holds, plus every key a getter
  // read and found absent, set to the default it returned (`troupe config check --print`).
  const config_doc& effective() const { return effective_; }

 private:
  friend class config_section;
  template <class T>
  void note_default(const std::string& full_key, const T& value);
  config_doc doc_;
  config_doc effective_;
  std::vector<std::string> read_;
  std::vector<std::string> ignored_;
  std::vector<std::pair<std::string, std::string>> read_with_;  // key, where it is read
  error first_;
  void record(const std::string& full_key, core_errc code, const std::string& reason);
  std::string hint(const std::string& leaf) const;
};

}  // namespace troupe
