#include "troupe/cluster/standby.hpp"

#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>

#include "troupe/cluster/errc.hpp"

namespace troupe::cluster {

namespace {
constexpr const char* magic = "troupe-standby-1";

unexpected malformed(const std::string& why) {
  return make_unexpected(cluster_errc::invalid_spec, "standby identity: " + why);
}

void put(std::string& out, const std::string& s) {
  out += s;
  out.push_back('\0');
}
}  // namespace

std::string encode_standby_identity(const standby_identity& id) {
  std::string out;
  put(out, magic);
  put(out, id.log_file);
  put(out, std::to_string(id.env.size()));
  for (const auto& [k, v] : id.env) put(out, k + "=" + v);
  put(out, std::to_string(id.argv.size()));
  for (const auto& a : id.argv) put(out, a);
  return out;
}

expected<standby_identity> decode_standby_identity(const std::string& bytes) {
  std::vector<std::string> items;
  std::size_t start = 0;
  for (std::size_t end; (end = bytes.find('\0', start)) != std::string::npos; start = end + 1)
    items.push_back(bytes.substr(start, end - start));
  if (start != bytes.size()) return malformed("the last string has no terminating NUL");
  std::size_t at = 0;
  auto next = [&]() -> const std::string* { return at < items.size() ? &items[at++] : nullptr; };
  auto count = [&](const char* what) -> expected<std::size_t> {
    const std::string* s = next();
    std::size_t n = 0;
    if (!s || std::from_chars(s->data(), s->data() + s->size(), n).ec != std::errc{} || n > items.size())
      return malformed(std::string("bad ") + what + " count");
    return n;
  };
  const std::string* head = next();
  if (!head || *head != magic) return malformed("does not start with " + std::string(magic));
  if (items.size() < 4) return malformed("too short");
  standby_identity id;
  if (const std::string* log = next()) id.log_file = *log;
  auto n = count("environment");
  if (!n) return n.err();
  for (std::size_t i = 0; i < *n; ++i) {
    const std::string* kv = next();
    auto eq = kv ? kv->find('=') : std::string::npos;
    if (eq == std::string::npos || eq == 0) return malformed("environment entry without NAME=");
    id.env.emplace_back(kv->substr(0, eq), kv->substr(eq + 1));
  }
  auto m = count("argv");
  if (!m) return m.err();
  if (*m == 0) return malformed("empty argv");
  for (std::size_t i = 0; i < *m; ++i) {
    const std::string* a = next();
    if (!a) return malformed("argv shorter than its count");
    id.argv.push_back(*a);
  }
  if (at != items.size()) return malformed("trailing strings");
  return id;
}

expected<standby_identity> read_standby_identity(int fd) {
  std::string bytes;
  char buf[4096];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0)
      return make_unexpected(cluster_errc::io_error,
                             std::string("standby identity: read: ") + std::strerror(errno));
    if (n == 0) break;
    bytes.append(buf, static_cast<std::size_t>(n));
  }
  if (bytes.empty())
    return make_unexpected(cluster_errc::io_error, "standby identity: the launcher closed the channel");
  return decode_standby_identity(bytes);
}

}  // namespace troupe::cluster
