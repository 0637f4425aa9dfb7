// Small helpers around the HTTP server: who may listen where, and who carries the token.
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

#include "troupe/observe/http_server.hpp"
#include "troupe/transport/errc.hpp"

namespace troupe::observe {

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

}  // namespace troupe::observe
