// The HTTP API of `troupe serve` (docs/serving.md): the Open Inference Protocol's REST routes for
// the one model served, /metrics, and the rows route. Runs on the HTTP server's threads; an infer
// request is parsed here and answered later, from the thread that finishes it.
#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <nlohmann/json.hpp>

#include <spdlog/spdlog.h>

#include "frontend.hpp"
#include "rows_request.hpp"

namespace troupe::serve {

namespace {

using nlohmann::json;

const char* json_type = "application/json";

observe::http_response json_answer(int status, std::string body) {
  return {status, json_type, std::move(body), {}};
}

observe::http_response error_answer(int status, const std::string& text) {
  return json_answer(status, error_json(text));
}

observe::http_response wrong_method(const std::string& allow) {
  auto r = error_answer(405, "method not allowed here; allowed: " + allow);
  r.headers.emplace_back("Allow", allow);
  return r;
}

int status_of(failure f) {
  switch (f) {
    case failure::none:
      return 200;
    case failure::timed_out:
      return 504;
    case failure::model_failed:
      return 500;
    case failure::bad_rows:
      return 400;
    default:
      return 503;
  }
}

std::vector<std::string> split_path(const std::string& path) {
  std::vector<std::string> out;
  std::size_t at = 1;
  while (at <= path.size()) {
    auto slash = path.find('/', at);
    if (slash == std::string::npos) slash = path.size();
    out.push_back(path.substr(at, slash - at));
    at = slash + 1;
  }
  while (!out.empty() && out.back().empty()) out.pop_back();
  return out;
}

// The binary tensor data extension's Inference-Header-Content-Length: the JSON's length in bytes, the
// inputs' data after it (SIZE_MAX: no such header, the body is JSON).
expected<std::size_t> json_length(const observe::http_request& r) {
  std::size_t n = SIZE_MAX;
  auto h = r.headers.find("inference-header-content-length");
  if (h == r.headers.end()) return n;
  const auto& v = h->second;
  auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
  if (ec != std::errc() || end != v.data() + v.size() || n == SIZE_MAX)
    return make_unexpected(core_errc::invalid_argument, "Inference-Header-Content-Length '" + v +
                                                            "': expected the JSON header's length in bytes");
  return n;
}

// A compressed body (Content-Encoding other than identity) is not decoded: said so, 415 (a gzipped
// body read as "malformed JSON (byte 1): unexpected '\x1f'").
std::string encoding_problem(const observe::http_request& r) {
  auto h = r.headers.find("content-encoding");
  if (h == r.headers.end() || h->second.empty()) return {};
  std::string v = h->second;
  std::transform(v.begin(), v.end(), v.begin(), [](unsigned char c) { return std::tolower(c); });
  if (v == "identity") return {};
  return "Content-Encoding '" + h->second + "': not supported; send the body uncompressed";
}

}  // namespace

std::shared_ptr<const model_view> frontend::current_view() const {
  std::lock_guard lk(views_mu_);
  auto it = views_.find(active_);
  return it != views_.end() ? it->second : nullptr;
}

std::shared_ptr<const model_view> frontend::view_of(std::uint32_t generation) const {
  std::lock_guard lk(views_mu_);
  auto it = views_.find(generation);
  if (it == views_.end()) it = views_.find(active_);
  return it != views_.end() ? it->second : nullptr;
}

namespace {
observe::http_response loading_answer() {
  auto r = error_answer(503, "the model is loading: retry later");
  r.headers.emplace_back("Retry-After", "1");
  return r;
}
}  // namespace

observe::http_response frontend::ready_answer(bool model_route) {
  // Ready once a replica of the serving version is, and server.json says so (what a client that
  // waited for readiness reads next: a stale file of an earlier server under the same name).
  bool ready = announced_.load() && !draining_.load() && core_->stats().ready > 0;
  json j = model_route ? json{{"name", name_}, {"ready", ready}} : json{{"ready", ready}};
  return json_answer(ready ? 200 : 503, j.dump());
}

// The port is this server's before any replica starts (two servers told the same port both loaded
// their replicas, and the second to open it failed), and a liveness probe is answered while the
// replicas load (/v2/health/ready: 503 until they are ready; inference: 503 "loading").
bool frontend::open_http() {
  observe::http_options ho;
  ho.listen = cfg_.listen;
  ho.threads = cfg_.http_threads;
  ho.max_connections = cfg_.max_connections;
  ho.max_body_bytes = cfg_.max_body_bytes;
  ho.read_timeout = cfg_.read_timeout;
  // Refused before any route (413, 431, 400, 503 too many clients): counted as requests answered.
  ho.on_own_error = [this](int status) { count_request(status, clock_.now()); };
  if (cfg_.access_log) {
    auto log = access_log::open(state_dir_ + "/logs/access.log");
    if (!log) {
      spdlog::error("serve: access_log: {}", log.err().to_string());
      return false;
    }
    access_ = std::move(*log);
    ho.on_answer = [this](const observe::http_access& a) { access_->write(a, clock_.wall_ms()); };
  }
  auto http =
      observe::http_server::start(ho, [this](observe::http_request&& r, observe::http_responder respond) {
        handle_http(std::move(r), respond);
      });
  if (!http) {
    spdlog::error("serve: --listen {}: {}", cfg_.listen, http.err().to_string());
    return false;
  }
  http_ = std::move(*http);
  return true;
}

void frontend::handle_http(observe::http_request&& r, observe::http_responder respond) {
  auto parts = split_path(r.path);
  const bool get = r.method == "GET" || r.method == "HEAD";
  if (parts.size() == 1 && parts[0] == "metrics") {
    if (!get) return respond(wrong_method("GET"));
    return respond({200, "text/plain; version=0.0.4; charset=utf-8", registry_.render(), {}});
  }
  if (parts.empty() || parts[0] != "v2")
    return respond(error_answer(404, "no such route: " + r.path +
                                         " (this server speaks the Open Inference Protocol "
                                         "under /v2, and /metrics)"));
  if (parts.size() == 1) {
    if (!get) return respond(wrong_method("GET"));
    json j = {
        {"name", "troupe"}, {"version", TROUPE_VERSION_TEXT}, {"extensions", json::array({"troupe_rows"})}};
    return respond(json_answer(200, j.dump()));
  }
  if (parts[1] == "health" && parts.size() == 3 && (parts[2] == "live" || parts[2] == "ready")) {
    if (!get) return respond(wrong_method("GET"));
    if (parts[2] == "live") return respond(json_answer(200, R"({"live":true})"));
    return respond(ready_answer(false));
  }
  model_route(r, parts, std::move(respond));
}

// A request to an inference route that is refused here (another model's name, a wrong method) is
// counted as the routes' own answers are: troupe_serve_requests_total by status, server.json.
void frontend::model_route(const observe::http_request& r, const std::vector<std::string>& parts,
                           observe::http_responder respond) {
  const bool get = r.method == "GET" || r.method == "HEAD", post = r.method == "POST";
  const bool inference = parts.back() == "infer" || parts.back() == "rows";
  auto refuse = [&](observe::http_response a) {
    if (inference) count_request(a.status, clock_.now());
    respond(std::move(a));
  };
  if (parts[1] != "models" || parts.size() < 3) return refuse(error_answer(404, "no such route: " + r.path));
  if (parts[2] != name_)
    return refuse(
        error_answer(404, "model '" + parts[2] + "' not found: this server serves '" + name_ + "'"));
  auto view = current_view();
  if (!view) return refuse(loading_answer());
  std::size_t at = 3;
  if (parts.size() >= 5 && parts[3] == "versions") {
    if (parts[4] != view->info.version())
      return refuse(error_answer(404, "model '" + name_ + "' version '" + parts[4] +
                                          "' not found: version '" + view->info.version() + "' serves"));
    at = 5;
  }
  std::string what = parts.size() > at ? parts[at] : "";
  if (parts.size() > at + 1) return refuse(error_answer(404, "no such route: " + r.path));
  if (what.empty()) {
    if (!get) return respond(wrong_method("GET"));
    return respond(metadata(*view));
  }
  if (what == "ready") {
    if (!get) return respond(wrong_method("GET"));
    return respond(ready_answer(true));
  }
  if (what == "infer") {
    if (!post) return refuse(wrong_method("POST"));
    return infer(r, view, std::move(respond));
  }
  if (what == "rows") {
    if (!post) return refuse(wrong_method("POST"));
    return infer_rows(r, view, std::move(respond));
  }
  respond(error_answer(404, "no such route: " + r.path));
}

void frontend::count_request(int status, clock::time_point arrived) {
  metrics_.count_request(status);
  double s = std::chrono::duration<double>(clock_.now() - arrived).count();
  metrics_.request_seconds.observe(s);
  if (status == 200) {
    latencies_.add(s);
    requests_ok_.fetch_add(1, std::memory_order_relaxed);
  } else {
    // 501 and 505 answer what the client sent (a transfer coding, an HTTP version it may not use):
    // refused, not the server's failure.
    const bool failed = status >= 500 && status != 501 && status != 505;
    (failed ? requests_failed_ : requests_refused_).fetch_add(1, std::memory_order_relaxed);
  }
}

void frontend::infer(const observe::http_request& r, const std::shared_ptr<const model_view>& view,
                     observe::http_responder respond) {
  auto t0 = clock_.now();
  if (auto why = encoding_problem(r); !why.empty()) {
    count_request(415, t0);
    return respond(error_answer(415, why));
  }
  auto json_bytes = json_length(r);
  if (!json_bytes) {
    count_request(400, t0);
    return respond(error_answer(400, json_bytes.err().context()));
  }
  submit(parse_infer_request(r.body, view->shape, *json_bytes), t0, std::move(respond));
}

void frontend::infer_rows(const observe::http_request& r, const std::shared_ptr<const model_view>& view,
                          observe::http_responder respond) {
  if (auto why = encoding_problem(r); !why.empty()) {
    count_request(415, clock_.now());
    return respond(error_answer(415, why));
  }
  submit(parse_rows_request(r.body, view->shape, view->rows.get(), view->rows_why), clock_.now(),
         std::move(respond), view.get(), r.body);
}

std::function<std::string(request&, std::uint32_t)> frontend::reencoder(std::string_view body) {
  return
      [this, rows = std::make_shared<const std::string>(body)](request& q, std::uint32_t g) -> std::string {
        auto v = view_of(g);
        if (!v || v->generation != g)
          return "the model version these rows went to is no longer served: send them again";
        auto in = parse_rows_request(*rows, v->shape, v->rows.get(), v->rows_why);
        if (!in)
          return "the model was swapped for version " + v->info.version() +
                 " while these rows waited, and it does not take them: " + in.err().context();
        if (in->rows != q.rows) return "the model was swapped while these rows waited: send them again";
        q.dense = std::move(in->dense);
        q.ids = std::move(in->ids);
        q.generation = g;
        return "";
      };
}

void frontend::submit(expected<infer_input>&& in, clock::time_point t0, observe::http_responder respond,
                      const model_view* encoded_by, std::string_view body) {
  if (!in) {
    count_request(400, t0);
    return respond(error_answer(400, in.err().context()));
  }
  auto q = std::make_shared<request>();
  q->id = next_request_.fetch_add(1, std::memory_order_relaxed);
  q->rows = in->rows;
  q->dense = std::move(in->dense);
  q->ids = std::move(in->ids);
  if (encoded_by) {
    q->generation = encoded_by->generation;
    q->reencode = reencoder(body);
  }
  q->arrived = t0;
  q->deadline = t0 + cfg_.request_timeout;
  std::string id = std::move(in->id);
  unsigned outputs = in->outputs;
  std::size_t rows = q->rows;
  q->done = [this, respond, t0, id = std::move(id), outputs, rows](outcome&& o) {
    answer_infer(respond, t0, id, outputs, rows, std::move(o));
  };
  auto refused = core_->submit(q);
  if (refused == failure::none) return;
  int status = status_of(refused);
  auto a = error_answer(status, refused == failure::queue_full
                                    ? "the queue is full (max_queue_rows " +
                                          std::to_string(cfg_.max_queue_rows) + " rows waiting): retry later"
                                    : "the server is stopping");
  a.headers.emplace_back("Retry-After", "1");
  count_request(status, t0);
  respond(std::move(a));
}

void frontend::answer_infer(const observe::http_responder& respond, clock::time_point arrived,
                            const std::string& id, unsigned outputs, std::size_t rows, outcome&& o) {
  if (o.why != failure::none) {
    int status = status_of(o.why);
    auto a = error_answer(status, o.message);
    if (status == 503) a.headers.emplace_back("Retry-After", "1");
    count_request(status, arrived);
    return respond(std::move(a));
  }
  auto v = view_of(o.generation);
  // An overflow in forward (inputs far outside the training data: a row of 3e38) gave null logits
  // and probabilities and class 0, with 200: the answer would be made up.
  if (auto bad = std::find_if(o.logits.begin(),
                              o.logits.begin() + static_cast<std::ptrdiff_t>(rows * v->shape.width),
                              [](float x) { return !std::isfinite(x); });
      bad != o.logits.begin() + static_cast<std::ptrdiff_t>(rows * v->shape.width)) {
    const auto row = static_cast<std::size_t>(bad - o.logits.begin()) / v->shape.width;
    count_request(422, arrived);
    return respond(error_answer(422, "row " + std::to_string(row) + ": the model's output is not finite (" +
                                         (std::isnan(*bad) ? std::string("NaN")  // it said "-nan"
                                          : *bad > 0       ? std::string("inf")
                                                           : std::string("-inf")) +
                                         "): its inputs are far outside the values it was trained on?"));
  }
  rows_answered_.fetch_add(rows, std::memory_order_relaxed);
  auto body = encode_infer_response(name_, o.version, id, o.logits.data(), rows, v->shape, outputs);
  count_request(200, arrived);
  respond(json_answer(200, std::move(body)));
}

}  // namespace troupe::serve
