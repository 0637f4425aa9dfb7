// A small HTTP/1.1 server for troupe's own pages and APIs: the master's Prometheus /metrics, the
// dashboard and `troupe serve`'s inference endpoint. Boost.Beast on Asio threads of its own; this
// header keeps Beast and Asio out of the includers.
//
// Contract:
// - The handler runs on one of the server's `threads`: with one, one request at a time; with more,
//   that many at once (the handler must then be thread-safe), so one slow request holds up only
//   its own connection. It must not block for long (read a few files, render text). An exception
//   from it becomes a 500 naming nothing internal.
// - An asynchronous handler (http_async_handler) answers later, from any thread, through the
//   http_responder it is given: the connection waits for that answer (no read timeout meanwhile;
//   the owner bounds the wait), then reads its next request. A responder dropped without an
//   answer answers 500 itself. Every responder must be answered or dropped before the server is
//   destroyed (it holds the connection, which the server's io context runs).
// - Bad requests never reach the handler and never stop the server: headers over
//   max_header_bytes get 431, a body over max_body_bytes 413, a malformed request 400, a client
//   silent past read_timeout is closed (slowloris), and connections beyond max_connections get a
//   503 and are closed at once.
// - The destructor closes the listener and every connection and joins the thread; it never throws.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "troupe/core/error.hpp"

namespace troupe::observe {

struct http_request {
  std::string method;                          // "GET", "POST", ...
  std::string target;                          // as sent: "/api/jobs?x=1"
  std::string path;                            // percent-decoded, without the query: "/api/jobs"
  std::map<std::string, std::string> query;    // decoded query parameters
  std::map<std::string, std::string> headers;  // names lower-case; one sent twice: values joined by ", "
  std::string body;
  std::string remote;  // "ip:port" of the client
};

struct http_response {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;  // extra headers
};

using http_handler = std::function<http_response(const http_request&)>;

// The answer to one request of an asynchronous handler: copyable, thread-safe; the first call
// answers, later ones do nothing.
class http_responder {
 public:
  struct state;
  http_responder() = default;
  explicit http_responder(std::shared_ptr<state> s) : s_(std::move(s)) {}
  void operator()(http_response r) const;
  explicit operator bool() const { return static_cast<bool>(s_); }

 private:
  std::shared_ptr<state> s_;
};
using http_async_handler = std::function<void(http_request&& request, http_responder respond)>;

// One answered request, for an access log (http_options::on_answer).
struct http_access {
  std::string remote;      // "ip:port"
  std::string method;      // "" for a request the server could not read (400, 413, 431, 503 at accept)
  std::string target;      // as sent
  std::string request_id;  // its X-Request-ID header ("" without)
  int status = 0;
  std::size_t bytes = 0;            // the answer's body
  std::chrono::nanoseconds took{};  // from the request read to the answer handed over
};

struct http_options {
  std::string listen = "127.0.0.1:0";  // "host:port" (an IP address or a host name); port 0 picks a free one
  std::size_t threads = 1;             // handler threads
  std::size_t max_connections = 256;
  std::size_t max_header_bytes = 8 << 10;
  std::size_t max_body_bytes = 64 << 10;
  std::chrono::milliseconds read_timeout{5'000};
  // Called (on a server thread) with the status of each error the server answers by itself, before
  // any handler: 400 unparsable, 413 body too large, 431 headers too large, 503 too many clients.
  std::function<void(int status)> on_own_error;
  // Called (on a server or handler thread) with every answer, the server's own errors included;
  // unset: nothing is gathered. A request's X-Request-ID is sent back in its answer either way.
  std::function<void(const http_access&)> on_answer;
};

class http_server {
 public:
  // Binds and starts serving. Errors name the address (transport_errc::bad_address,
  // listen_failed).
  static expected<std::unique_ptr<http_server>> start(http_options options, http_handler handler);
  static expected<std::unique_ptr<http_server>> start(http_options options, http_async_handler handler);
  // Whether `listen` could be bound now (a socket bound and closed at once): for a server that
  // opens its endpoint later and would rather fail first. The same errors as start(); port 0 is
  // always free.
  static expected<void> check_listen(const std::string& listen);
  // The max_connections a server under the soft open-file limit `limit` keeps: `requested`, or the
  // limit less a reserve for everything else the process opens (128; half the limit under 256, where
  // the limit less 128 was not even tried and a flood ran the process out of descriptors).
  static std::size_t connections_within(std::size_t requested, std::uint64_t limit);
  ~http_server();
  http_server(const http_server&) = delete;
  http_server& operator=(const http_server&) = delete;

  // "host:port" actually bound (the port filled in).
  std::string address() const;
  std::uint16_t port() const;
  // Connections open now (for tests and the dashboard's own health).
  std::size_t connections() const;

  struct impl;

 private:
  explicit http_server(std::unique_ptr<impl> p);
  std::unique_ptr<impl> impl_;
};

// "host:port" with the host resolved to an IP address ("localhost:80" -> "127.0.0.1:80"; an IPv6
// address in brackets), the first address the resolver gives. Errors (transport_errc::bad_address)
// name the text and why.
expected<std::string> resolve_listen(const std::string& listen);
// Whether a host or "host:port" is a loopback address (127.x, ::1, localhost).
bool is_loopback(const std::string& host_or_listen);
// Whether the request carries `token` (`Authorization: Bearer T` or `?token=T`), compared in
// constant time; an empty token is never carried.
bool has_token(const http_request& r, const std::string& token);
// A TCP port free on `host` now (bound and released; another process may still take it); with
// `port`, that one, or an error when something listens on it.
expected<std::uint16_t> pick_free_port(const std::string& host, std::uint16_t port = 0);

// "%2e%2E/x" -> "../x"; '+' stays '+' in paths. Invalid escapes are kept as they are.
std::string percent_decode(const std::string& s);

// The origin form of a request target: an absolute-form one ("http://host:port/path?q", RFC 9112
// 3.2.2: a server must accept it) without its scheme and authority ("/path?q"; "/" when it names no
// path); any other target as it is.
std::string origin_form(std::string target);

}  // namespace troupe::observe
