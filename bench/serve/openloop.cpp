// serve_openloop: an open-loop HTTP load generator for the serving benchmarks. Requests leave on a
// fixed schedule (RATE per second), whether or not the earlier ones were answered, and each one's
// latency runs from its scheduled time (no coordinated omission: a server that stalls is charged
// for the requests that queued behind the stall). Keep-alive connections are reused; when all are
// busy a new one opens, up to --connections, and past that requests wait (still on the clock).
//
//   serve_openloop --url http://127.0.0.1:8000/v2/models/mlp/infer --body body.json --rate 500
//                  --seconds 10 [--connections 256] [--trace trace.tsv] [--warmup 1] [--json-bytes N]
// --json-bytes N: the body is a binary tensor data request whose JSON is its first N bytes (sent as
// Inference-Header-Content-Length, with Content-Type application/octet-stream).
//
// Prints one JSON line: rate asked and achieved, requests sent, answered 2xx, errors (non-2xx,
// failed connections), latency p50/p90/p99/p99.9/max in ms, requests sent again on a new connection
// after a kept-alive one turned out closed. --trace writes "sent_s latency_ms
// status" per request (sent_s from the start) for windowed analysis (p99 during an event).
#include <utility>  // before Asio: Boost 1.74's awaitable.hpp uses std::exchange without it

#include <algorithm>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <fstream>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using steady = std::chrono::steady_clock;

namespace {

struct options {
  std::string host = "127.0.0.1", port = "8000", target = "/";
  std::string body_file, trace;
  double rate = 100, seconds = 10, warmup = 1;
  std::size_t connections = 256;
  std::string json_bytes;  // the binary tensor data extension's header, when set
};

struct record {
  double sent_s;  // scheduled time, from the start of measurement
  double latency_ms;
  int status;  // 0: connection failed
};

class generator {
 public:
  generator(asio::io_context& io, options o, std::string body)
      : io_(io), o_(std::move(o)), body_(std::move(body)) {
    tcp::resolver r(io_);
    endpoints_ = r.resolve(o_.host, o_.port);
  }

  void start() {
    start_ = steady::now();
    schedule(0);
  }

  std::vector<record> records;
  std::size_t late_dispatches = 0;
  std::size_t retries = 0;  // requests sent again after a kept-alive connection turned out closed

 private:
  struct conn {
    explicit conn(asio::io_context& io) : stream(io) {}
    beast::tcp_stream stream;
    beast::flat_buffer buffer;
    http::request<http::string_body> req;
    std::optional<http::response_parser<http::string_body>> parser;
    bool connected = false;
  };

  double total() const { return o_.warmup + o_.seconds; }

  // The n-th request is due at start + n / rate.
  void schedule(std::uint64_t n) {
    auto due =
        start_ + std::chrono::duration_cast<steady::duration>(std::chrono::duration<double>(n / o_.rate));
    if (std::chrono::duration<double>(due - start_).count() >= total()) {
      done_scheduling_ = true;
      return;
    }
    auto t = std::make_shared<asio::steady_timer>(io_, due);
    t->async_wait([this, t, n, due](beast::error_code) {
      waiting_.push_back(due);
      dispatch();
      schedule(n + 1);
    });
  }

  void dispatch() {
    while (!waiting_.empty()) {
      std::shared_ptr<conn> c;
      if (!idle_.empty()) {
        c = idle_.back();
        idle_.pop_back();
      } else if (open_ < o_.connections) {
        c = std::make_shared<conn>(io_);
        ++open_;
      } else {
        ++late_dispatches;
        return;  // every connection busy: they wait, their clocks running
      }
      auto due = waiting_.front();
      waiting_.pop_front();
      send(c, due);
    }
  }

  // A keep-alive connection the server closed while it sat idle fails at once on its next request:
  // that request is sent again once on a new connection (what browsers and urllib3 do), its clock
  // still running from its scheduled time. Any other failure counts.
  void send(const std::shared_ptr<conn>& c, steady::time_point due, bool retried = false) {
    c->req = {http::verb::post, o_.target, 11};
    c->req.set(http::field::host, o_.host);
    c->req.set(http::field::content_type,
               o_.json_bytes.empty() ? "application/json" : "application/octet-stream");
    if (!o_.json_bytes.empty()) c->req.set("Inference-Header-Content-Length", o_.json_bytes);
    c->req.keep_alive(true);
    c->req.body() = body_;
    c->req.prepare_payload();
    bool reused = c->connected;
    auto again = [this, c, due, reused, retried] {
      if (!reused || retried) return false;
      beast::error_code ignore;
      c->stream.socket().close(ignore);
      c->connected = false;
      c->buffer.clear();
      ++retries;
      send(c, due, true);
      return true;
    };
    auto go = [this, c, due, again] {
      http::async_write(c->stream, c->req, [this, c, due, again](beast::error_code ec, std::size_t) {
        if (ec) return again() ? void() : fail(c, due);
        c->parser.emplace();
        c->parser->body_limit(64 << 20);
        http::async_read(c->stream, c->buffer, *c->parser,
                         [this, c, due, again](beast::error_code ec, std::size_t n) {
                           if (ec) return n == 0 && again() ? void() : fail(c, due);
                           finish(due, static_cast<int>(c->parser->get().result_int()));
                           if (!c->parser->get().keep_alive()) {
                             c->connected = false;
                             beast::error_code ignore;
                             c->stream.socket().close(ignore);
                           }
                           idle_.push_back(c);
                           dispatch();
                         });
      });
    };
    if (c->connected) return go();
    c->stream.async_connect(endpoints_, [this, c, due, go](beast::error_code ec, const tcp::endpoint&) {
      if (ec) return fail(c, due);
      c->connected = true;
      c->stream.socket().set_option(tcp::no_delay(true));
      go();
    });
  }

