// Served records (issue 19): records/s and MB/s a worker gets from the record server over the
// transport, against the same worker reading the same tasks from the local LMDB store, same run.
// Both decode and verify every record into a task's rows (job::read_records / record_fetcher). Also the
// second pass over the same tasks from the fetcher's memory cache. Data: the Fashion-MNIST train
// store (3144-byte records), tasks of 1024 records. JSON lines on stdout.
//   served_records_bench [WORK_DIR] [--repeat N]     loopback, one process (the server answers on
//                                                    its endpoint's io thread)
//   served_records_bench --serve HOST:PORT [WORK_DIR]   the record server alone, until SIGINT/SIGTERM
//   served_records_bench --fetch HOST:PORT [--local STORE_DIR] [--repeat N]   the worker side from
//       another host; with --local, also a local scan of that store (the same tasks) each round
// --window N / --request-kb K: the fetcher's requests in flight and their size (defaults: the
// fetcher's); every round also measures one request in flight (`one_in_flight_mb_per_s`).
// --copy (server side): every record copied into the reply, none sent straight from the map.
// --malloc default: glibc's allocator settings, not troupe's (keep_large_buffers, core/memory.hpp).
#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include "troupe/actors/testing/served_records.hpp"
#include "troupe/core/memory.hpp"
#include "troupe/job/data.hpp"
#include "troupe/nn/data/readers.hpp"
#include "troupe/transport/endpoint.hpp"

using namespace troupe;
using troupe::actors::testing::record_client;
using troupe::actors::testing::record_server_host;
namespace fs = std::filesystem;

namespace {

constexpr std::uint64_t task_records = 1024;

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "served_records_bench: %s\n", what.c_str());
  std::exit(1);
}

// Seconds to read every task of `store` locally.
double local_pass(const storage::record_store& store) {
  nn::dataset d;
  double t0 = now_s();
  for (std::uint64_t f = 0; f < store.count(); f += task_records)
    if (auto r = job::read_records(store, f, task_records, d); !r) die(r.err().to_string());
  return now_s() - t0;
}

// Seconds to get every task through the fetcher (all asked for at once: the fetcher works through
// them in order, as it does a worker's leased-ahead tasks).
double served_pass(record_client& fetch, std::uint64_t count) {
  nn::dataset d;
  double t0 = now_s();
  std::vector<std::uint64_t> tickets;
  for (std::uint64_t f = 0; f < count; f += task_records)
    tickets.push_back(fetch.want(f, std::min(task_records, count - f)));
  for (auto t : tickets) {
    for (;;) {
      auto r = fetch.take(t, d);
      if (!r) {
        std::this_thread::sleep_for(std::chrono::microseconds(50));
        continue;
      }
      if (!*r) die(r->err().to_string());
      break;
    }
  }
  return now_s() - t0;
}

// The Fashion-MNIST train store under `work` (written on first use).
storage::record_store open_store(const std::string& work) {
  const std::string dir = work + "/train";
  if (!fs::exists(dir + "/data.mdb")) {
    auto d = nn::read_fashion_mnist(nn::fashion_mnist_default_dir, "train");
    if (!d) die(d.err().to_string());
    if (auto w = job::write_dataset(*d, dir, "fashion-mnist:train"); !w) die(w.err().to_string());
  }
  auto store = storage::record_store::open(dir);
  if (!store) die(store.err().to_string());
  return std::move(*store);
}

// The master's record server on an endpoint of its own, listening on host:port.
std::unique_ptr<record_server_host> serve_records(const std::string& dir, const std::string& work, bool copy,
                                                  const std::string& host, std::uint16_t port) {
  auto h = record_server_host::start(dir, work, copy, host, port);
  if (!h) die(h.err().to_string());
  return std::move(*h);
}

struct fetch_options {
  std::size_t window = record_client::defaults().window;
  std::size_t request_kb = record_client::defaults().request_bytes >> 10;
  bool tuned = true;  // keep_large_buffers()
};

