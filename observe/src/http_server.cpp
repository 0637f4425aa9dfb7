#include "troupe/observe/http_server.hpp"

#include <sys/resource.h>

#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "http_parse.hpp"
#include "troupe/core/clock.hpp"
#include "troupe/transport/errc.hpp"

namespace troupe::observe {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = beast::http;
using tcp = asio::ip::tcp;

namespace {

// The server's own errors, as a JSON object {"error": text} (the serving protocol's errors are).
http_response server_error(int status, const std::string& text) {
  return http_response{status, "application/json", nlohmann::json{{"error", text}}.dump() + "\n", {}};
}

std::string reason_text(int status) {
  return std::string(bhttp::obsolete_reason(static_cast<bhttp::status>(status)));
}

}  // namespace

struct http_responder::state {
  std::function<void(http_response)> deliver;
  std::atomic<bool> done{false};
  ~state() {
    if (!done.exchange(true) && deliver)
      deliver(server_error(500, "internal error: the request was dropped"));
  }
};

void http_responder::operator()(http_response r) const {
  if (!s_ || s_->done.exchange(true)) return;
  s_->deliver(std::move(r));
}

struct http_server::impl {
  http_options opt;
  http_async_handler handler;
  // Before io: the sessions io still holds when it is destroyed count themselves out of `open`.
  std::atomic<std::size_t> open{0};
  asio::io_context io;
  tcp::acceptor acceptor{io};
  std::vector<std::thread> threads;
  std::string bound;
  std::uint16_t port = 0;

  std::optional<clock::time_point> last_accept_warning;  // (the acceptor's handler)

