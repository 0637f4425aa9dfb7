#include "troupe/observe/job_events.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "job_files.hpp"
#include "troupe/core/clock.hpp"

namespace troupe::observe {

using nlohmann::json;

const event_value* job_event::find(const std::string& key) const {
  for (const auto& [k, v] : fields)
    if (k == key) return &v;
  return nullptr;
}

std::string job_event::text(const std::string& key) const {
  auto* v = find(key);
  return v && std::holds_alternative<std::string>(*v) ? std::get<std::string>(*v) : std::string();
}

double job_event::number(const std::string& key, double fallback) const {
  auto* v = find(key);
  if (!v) return fallback;
  if (auto* d = std::get_if<double>(v)) return *d;
  if (auto* i = std::get_if<std::int64_t>(v)) return static_cast<double>(*i);
  return fallback;
}

std::string to_json_line(const job_event& e) {
  json j;
  j["t_ms"] = e.t_ms;
  j["kind"] = e.kind;
  for (const auto& [k, v] : e.fields) std::visit([&](const auto& x) { j[k] = x; }, v);
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

expected<job_event> from_json_line(const std::string& line) {
  // An event is one flat object: a line nesting deeper is not one, and is not built (a deep
  // document costs memory, and recursion to dump).
  if (!json_depth_within(line, 2))
    return make_unexpected(core_errc::parse_error, "not an event line (nested too deep)");
  json j = json::parse(line, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("kind") || !j["kind"].is_string() ||
      !j.contains("t_ms") || !j["t_ms"].is_number_unsigned())
    return make_unexpected(core_errc::parse_error, "not an event line");
  job_event e;
  e.t_ms = j["t_ms"].get<std::uint64_t>();
  e.kind = j["kind"].get<std::string>();
  for (auto& [k, v] : j.items()) {
    if (k == "t_ms" || k == "kind") continue;
    if (v.is_string())
      e.fields.emplace_back(k, v.get<std::string>());
    else if (v.is_boolean())
      e.fields.emplace_back(k, v.get<bool>());
    else if (v.is_number_integer())
      e.fields.emplace_back(k, v.get<std::int64_t>());
    else if (v.is_number())
      e.fields.emplace_back(k, v.get<double>());
  }
  return e;
}

expected<std::unique_ptr<event_log>> event_log::open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return make_unexpected(core_errc::io_error, path + ": " + std::strerror(errno));
  // A line torn by a crash gets its newline now, so the next event starts a line of its own (the
  // torn one is then skipped by readers).
  char last = '\n';
  off_t size = ::lseek(fd, 0, SEEK_END);
  if (size > 0 && ::pread(fd, &last, 1, size - 1) == 1 && last != '\n' && ::write(fd, "\n", 1) != 1) {
    int e = errno;
    ::close(fd);
    return make_unexpected(core_errc::io_error, path + ": " + std::strerror(e));
  }
  return std::unique_ptr<event_log>(new event_log(path, fd));
}

event_log::~event_log() {
  if (fd_ >= 0) ::close(fd_);
}

expected<void> event_log::append(job_event e, bool durable) {
  if (e.t_ms == 0) e.t_ms = static_cast<std::uint64_t>(clock::system().wall_ms());
  std::string line = to_json_line(e) + "\n";
  std::size_t done = 0;
  while (done < line.size()) {
    ssize_t w = ::write(fd_, line.data() + done, line.size() - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0)
      return make_unexpected(core_errc::io_error, path_ + ": " + std::strerror(w < 0 ? errno : ENOSPC));
    done += static_cast<std::size_t>(w);
  }
  if (durable && ::fdatasync(fd_) != 0)
    return make_unexpected(core_errc::io_error, path_ + ": fdatasync: " + std::strerror(errno));
  return {};
}

std::string_view peek_kind(std::string_view line) {
  auto k = line.find("\"kind\"");
  if (k == std::string_view::npos) return {};
  auto at = line.find_first_not_of(" \t:", k + 6);
  if (at == std::string_view::npos || line[at] != '"') return {};
  auto end = line.find('"', at + 1);
  return end == std::string_view::npos ? std::string_view() : line.substr(at + 1, end - at - 1);
}

event_read parse_event_lines(std::string_view text, std::uint64_t offset, const line_filter& parse) {
  event_read r;
  std::size_t at = 0;
  while (true) {
    auto nl = text.find('\n', at);
    if (nl == std::string_view::npos) break;  // an unfinished (or torn) last line: not consumed
    const auto line = text.substr(at, nl - at);
    at = nl + 1;
    if (line.empty() || (parse && !parse(line))) continue;  // filtered before a copy or a parse
    if (auto e = from_json_line(std::string(line)))
      r.events.push_back(std::move(*e));
    else
      ++r.skipped;
  }
  r.next_offset = offset + at;
  return r;
}

expected<event_read> read_events(const std::string& path, std::uint64_t offset, const line_filter& parse) {
  event_read r;
  r.next_offset = offset;
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return r;
  // One read of what the file holds now (a line appended meanwhile is left for the next read).
  const auto end = static_cast<std::int64_t>(in.tellg());
  if (end <= static_cast<std::int64_t>(offset)) return r;
  std::string text(static_cast<std::size_t>(end - static_cast<std::int64_t>(offset)), '\0');
  in.seekg(static_cast<std::streamoff>(offset));
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<std::size_t>(in.gcount()));
  return parse_event_lines(text, offset, parse);
}

}  // namespace troupe::observe
