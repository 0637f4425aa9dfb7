#include "access_log.hpp"

#include <cerrno>
#include <cstring>
#include <ctime>
#include <memory>

namespace troupe::serve {

namespace {
// The request's own text, quoted in the line: a quote, a backslash or a control byte as %XX, so
// that a line is one line and its fields split.
std::string escaped(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (unsigned char c : s) {
    if (c < 0x20 || c == 0x7f || c == '"' || c == '\\' || c == ' ') {
      char hex[4];
      std::snprintf(hex, sizeof hex, "%%%02X", c);
      out += hex;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}
}  // namespace

expected<std::unique_ptr<access_log>> access_log::open(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "ae");
  if (!f) return make_unexpected(core_errc::io_error, path + ": " + std::strerror(errno));
  return std::unique_ptr<access_log>(new access_log(f));
}

access_log::~access_log() {
  std::fclose(f_);
}

std::string access_log::line(const observe::http_access& a, std::int64_t wall_ms) {
  const std::time_t secs = static_cast<std::time_t>(wall_ms / 1000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char when[32];
  std::strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%S", &tm);
  char tail[96];
  std::snprintf(tail, sizeof tail, ".%03dZ", static_cast<int>(wall_ms % 1000));
  std::string out = std::string(when) + tail + " " + (a.remote.empty() ? "-" : a.remote) + " \"";
  out += a.method.empty() ? "-" : escaped(a.method) + " " + escaped(a.target);
  std::snprintf(tail, sizeof tail, "\" %d %zu %.3fms", a.status, a.bytes,
                std::chrono::duration<double, std::milli>(a.took).count());
  out += tail;
  if (!a.request_id.empty()) out += " id=" + escaped(a.request_id);
  return out;
}

void access_log::write(const observe::http_access& a, std::int64_t wall_ms) {
  auto text = line(a, wall_ms);
  text += '\n';
  std::lock_guard lk(mu_);
  std::fwrite(text.data(), 1, text.size(), f_);
  std::fflush(f_);
}

}  // namespace troupe::serve