  void accept();
  void refuse(tcp::socket s);
};

namespace {

// The request's headers, names lower-case. A header sent twice is one list, its values joined by ", "
// (RFC 9110 5.3): a second Inference-Header-Content-Length or Authorization is then no longer a number
// or a token, and is refused, where the last one was used silently.
template <class Request>
std::map<std::string, std::string> headers_of(const Request& req) {
  std::map<std::string, std::string> out;
  for (const auto& f : req) {
    std::string name(f.name_string());
    for (auto& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    auto [it, fresh] = out.try_emplace(name, std::string(f.value()));
    if (!fresh) it->second.append(", ").append(f.value().data(), f.value().size());
  }
  return out;
}

// The access entry of an answer the server gives by itself (it read no request it could name).
http_access own_error_access(tcp::socket& s, int status, std::size_t bytes) {
  http_access a;
  beast::error_code ec;
  auto ep = s.remote_endpoint(ec);
  if (!ec) a.remote = ep.address().to_string() + ":" + std::to_string(ep.port());
  a.status = status;
  a.bytes = bytes;
  return a;
}

class session : public std::enable_shared_from_this<session> {
 public:
  session(tcp::socket s, http_server::impl& srv) : stream_(std::move(s)), srv_(srv) {
    ++srv_.open;
    // Beast reads at most the buffer's free capacity at a time (512 bytes at the least), and the
    // body parser empties it after each read: without room reserved here a 365 KB infer request
    // took ~700 reads of 512 bytes, 2.5 ms of its 4.2 ms (docs/benchmarks.md, serving on the GPU).
    buffer_.reserve(read_chunk);
  }
  ~session() { --srv_.open; }
  void start() { read(); }

 private:
  void read() {
    parser_.emplace();
    parser_->header_limit(static_cast<std::uint32_t>(srv_.opt.max_header_bytes));
    parser_->body_limit(srv_.opt.max_body_bytes);
    stream_.expires_after(srv_.opt.read_timeout);
    bhttp::async_read_header(
        stream_, buffer_, *parser_,
        [self = shared_from_this()](beast::error_code ec, std::size_t) { self->on_header(ec); });
  }

  // A client that sent `Expect: 100-continue` waits for the interim answer before its body (curl
  // does for bodies over 1 MiB: it waited a second for it, then sent anyway). A body over the limit
  // fails the header read already (its Content-Length), so it gets 413 instead.
  void on_header(beast::error_code ec) {
    if (!ec) head_ = parser_->get().method() == bhttp::verb::head;
    if (ec || parser_->is_done()) return on_read(ec);
    if (!beast::iequals(parser_->get()[bhttp::field::expect], "100-continue")) return read_body();
    static const std::string go_on = "HTTP/1.1 100 Continue\r\n\r\n";
    asio::async_write(stream_, asio::buffer(go_on),
                      [self = shared_from_this()](beast::error_code e, std::size_t) {
                        if (e) return self->close();
                        self->read_body();
                      });
  }

  void read_body() {
    bhttp::async_read(stream_, buffer_, *parser_,
                      [self = shared_from_this()](beast::error_code ec, std::size_t) { self->on_read(ec); });
  }

  void on_read(beast::error_code ec) {
    if (ec == bhttp::error::end_of_stream || ec == beast::error::timeout ||
        ec == asio::error::operation_aborted || ec == asio::error::connection_reset || ec == asio::error::eof)
      return close();
    if (ec == bhttp::error::header_limit) return send_error(431, "request headers too large");
    if (ec == bhttp::error::body_limit)  // the limit named (serve: max_body_bytes)
      return send_error(
          413, "request body too large: more than " + std::to_string(srv_.opt.max_body_bytes) + " bytes");
    if (ec) return send_error(400, "bad request: " + ec.message());
    auto& req = parser_->get();
    if (auto te = req.find(bhttp::field::transfer_encoding); te != req.end())
      if (auto why = transfer_coding_problem(std::string(te->value())); !why.empty())
        return send_error(501, why);
    http_request r = request_of(req);
    // No timer while the handler holds the request: the owner bounds its own wait.
    stream_.expires_never();
    http_responder respond(responder_for(r, req.keep_alive(), req.version() == 10));
    std::string target = r.target;
    try {
      srv_.handler(std::move(r), respond);
    } catch (const std::exception& e) {
      spdlog::warn("http: handler failed on {}: {}", target, e.what());
      respond(server_error(500, "internal error"));
    }
  }

  template <class Request>
  http_request request_of(Request& req) {
    http_request r;
    r.method = std::string(req.method_string());
    r.target = origin_form(std::string(req.target()));
    auto q = r.target.find('?');
    r.path = percent_decode(r.target.substr(0, q));
    if (q != std::string::npos) r.query = parse_query(r.target.substr(q + 1));
    r.headers = headers_of(req);
    r.body = std::move(req.body());
    beast::error_code rec;
    auto ep = stream_.socket().remote_endpoint(rec);
    if (!rec) r.remote = ep.address().to_string() + ":" + std::to_string(ep.port());
    return r;
  }

  // Where the handler's answer to `r` goes: written on this connection's strand. The access entry
  // is made only where someone reads it; the request id goes back in the answer (a client or proxy
  // matching answers to requests).
  // `http10`: an HTTP/1.0 request, whose kept connection the answer must say (Connection: keep-alive).
  std::shared_ptr<http_responder::state> responder_for(const http_request& r, bool keep_alive, bool http10) {
    auto st = std::make_shared<http_responder::state>();
    std::shared_ptr<http_access> access;
    std::string request_id;
    if (auto id = r.headers.find("x-request-id"); id != r.headers.end()) request_id = id->second;
    if (srv_.opt.on_answer)
      access = std::make_shared<http_access>(http_access{r.remote, r.method, r.target, request_id});
    st->deliver = [self = shared_from_this(), close_after = !keep_alive, access, http10,
                   request_id = std::move(request_id), arrived = clock::system().now()](http_response out) {
      if (!request_id.empty()) out.headers.emplace_back("X-Request-ID", request_id);
      if (http10 && !close_after) out.headers.emplace_back("Connection", "keep-alive");
      if (access) {
        access->status = out.status;
        access->bytes = out.body.size();
        access->took = clock::system().now() - arrived;
        self->srv_.opt.on_answer(*access);
      }
      asio::post(self->stream_.get_executor(), [self, out = std::move(out), close_after]() mutable {
        self->write(std::move(out), close_after);
      });
    };
    return st;
  }

  void send_error(int status, const std::string& text) {
    if (srv_.opt.on_own_error) srv_.opt.on_own_error(status);
    auto answer = server_error(status, text);
    if (srv_.opt.on_answer)
      srv_.opt.on_answer(own_error_access(stream_.socket(), status, answer.body.size()));
    write(std::move(answer), true);
  }

  void write(http_response out, bool close_after) {
    res_ = {};
    res_.version(11);
    res_.result(static_cast<unsigned>(out.status));
    res_.set(bhttp::field::server, "troupe");
    res_.set(bhttp::field::content_type, out.content_type);
    // The answer's own headers after: an HTTP/1.0 client's kept connection is said (keep_alive(true)
    // drops the keep-alive token from an HTTP/1.1 answer).
    res_.keep_alive(!close_after);
    for (auto& [k, v] : out.headers) res_.set(k, v);
    res_.body() = std::move(out.body);
    res_.prepare_payload();
    if (head_) {  // the GET's headers, Content-Length included, and no body (RFC 9110 9.3.2)
      const auto length = res_.body().size();
      res_.body().clear();
      res_.content_length(length);
      head_ = false;
    }
    stream_.expires_after(srv_.opt.read_timeout);
    bhttp::async_write(stream_, res_,
                       [self = shared_from_this(), close_after](beast::error_code ec, std::size_t) {
                         if (ec || close_after) return self->close();
                         self->read();
                       });
  }

  void close() {
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
    stream_.socket().close(ec);
  }

  beast::tcp_stream stream_;
  http_server::impl& srv_;
  static constexpr std::size_t read_chunk = 64 * 1024;  // beast's own bound on one read
  beast::flat_buffer buffer_;
  std::optional<bhttp::request_parser<bhttp::string_body>> parser_;
  bhttp::response<bhttp::string_body> res_;
  bool head_ = false;  // the request being answered is a HEAD
};

}  // namespace

void http_server::impl::refuse(tcp::socket s) {
  // Beyond the connection limit: one short answer without reading the request, then close. The
  // socket buffer takes it at once; a client that never reads cannot hold the server up.
  static const std::string body = server_error(503, "too many clients").body;
  static const std::string busy = "HTTP/1.1 503 " + reason_text(503) +
                                  "\r\nContent-Type: application/json\r\nRetry-After: 1\r\nContent-Length: " +
                                  std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
  if (opt.on_own_error) opt.on_own_error(503);
  if (opt.on_answer) opt.on_answer(own_error_access(s, 503, body.size()));
  beast::error_code ec;
  s.non_blocking(true, ec);
  s.write_some(asio::buffer(busy), ec);
  s.shutdown(tcp::socket::shutdown_both, ec);
  s.close(ec);
}

void http_server::impl::accept() {
  // Each connection on a strand of its own: its handlers never run at once, whatever the threads.
  acceptor.async_accept(asio::make_strand(io), [this](beast::error_code ec, tcp::socket s) {
    if (ec == asio::error::operation_aborted) return;
    if (ec) {
      // Out of descriptors (EMFILE) the connection stays in the backlog and accepting again at once
      // fails again: a busy loop (a core at 99%, nothing logged). Said once a minute at most, and
      // tried again after a pause in which closing connections free some.
      if (const auto now = clock::system().now();
          !last_accept_warning || now - *last_accept_warning > std::chrono::minutes(1)) {
        last_accept_warning = now;
        spdlog::warn("http: accept failed: {} (max_connections {}; open {})", ec.message(),
                     opt.max_connections, open.load());
      }
      auto pause = std::make_shared<asio::steady_timer>(io, std::chrono::milliseconds(100));
      pause->async_wait([this, pause](beast::error_code e) {
        if (!e && acceptor.is_open()) accept();
      });
      return;
    }
    // No Nagle: the answers to pipelined requests are written one by one, and each after the first
    // waited for the client's delayed ACK (~44 ms a burst; bench/serve/pipelined.py: 16 requests a
    // write, 1,419 requests/s where 9,979 unpipelined).
    beast::error_code nodelay;
    s.set_option(tcp::no_delay(true), nodelay);
    if (open.load() >= opt.max_connections)
      refuse(std::move(s));
    else
      std::make_shared<session>(std::move(s), *this)->start();
    accept();
  });
}

expected<std::unique_ptr<http_server>> http_server::start(http_options options, http_handler handler) {
  return start(std::move(options),
               [h = std::move(handler)](http_request&& r, http_responder respond) { respond(h(r)); });
}

namespace {
// `listen` ("host:port", a name resolved) as an endpoint, and its host as written back ("[::1]").
expected<std::pair<tcp::endpoint, std::string>> listen_endpoint(const std::string& listen) {
  auto numeric = resolve_listen(listen);
  if (!numeric) return numeric.err();
  auto colon = numeric->rfind(':');
  std::string host = numeric->substr(0, colon);
  if (host.size() > 1 && host.front() == '[') host = host.substr(1, host.size() - 2);
  beast::error_code ec;
  auto addr = asio::ip::make_address(host, ec);
  auto port = std::strtoul(numeric->c_str() + colon + 1, nullptr, 10);
  return std::pair{tcp::endpoint(addr, static_cast<std::uint16_t>(port)),
                   addr.is_v6() ? "[" + host + "]" : host};
}

// Opens and binds `acceptor` to `ep` as the server does (address reuse: a predecessor's connections
// in TIME_WAIT do not hold the port).
beast::error_code bind_to(tcp::acceptor& acceptor, const tcp::endpoint& ep) {
  beast::error_code ec;
  acceptor.open(ep.protocol(), ec);
  if (!ec) acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) acceptor.bind(ep, ec);
  return ec;
}
}  // namespace

expected<void> http_server::check_listen(const std::string& listen) {
  auto ep = listen_endpoint(listen);
  if (!ep) return ep.err();
  if (ep->first.port() == 0) return {};
  asio::io_context io;
  tcp::acceptor probe(io);
  if (auto ec = bind_to(probe, ep->first))
    return make_unexpected(transport_errc::listen_failed, listen + ": " + ec.message());
  return {};
}

expected<std::unique_ptr<http_server>> http_server::start(http_options options, http_async_handler handler) {
  auto p = std::make_unique<impl>();
  p->opt = std::move(options);
  p->handler = std::move(handler);
  // max_connections answers "too many clients" only while a descriptor is left to accept with: under
  // a soft limit at or below it (1024, serve's default) a flood ran the process out instead.
  if (rlimit l{}; ::getrlimit(RLIMIT_NOFILE, &l) == 0 && l.rlim_cur != RLIM_INFINITY)
    if (const auto within = connections_within(p->opt.max_connections, l.rlim_cur);
        within != p->opt.max_connections) {
      spdlog::warn("http: max_connections {} is beyond this process's open-file limit {}: {} it is",
                   p->opt.max_connections, l.rlim_cur, within);
      p->opt.max_connections = within;
    }
  auto ep = listen_endpoint(p->opt.listen);
  if (!ep) return ep.err();
  auto ec = bind_to(p->acceptor, ep->first);
  if (!ec) p->acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return make_unexpected(transport_errc::listen_failed, p->opt.listen + ": " + ec.message());
  p->port = p->acceptor.local_endpoint().port();
  p->bound = ep->second + ":" + std::to_string(p->port);
  p->accept();
  impl* raw = p.get();
  for (std::size_t i = 0; i < std::max<std::size_t>(1, p->opt.threads); ++i)
    p->threads.emplace_back([raw] { raw->io.run(); });
  return std::unique_ptr<http_server>(new http_server(std::move(p)));
}

http_server::http_server(std::unique_ptr<impl> p) : impl_(std::move(p)) {}

http_server::~http_server() {
  impl_->io.stop();
  for (auto& t : impl_->threads)
    if (t.joinable()) t.join();
}

std::string http_server::address() const {
  return impl_->bound;
}
std::uint16_t http_server::port() const {
  return impl_->port;
}
std::size_t http_server::connections() const {
  return impl_->open.load();
}

}  // namespace troupe::observe