// `repeat` rounds of: a local scan (when `local`), a cold served pass with one request in flight
// (replies of the server's largest, 4 MiB: the fetcher before its request window), a cold served
// pass with the window, a warm one and a cached one.
void fetch_rounds(wire::rpc_client& rpc, const storage::record_store* local, int repeat,
                  const std::string& where, const fetch_options& fo) {
  for (int r = 0; r < repeat; ++r) {
    record_client::options o = record_client::defaults();
    o.cache_bytes = 0;
    o.window = 1;
    o.request_bytes = record_server_host::max_reply_bytes;
    double one = 0;
    std::uint64_t count = 0;
    double mb = 0;
    {
      record_client serial(rpc, o);
      auto m = serial.manifest(std::chrono::seconds(10));
      if (!m) die(m.err().to_string());
      count = m->record_count;
      mb = static_cast<double>(count * storage::encoded_size(m->schema)) / 1e6;
      one = served_pass(serial, count);
    }
    o.window = fo.window;
    o.request_bytes = fo.request_kb << 10;
    record_client cold(rpc, o);
    (void)cold.manifest(std::chrono::seconds(10));
    double scan = local ? local_pass(*local) : 0;
    double served = served_pass(cold, count);
    o.cache_bytes = std::size_t{1} << 30;
    record_client warm(rpc, o);
    (void)warm.manifest(std::chrono::seconds(10));
    (void)served_pass(warm, count);
    double cached = served_pass(warm, count);
    auto rate = [&](double sec) { return static_cast<double>(count) / sec; };
    nlohmann::json j = {{"bench", "served_records"},
                        {"where", where},
                        {"records", count},
                        {"task_records", task_records},
                        {"mb", mb},
                        {"window", fo.window},
                        {"malloc", fo.tuned ? "keep_large_buffers" : "default"},
                        {"request_kb", fo.request_kb},
                        {"one_in_flight_mb_per_s", mb / one},
                        {"served_records_per_s", rate(served)},
                        {"served_mb_per_s", mb / served},
                        {"cached_records_per_s", rate(cached)},
                        {"cached_mb_per_s", mb / cached}};
    if (local) {
      j["peer"] = "local_lmdb_read_records";
      j["peer_records_per_s"] = rate(scan);
      j["peer_mb_per_s"] = mb / scan;
      j["ratio"] = scan / served;
    }
    std::printf("%s\n", j.dump().c_str());
    std::fflush(stdout);
  }
}

std::pair<std::string, std::uint16_t> split_addr(const std::string& a) {
  auto c = a.rfind(':');
  if (c == std::string::npos) die("address '" + a + "' is not HOST:PORT");
  return {a.substr(0, c), static_cast<std::uint16_t>(std::stoi(a.substr(c + 1)))};
}

int serve(const std::string& work, const std::string& addr, bool copy) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);  // before any thread starts
  auto store = open_store(work);
  auto [host, port] = split_addr(addr);
  auto srv = serve_records(work + "/train", work, copy, host, port);
  std::printf("{\"bench\":\"record_server\",\"listening\":\"%s\",\"records\":%llu}\n", srv->address().c_str(),
              static_cast<unsigned long long>(store.count()));
  std::fflush(stdout);
  int sig = 0;
  sigwait(&set, &sig);
  return 0;
}

std::unique_ptr<wire::rpc_client> connect_rpc(endpoint& cli, const std::string& addr) {
  if (auto c = cli.connect(addr, false); !c) die("connect " + addr + ": " + c.err().to_string());
  auto rpc = wire::rpc_client::create(cli, "records-rpc");
  if (!rpc) die(rpc.err().to_string());
  return std::move(*rpc);
}

}  // namespace

int main(int argc, char** argv) {
  std::string work = (fs::temp_directory_path() / "troupe-served-records-bench").string();
  std::string mode, addr, local;
  int repeat = 3;
  fetch_options fo;
  bool copy = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--repeat" && i + 1 < argc)
      repeat = std::atoi(argv[++i]);
    else if (a == "--window" && i + 1 < argc)
      fo.window = static_cast<std::size_t>(std::max(1, std::atoi(argv[++i])));
    else if (a == "--request-kb" && i + 1 < argc)
      fo.request_kb = static_cast<std::size_t>(std::max(1, std::atoi(argv[++i])));
    else if ((a == "--serve" || a == "--fetch") && i + 1 < argc)
      mode = a.substr(2), addr = argv[++i];
    else if (a == "--copy")
      copy = true;
    else if (a == "--malloc" && i + 1 < argc)
      fo.tuned = std::string(argv[++i]) != "default";
    else if (a == "--local" && i + 1 < argc)
      local = argv[++i];
    else if (a.rfind("--", 0) == 0)
      die("unknown argument '" + a + "'");
    else
      work = a;
  }
  if (fo.tuned) keep_large_buffers();  // as the troupe binary does (core/memory.hpp)
  spdlog::set_level(spdlog::level::warn);
  if (mode == "serve") return serve(work, addr, copy);
  transport_config cfg;
  cfg.token = "bench";
  auto cli = endpoint::create(node_id{"worker-0", 0}, cfg);
  if (!cli) die("endpoint: " + cli.err().to_string());
  if (mode == "fetch") {
    std::optional<storage::record_store> store;
    if (!local.empty()) {
      auto s = storage::record_store::open(local);
      if (!s) die(s.err().to_string());
      store.emplace(std::move(*s));
    }
    auto rpc = connect_rpc(**cli, addr);
    fetch_rounds(*rpc, store ? &*store : nullptr, repeat, addr, fo);
    return 0;
  }
  auto store = open_store(work);
  auto srv = serve_records(work + "/train", work, copy, "127.0.0.1", 0);
  auto rpc = connect_rpc(**cli, srv->address());
  fetch_rounds(*rpc, &store, repeat, "loopback", fo);
  return 0;
}
