#include "troupe/serve/config.hpp"

namespace troupe::serve {

namespace {
// Checked before any replica starts (a replica used to start and exit with libtorch's list of device
// types).
void check_device(config_section& s, const std::string& device) {
  const bool ordinal = device.rfind("cuda:", 0) == 0 && device.size() > 5 && device.size() < 9 &&
                       device.find_first_not_of("0123456789", 5) == std::string::npos;
  if (device != "cpu" && device != "cuda" && !ordinal)
    s.fail("device", core_errc::invalid_argument, "'" + device + "': expected cpu, cuda or cuda:N");
}

void check_name(config_section& s, const std::string& name) {
  if (!name.empty() && !valid_model_name(name))
    s.fail("name", core_errc::invalid_argument,
           "'" + name + "': 1-64 characters of A-Z, a-z, 0-9, '_', '-' or '.', not starting with '.'");
}

// [serve]'s HTTP side and batching: listen, threads, batches, queue, timeouts, body and connection limits.
void read_http_limits(config_section& s, serve_config& c) {
  using i64 = std::int64_t;
  c.listen = s.get_string("listen", c.listen);
  c.http_threads =
      static_cast<std::size_t>(s.get_int("http_threads", static_cast<i64>(c.http_threads), 1, 256));
  c.max_batch = static_cast<std::size_t>(s.get_int("max_batch", static_cast<i64>(c.max_batch), 1, 1 << 16));
  c.max_delay = std::chrono::microseconds(s.get_int("max_delay_us", c.max_delay.count(), 0, 10'000'000));
  c.max_queue_rows = static_cast<std::size_t>(
      s.get_int("max_queue_rows", static_cast<i64>(c.max_queue_rows), 1, i64{1} << 30));
  c.pipeline = static_cast<std::size_t>(s.get_int("pipeline", static_cast<i64>(c.pipeline), 1, 64));
  c.request_timeout =
      std::chrono::milliseconds(s.get_int("request_timeout_ms", c.request_timeout.count(), 1, 3'600'000));
  c.replica_timeout =
      std::chrono::milliseconds(s.get_int("replica_timeout_ms", c.replica_timeout.count(), 10, 3'600'000));
  c.max_attempts = static_cast<int>(s.get_int("max_attempts", c.max_attempts, 1, 100));
  c.max_body_bytes = static_cast<std::size_t>(
      s.get_int("max_body_bytes", static_cast<i64>(c.max_body_bytes), 1024, i64{1} << 30));
  c.max_connections =
      static_cast<std::size_t>(s.get_int("max_connections", static_cast<i64>(c.max_connections), 1, 1 << 20));
  c.read_timeout =
      std::chrono::milliseconds(s.get_int("read_timeout_ms", c.read_timeout.count(), 10, 3'600'000));
  c.drain = std::chrono::milliseconds(s.get_int("drain_ms", c.drain.count(), 0, 600'000));
  c.access_log = s.get_bool("access_log", c.access_log);
}

}  // namespace

serve_config serve_config::read(config_section s, serve_config d) {
  serve_config c = std::move(d);
  using i64 = std::int64_t;
  c.model = s.get_string("model", c.model);
  c.name = s.get_string("name", c.name);
  check_name(s, c.name);
  c.root = s.get_string("root", c.root);
  c.replicas = static_cast<std::size_t>(s.get_int("replicas", static_cast<i64>(c.replicas), 1, 256));
  c.threads = static_cast<int>(s.get_int("threads", c.threads, 1, 1024));
  c.pin_cpus = s.get_bool("pin_cpus", c.pin_cpus);
  c.device = s.get_string("device", c.device);
  check_device(s, c.device);
  read_http_limits(s, c);
  c.warmup = static_cast<int>(s.get_int("warmup", c.warmup, 0, 100'000));
  c.load_timeout =
      std::chrono::milliseconds(s.get_int("load_timeout_ms", c.load_timeout.count(), 100, 3'600'000));
  c.watch = s.get_string("watch", c.watch);
  c.watch_interval =
      std::chrono::milliseconds(s.get_int("watch_interval_ms", c.watch_interval.count(), 10, 3'600'000));
  c.progress = s.get_bool("progress", c.progress);
  if (c.max_queue_rows < c.max_batch)
    s.fail("max_queue_rows", core_errc::out_of_range,
           std::to_string(c.max_queue_rows) + " is below max_batch " + std::to_string(c.max_batch) +
               ": a request of max_batch rows could never be queued");
  return c;
}

serve_config serve_config::read(config_section s) {
  return read(s, serve_config{});
}

expected<serve_settings> read_settings(const config_doc& doc) {
  config_reader r(doc);
  serve_settings s;
  s.serve = serve_config::read(r.section("serve"));
  s.cluster = cluster::cluster_config::read(r.section("cluster"));
  s.transport = transport_config::read(r.section("transport"));
  if (auto ok = r.finish(); !ok) return ok.err();
  // A replica is found dead by its connection closing at once; a hung one by missed heartbeats. A
  // job's 1 s detects hangs fast, but a server on a loaded machine (a replica loading libtorch beside
  // it) then drops live replicas and relaunches them: serving waits longer unless told otherwise.
  if (!doc.has("transport.heartbeat_ms")) s.transport.heartbeat_interval = std::chrono::milliseconds(500);
  if (!doc.has("transport.heartbeat_timeout_ms"))
    s.transport.heartbeat_timeout = std::chrono::milliseconds(5000);
  if (auto ok = s.transport.validate(); !ok) return ok.err();
  return s;
}

bool valid_model_name(std::string_view n) noexcept {
  if (n.empty() || n.size() > 64 || n[0] == '.') return false;
  for (char c : n)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-' && c != '.') return false;
  return true;
}

}  // namespace troupe::serve
