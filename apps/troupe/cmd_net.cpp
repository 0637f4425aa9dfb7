// `troupe net serve|ping`: a transport node that answers pings and reports peers, and a prober
// that measures round-trip time and throughput against one. Output is JSON lines on stdout; the
// multi-process tests and bench/transport drive these.
#include <unistd.h>
#include <csignal>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>

#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include "command.hpp"
#include "troupe/core/signal_wait.hpp"
#include "troupe/transport/config.hpp"
#include "troupe/transport/diag.hpp"
#include "troupe/transport/endpoint.hpp"

namespace troupe::cli {
namespace {

struct net_options {
  std::string listen = "127.0.0.1:0";
  std::string name;
  std::uint64_t incarnation = 0;
  std::string token_file, config_file;
  int heartbeat_ms = 0, heartbeat_timeout_ms = 0;
  std::vector<std::string> connects, watches;
  // ping
  std::string address;
  std::size_t count = 1000, size = 32, warmup = 100, bulk_frames = 0, frame_bytes = 1u << 20;
};

std::mutex out_mu;
void emit(const nlohmann::json& j) {
  std::lock_guard lk(out_mu);
  std::printf("%s\n", j.dump().c_str());
  std::fflush(stdout);
}

void add_common(CLI::App* c, net_options& o) {
  c->add_option("--token-file", o.token_file, "file holding the cluster token (else $TROUPE_CLUSTER_TOKEN)");
  c->add_option("--config", o.config_file, "job file whose [transport] section to use");
  c->add_option("--heartbeat-ms", o.heartbeat_ms, "heartbeat interval (default 250)")
      ->check(CLI::Range(1, 60000));
  c->add_option("--heartbeat-timeout-ms", o.heartbeat_timeout_ms,
                "silence before a peer is dead (default 1000)")
      ->check(CLI::Range(2, 600000));
}

expected<transport_config> make_config(const net_options& o) {
  transport_config cfg;
  if (!o.config_file.empty()) {
    auto doc = config_doc::from_file(o.config_file);
    if (!doc) return std::move(doc).err();
    config_reader r(*doc);
    cfg = transport_config::read(r.section("transport"));
    if (auto f = r.finish(false); !f) return std::move(f).err();
  } else {
    auto t = load_token("", default_token_env, "");
    if (!t) return std::move(t).err();
    cfg.token = *t;
  }
  if (!o.token_file.empty()) {
    auto t = load_token(o.token_file, "", "");
    if (!t) return std::move(t).err();
    cfg.token = *t;
  }
  if (o.heartbeat_ms) cfg.heartbeat_interval = std::chrono::milliseconds(o.heartbeat_ms);
  if (o.heartbeat_timeout_ms) cfg.heartbeat_timeout = std::chrono::milliseconds(o.heartbeat_timeout_ms);
  if (cfg.token.empty())
    spdlog::warn(
        "net: no cluster token (--token-file, ${} or [transport] token): only token-less peers can connect",
        default_token_env);
  if (auto v = cfg.validate(); !v) return std::move(v).err();
  return cfg;
}

nlohmann::json peer_json(const char* ev, const peer_event& p) {
  return {{"event", ev}, {"node", p.node.to_string()}, {"address", p.address}, {"reason", p.reason}};
}

// --watch NAME@NODE: each actor watched, its death emitted as a watch_down event. The error names a
// malformed flag.
expected<void> watch_all(endpoint& e, const std::vector<std::string>& watches) {
  for (const auto& w : watches) {
    auto at = w.find('@');
    if (at == std::string::npos)
      return make_unexpected(core_errc::invalid_argument, "--watch: expected NAME@NODE, got '" + w + "'");
    std::string name = w.substr(0, at), node = w.substr(at + 1);
    e.watch(node, name, [](const actor_address& a, const std::string& reason) {
      emit({{"event", "watch_down"}, {"name", a.name}, {"node", a.node.name}, {"reason", reason}});
    });
    emit({{"event", "watching"}, {"name", name}, {"node", node}});
  }
  return {};
}

// What the endpoint received over its life, as the last event.
void emit_stats(endpoint& e) {
  auto s = e.stats();
  emit({{"event", "stats"},
        {"frames_received", s.frames_received},
        {"bytes_received", s.bytes_received},
        {"malformed_frames", s.malformed_frames},
        {"auth_refused", s.auth_refused}});
}

int run_serve(const net_options& o) {
  auto cfg = make_config(o);
  if (!cfg) return usage_error(cfg.err());
  auto hp = parse_host_port(o.listen);
  if (!hp) return usage_error(hp.err());
  if (!valid_node_name(o.name)) return usage_error("--name: invalid node name '" + o.name + "'");
  signal_waiter stop{SIGINT, SIGTERM};
  auto ep = endpoint::create(node_id{o.name, o.incarnation}, *cfg);
  if (!ep) return usage_error(ep.err());
  auto& e = **ep;
  e.on_peer_up([](const peer_event& p) { emit(peer_json("peer_up", p)); });
  e.on_peer_down([](const peer_event& p) { emit(peer_json("peer_down", p)); });
  if (auto r = install_echo(e); !r) return run_error(r.err());
  auto where = e.listen(hp->host, hp->port);
  if (!where) return run_error(where.err());
  {
    std::lock_guard lk(out_mu);
    std::printf("listening %s\n", where->c_str());
    std::fflush(stdout);
  }
  for (auto& addr : o.connects) {
    auto peer = e.connect(addr);
    if (!peer) return run_error(peer.err());
  }
  if (auto w = watch_all(e, o.watches); !w) return usage_error(w.err().context());
  stop.wait();
  emit_stats(e);
  return 0;
}

int run_ping_cmd(const net_options& o) {
  auto cfg = make_config(o);
  if (!cfg) return usage_error(cfg.err());
  auto ep = endpoint::create(node_id{o.name.empty() ? "ping-" + std::to_string(getpid()) : o.name, 0}, *cfg);
  if (!ep) return usage_error(ep.err());
  auto peer = (*ep)->connect(o.address, false);
  if (!peer) return run_error(peer.err());
  nlohmann::json out{{"peer", peer->to_string()}, {"address", o.address}};
  if (o.count > 0) {
    auto r = run_ping(**ep, {peer->name, "echo", o.count, o.warmup, o.size});
    if (!r) return run_error(r.err());
    out["count"] = r->count;
    out["size"] = r->payload_bytes;
    out["rtt_us"] = {{"min", r->min_us}, {"p50", r->p50_us}, {"p90", r->p90_us},
                     {"p99", r->p99_us}, {"max", r->max_us}, {"mean", r->mean_us}};
  }
  if (o.bulk_frames > 0) {
    bulk_options b;
    b.node = peer->name;
    b.frames = o.bulk_frames;
    b.frame_bytes = o.frame_bytes;
    auto r = run_bulk(**ep, b);
    if (!r) return run_error(r.err());
    out["throughput"] = {{"frames", r->frames},
                         {"frame_bytes", r->frame_bytes},
                         {"seconds", r->seconds},
                         {"gbit_per_s", r->gbit_per_s}};
  }
  emit(out);
  return 0;
}

const command_registrar reg{
    "net", "Transport diagnostics: run a node that answers pings, or measure RTT and throughput to one",
    [](CLI::App& sub) -> runner {
      auto o = std::make_shared<net_options>();
      auto* serve =
          sub.add_subcommand("serve", "Run a node: answer pings on 'echo', print peer/watch events as JSON");
      serve->add_option("--listen", o->listen,
                        "host:port to listen on (port 0: any; the bound one is printed)");
      serve->add_option("--name", o->name, "this node's name")->required();
      serve->add_option("--incarnation", o->incarnation, "this node's incarnation number");
      serve->add_option("--connect", o->connects, "dial this host:port at start (repeatable)");
      serve->add_option("--watch", o->watches, "watch NAME@NODE and report when it goes down (repeatable)");
      add_common(serve, *o);
      auto* ping =
          sub.add_subcommand("ping", "Measure round trips (and with --bulk-frames, throughput) to ADDR");
      ping->add_option("address", o->address, "host:port of a `troupe net serve` node")->required();
      ping->add_option("--count", o->count, "measured round trips (0: none)");
      ping->add_option("--size", o->size, "ping payload bytes")->check(CLI::Range(0, 1 << 26));
      ping->add_option("--warmup", o->warmup, "unmeasured round trips first");
      ping->add_option("--bulk-frames", o->bulk_frames, "then stream this many frames and report throughput");
      ping->add_option("--frame-bytes", o->frame_bytes, "payload bytes per bulk frame")
          ->check(CLI::Range(1, 1 << 28));
      ping->add_option("--name", o->name, "this node's name (default ping-PID)");
      add_common(ping, *o);
      sub.require_subcommand(1);
      return [o, serve]() -> int { return serve->parsed() ? run_serve(*o) : run_ping_cmd(*o); };
    }};

}  // namespace
}  // namespace troupe::cli
