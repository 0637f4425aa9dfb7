// Small helpers around the HTTP server: decoding targets, who may listen where, who carries the token.
#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <cctype>
#include <cstdint>

#include "http_parse.hpp"
#include "troupe/observe/http_server.hpp"
#include "troupe/transport/errc.hpp"

namespace troupe::observe {

std::string origin_form(std::string target) {
  const auto scheme = target.find("://");
  if (target.empty() || target[0] == '/' || scheme == std::string::npos) return target;
  for (std::size_t i = 0; i < scheme; ++i)  // a scheme: letters, digits, + - . (RFC 3986 3.1)
    if (!std::isalnum(static_cast<unsigned char>(target[i])) && target[i] != '+' && target[i] != '-' &&
        target[i] != '.')
      return target;
  const auto path = target.find_first_of("/?", scheme + 3);
  if (path == std::string::npos) return "/";
  return target[path] == '?' ? "/" + target.substr(path) : target.substr(path);
}

std::string percent_decode(const std::string& s) {
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size()) {
      int a = hex(s[i + 1]), b = hex(s[i + 2]);
      if (a >= 0 && b >= 0) {
        out.push_back(static_cast<char>(a * 16 + b));
        i += 2;
        continue;
      }
    }
    out.push_back(s[i]);
  }
  return out;
}

std::map<std::string, std::string> parse_query(const std::string& q) {
  std::map<std::string, std::string> m;
  std::size_t at = 0;
  while (at <= q.size() && !q.empty()) {
    auto amp = q.find('&', at);
    std::string kv = q.substr(at, amp == std::string::npos ? std::string::npos : amp - at);
    auto eq = kv.find('=');
    if (!kv.empty())
      m[percent_decode(kv.substr(0, eq))] = eq == std::string::npos ? "" : percent_decode(kv.substr(eq + 1));
    if (amp == std::string::npos) break;
    at = amp + 1;
  }
  return m;
}

bool is_loopback(const std::string& host_or_listen) {
  const auto& s = host_or_listen;
  return s.rfind("127.", 0) == 0 || s == "::1" || s.rfind("[::1]", 0) == 0 || s == "localhost" ||
         s.rfind("localhost:", 0) == 0;
}

bool has_token(const http_request& r, const std::string& token) {
  if (token.empty()) return false;
  std::string given;
  if (auto it = r.headers.find("authorization"); it != r.headers.end() && it->second.rfind("Bearer ", 0) == 0)
    given = it->second.substr(7);
  else if (auto q = r.query.find("token"); q != r.query.end())
    given = q->second;
  if (given.size() != token.size()) return false;
  unsigned char diff = 0;
  for (std::size_t i = 0; i < given.size(); ++i) diff |= static_cast<unsigned char>(given[i] ^ token[i]);
  return diff == 0;
}

expected<std::string> resolve_listen(const std::string& listen) {
  namespace asio = boost::asio;
  auto colon = listen.rfind(':');
  if (colon == std::string::npos || colon == 0)
    return make_unexpected(transport_errc::bad_address, "'" + listen + "' is not host:port");
  std::string host = listen.substr(0, colon), port_text = listen.substr(colon + 1);
  if (host.size() > 1 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  char* end = nullptr;
  unsigned long port = std::strtoul(port_text.c_str(), &end, 10);
  if (port_text.empty() || *end != '\0' || port > 65535)
    return make_unexpected(transport_errc::bad_address,
                           "'" + listen + "': the port is not a number in 0..65535");
  boost::system::error_code ec;
  auto addr = asio::ip::make_address(host, ec);
  if (ec) {
    asio::io_context io;
    asio::ip::tcp::resolver resolver(io);
    auto found = resolver.resolve(host, port_text, asio::ip::resolver_base::numeric_service, ec);
    if (ec || found.empty())
      return make_unexpected(transport_errc::bad_address, "'" + listen + "': cannot resolve '" + host + "'" +
                                                              (ec ? ": " + ec.message() : ""));
    addr = found.begin()->endpoint().address();
  }
  std::string ip = addr.to_string();
  return (addr.is_v6() ? "[" + ip + "]" : ip) + ":" + std::to_string(port);
}

expected<std::uint16_t> pick_free_port(const std::string& host, std::uint16_t port) {
  namespace asio = boost::asio;
  boost::system::error_code ec;
  auto addr = asio::ip::make_address(host == "localhost" ? "127.0.0.1" : host, ec);
  if (ec) return make_unexpected(transport_errc::bad_address, "'" + host + "' is not an IP address");
  asio::io_context io;
  asio::ip::tcp::acceptor a(io);
  asio::ip::tcp::endpoint ep(addr, port);
  a.open(ep.protocol(), ec);
  // As a server binds (reuse_address): a port whose last connections linger in TIME_WAIT is free.
  if (!ec) a.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) a.bind(ep, ec);
  if (ec && port != 0)
    return make_unexpected(transport_errc::listen_failed,
                           host + ":" + std::to_string(port) + " is not free: " + ec.message());
  if (ec)
    return make_unexpected(transport_errc::listen_failed, "no free port on " + host + ": " + ec.message());
  const auto bound = a.local_endpoint(ec).port();
  a.close(ec);
  return bound;
}

std::string transfer_coding_problem(std::string_view te) {
  std::string v(te);
  for (auto& c : v) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return v == "chunked" ? "" : "Transfer-Encoding '" + std::string(te) + "' is not supported: chunked alone";
}

std::size_t http_server::connections_within(std::size_t requested, std::uint64_t limit) {
  const std::uint64_t reserve = std::min<std::uint64_t>(128, limit / 2);
  return limit > reserve && requested > limit - reserve ? static_cast<std::size_t>(limit - reserve)
                                                        : requested;
}

}  // namespace troupe::observe
