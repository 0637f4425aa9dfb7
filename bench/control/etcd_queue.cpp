#include "etcd_queue.hpp"

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <stdexcept>
#include <thread>

namespace troupe::bench {

namespace asio = boost::asio;
namespace http = boost::beast::http;
using json = nlohmann::json;

namespace {

const char b64chars[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

std::string b64(const std::string& s) {
  std::string out;
  std::size_t i = 0;
  for (; i + 2 < s.size(); i += 3) {
    unsigned v = (static_cast<unsigned char>(s[i]) << 16) | (static_cast<unsigned char>(s[i + 1]) << 8) |
                 static_cast<unsigned char>(s[i + 2]);
    for (int k = 3; k >= 0; --k) out.push_back(b64chars[(v >> (6 * k)) & 63]);
  }
  if (i < s.size()) {
    unsigned v = static_cast<unsigned char>(s[i]) << 16;
    if (i + 1 < s.size()) v |= static_cast<unsigned char>(s[i + 1]) << 8;
    out.push_back(b64chars[(v >> 18) & 63]);
    out.push_back(b64chars[(v >> 12) & 63]);
    out.push_back(i + 1 < s.size() ? b64chars[(v >> 6) & 63] : '=');
    out.push_back('=');
  }
  return out;
}

std::string unb64(const std::string& s) {
  std::string out;
  unsigned v = 0;
  int bits = 0;
  for (char c : s) {
    const char* p = std::strchr(b64chars, c);
    if (c == '=' || !p || !*p) break;
    v = (v << 6) | static_cast<unsigned>(p - b64chars);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((v >> bits) & 0xff));
    }
  }
  return out;
}

std::string task_key(const char* state, std::uint64_t id) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%s/%012llu", state, static_cast<unsigned long long>(id));
  return buf;
}

// The ops of a transaction that moves `from` to `to` (a JSON array of two request ops).
json move_txn(const std::string& from, const std::string& to, const std::string& value) {
  json del = json::object(), put = json::object();
  del["request_delete_range"]["key"] = b64(from);
  put["request_put"]["key"] = b64(to);
  put["request_put"]["value"] = b64(value);
  return json::array({del, put});
}

}  // namespace

struct etcd_client::impl {
  asio::io_context io;
  asio::ip::tcp::socket sock{io};
  boost::beast::flat_buffer buf;
  std::mt19937_64 rng;
  std::uint16_t port;

  json post(const std::string& path, const json& body) {
    http::request<http::string_body> req{http::verb::post, path, 11};
    req.set(http::field::host, "127.0.0.1:" + std::to_string(port));
    req.set(http::field::content_type, "application/json");
    req.keep_alive(true);
    req.body() = body.dump();
    req.prepare_payload();
    http::write(sock, req);
    http::response<http::string_body> res;
    http::read(sock, buf, res);
    if (res.result() != http::status::ok)
      throw std::runtime_error("etcd " + path + ": HTTP " + std::to_string(res.result_int()) + ": " +
                               res.body());
    return json::parse(res.body());
  }
};

etcd_client::etcd_client(std::uint16_t port, std::uint64_t seed) : impl_(std::make_unique<impl>()) {
  impl_->port = port;
  impl_->rng.seed(seed);
  impl_->sock.connect({asio::ip::make_address("127.0.0.1"), port});
  impl_->sock.set_option(asio::ip::tcp::no_delay(true));
}

etcd_client::~etcd_client() = default;

void etcd_client::fill(std::uint64_t first, std::uint64_t n) {
  for (std::uint64_t i = 0; i < n;) {
    json ops = json::array();
    for (int k = 0; k < 128 && i < n; ++k, ++i) {
      json put = json::object();
      put["request_put"]["key"] = b64(task_key("todo", first + i));
      put["request_put"]["value"] = "";
      ops.push_back(put);
    }
    json txn = json::object();
    txn["success"] = ops;
    impl_->post("/v3/kv/txn", txn);
  }
}

std::optional<std::uint64_t> etcd_client::lease(const std::string& holder, unsigned window,
                                                std::uint64_t& conflicts, const std::atomic<bool>& go) {
  for (;;) {
    json q = json::object();
    q["key"] = b64("todo/");
    q["range_end"] = b64("todo0");
    q["limit"] = window;
    auto r = impl_->post("/v3/kv/range", q);
    if (!r.contains("kvs") || r["kvs"].empty()) return std::nullopt;
    auto& kvs = r["kvs"];
    const auto& kv = kvs[impl_->rng() % kvs.size()];
    std::string key = unb64(kv["key"].get<std::string>());
    std::string rev = kv["mod_revision"].get<std::string>();
    std::uint64_t id = std::stoull(key.substr(5));
    json cmp = json::object();
    cmp["key"] = b64(key);
    cmp["target"] = "MOD";
    cmp["result"] = "EQUAL";
    cmp["mod_revision"] = rev;
    json txn = json::object();
    txn["compare"] = json::array({cmp});
    txn["success"] = move_txn(key, task_key("doing", id), holder);
    auto t = impl_->post("/v3/kv/txn", txn);
    if (t.value("succeeded", false)) return id;
    ++conflicts;  // another client took it between our read and our transaction
    if (!go.load()) return std::nullopt;
  }
}

void etcd_client::report(std::uint64_t id) {
  json txn = json::object();
  txn["success"] = move_txn(task_key("doing", id), task_key("done", id), "");
  impl_->post("/v3/kv/txn", txn);
}

bool etcd_wait_healthy(std::uint16_t port, double seconds) {
  auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < until) {
    try {
      asio::io_context io;
      asio::ip::tcp::socket s(io);
      s.connect({asio::ip::make_address("127.0.0.1"), port});
      http::request<http::empty_body> req{http::verb::get, "/health", 11};
      req.set(http::field::host, "127.0.0.1");
      http::write(s, req);
      boost::beast::flat_buffer b;
      http::response<http::string_body> res;
      http::read(s, b, res);
      if (res.result() == http::status::ok && res.body().find("true") != std::string::npos) return true;
    } catch (const std::exception&) {
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // polling a starting server
  }
  return false;
}

}  // namespace troupe::bench