  void fail(const std::shared_ptr<conn>& c, steady::time_point due) {
    finish(due, 0);
    beast::error_code ignore;
    c->stream.socket().close(ignore);
    c->connected = false;
    c->buffer.clear();
    idle_.push_back(c);
    dispatch();
  }

  void finish(steady::time_point due, int status) {
    double sent = std::chrono::duration<double>(due - start_).count() - o_.warmup;
    if (sent >= 0)
      records.push_back(
          {sent, std::chrono::duration<double, std::milli>(steady::now() - due).count(), status});
    ++answered_;
    if (done_scheduling_ && waiting_.empty() && idle_.size() == open_) io_.stop();
  }

  asio::io_context& io_;
  options o_;
  std::string body_;
  tcp::resolver::results_type endpoints_;
  steady::time_point start_;
  std::deque<steady::time_point> waiting_;
  std::vector<std::shared_ptr<conn>> idle_;
  std::size_t open_ = 0;
  std::uint64_t answered_ = 0;
  bool done_scheduling_ = false;
};

bool parse_url(const std::string& url, options& o) {
  const std::string scheme = "http://";
  if (url.rfind(scheme, 0) != 0) return false;
  auto rest = url.substr(scheme.size());
  auto slash = rest.find('/');
  std::string hostport = rest.substr(0, slash);
  o.target = slash == std::string::npos ? "/" : rest.substr(slash);
  auto colon = hostport.rfind(':');
  o.host = hostport.substr(0, colon);
  o.port = colon == std::string::npos ? "80" : hostport.substr(colon + 1);
  return true;
}

double pct(std::vector<double>& v, double q) {
  if (v.empty()) return 0;
  auto k = static_cast<std::size_t>(q * static_cast<double>(v.size() - 1));
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(k), v.end());
  return v[k];
}

}  // namespace

int main(int argc, char** argv) {
  options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i], v = argv[i + 1];
    if (k == "--url" && !parse_url(v, o)) return std::fprintf(stderr, "--url: http://host:port/path\n"), 2;
    if (k == "--body") o.body_file = v;
    if (k == "--rate") o.rate = std::atof(v.c_str());
    if (k == "--seconds") o.seconds = std::atof(v.c_str());
    if (k == "--warmup") o.warmup = std::atof(v.c_str());
    if (k == "--connections") o.connections = static_cast<std::size_t>(std::atol(v.c_str()));
    if (k == "--trace") o.trace = v;
    if (k == "--json-bytes") o.json_bytes = v;
  }
  std::ifstream in(o.body_file, std::ios::binary);
  if (!in) return std::fprintf(stderr, "--body %s: cannot read it\n", o.body_file.c_str()), 2;
  std::string body((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  asio::io_context io;
  generator g(io, o, body);
  g.start();
  io.run();
  std::vector<double> lat;
  std::size_t ok = 0, errors = 0;
  double last = 0;
  for (const auto& r : g.records) {
    lat.push_back(r.latency_ms);
    (r.status >= 200 && r.status < 300 ? ok : errors)++;
    last = std::max(last, r.sent_s);
  }
  if (!o.trace.empty()) {
    std::ofstream t(o.trace);
    for (const auto& r : g.records) t << r.sent_s << "\t" << r.latency_ms << "\t" << r.status << "\n";
  }
  double max = lat.empty() ? 0 : *std::max_element(lat.begin(), lat.end());
  std::printf(
      "{\"rate\": %.1f, \"achieved\": %.1f, \"requests\": %zu, \"ok\": %zu, \"errors\": %zu, \"p50_ms\": "
      "%.3f, "
      "\"p90_ms\": %.3f, \"p99_ms\": %.3f, \"p999_ms\": %.3f, \"max_ms\": %.3f, \"queued_dispatches\": "
      "%zu, \"stale_connection_retries\": %zu}\n",
      o.rate, static_cast<double>(g.records.size()) / o.seconds, g.records.size(), ok, errors, pct(lat, 0.5),
      pct(lat, 0.9), pct(lat, 0.99), pct(lat, 0.999), max, g.late_dispatches, g.retries);
  return 0;
}
