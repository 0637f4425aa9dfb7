#include "troupe/core/ids.hpp"

#include <charconv>
#include <random>

namespace troupe {

namespace {
bool valid_name(std::string_view s, bool allow_slash) {
  if (s.empty() || s.size() > 64) return false;
  if (!(s[0] >= 'a' && s[0] <= 'z')) return false;
  for (char c : s) {
    bool ok =
        (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-' || (allow_slash && c == '/');
    if (!ok) return false;
  }
  return true;
}
}  // namespace

bool valid_node_name(std::string_view name) noexcept {
  return valid_name(name, false);
}
bool valid_actor_name(std::string_view name) noexcept {
  return valid_name(name, true);
}

std::string node_id::to_string() const {
  return name + "#" + std::to_string(incarnation);
}

expected<node_id> node_id::parse(std::string_view text) {
  auto hash = text.find('#');
  std::string_view name = text.substr(0, hash);
  if (!valid_node_name(name))
    return make_unexpected(
        core_errc::parse_error,
        "node id '" + std::string(text) +
            "': the name must be 1-64 characters of a-z, 0-9, '_' or '-', starting with a letter");
  node_id id{std::string(name), 0};
  if (hash != std::string_view::npos) {
    auto num = text.substr(hash + 1);
    auto [ptr, ec] = std::from_chars(num.data(), num.data() + num.size(), id.incarnation);
    if (num.empty() || ec != std::errc() || ptr != num.data() + num.size())
      return make_unexpected(core_errc::parse_error,
                             "node id '" + std::string(text) + "': incarnation must be an unsigned integer");
  }
  return id;
}

std::string actor_address::to_string() const {
  return name + "@" + node.to_string();
}

std::string make_job_id() {
  std::random_device rd;
  std::uint64_t v = (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
  static const char* hex = "0123456789abcdef";
  std::string s(16, '0');
  for (int i = 15; i >= 0; --i, v >>= 4) s[i] = hex[v & 15];
  return s;
}

}  // namespace troupe
