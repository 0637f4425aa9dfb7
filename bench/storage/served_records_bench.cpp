// Served records (issue 19): records/s and MB/s a worker gets from the record server over the
// transport (loopback, one process: the server's endpoint answers on its io thread), against the
// same worker reading the same tasks from the local LMDB store, same run. Both decode and verify
// every record into a task's rows (read_records / record_fetcher). Also the second pass over the
// same tasks from the fetcher's memory cache. Data: the Fashion-MNIST train store (3144-byte
// records), tasks of 1024 records. JSON lines on stdout.
// Usage: served_records_bench [WORK_DIR] [--repeat N]
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include "fake_node.hpp"
#include "record_fetch.hpp"
#include "roles/record_server.hpp"
#include "troupe/actors/data.hpp"
#include "troupe/nn/data/readers.hpp"

using namespace troupe;
using namespace troupe::actors;
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
    if (auto r = read_records(store, f, task_records, d); !r) die(r.err().to_string());
  return now_s() - t0;
}

// Seconds to get every task through the fetcher (all asked for at once: the fetcher works through
// them in order, as it does a worker's leased-ahead tasks).
double served_pass(record_fetcher& fetch, std::uint64_t count) {
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

}  // namespace

int main(int argc, char** argv) {
  std::string work = (fs::temp_directory_path() / "troupe-served-records-bench").string();
  int repeat = 3;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--repeat" && i + 1 < argc)
      repeat = std::atoi(argv[++i]);
    else
      work = a;
  }
  spdlog::set_level(spdlog::level::warn);
  const std::string dir = work + "/train";
  if (!fs::exists(dir + "/data.mdb")) {
    auto d = nn::read_fashion_mnist(nn::fashion_mnist_default_dir, "train");
    if (!d) die(d.err().to_string());
    if (auto w = write_dataset(*d, dir, "fashion-mnist:train"); !w) die(w.err().to_string());
  }
  auto store = storage::record_store::open(dir);
  if (!store) die(store.err().to_string());
  const double mb = static_cast<double>(store->count() * storage::encoded_size(store->info().schema)) / 1e6;

  testing::fake_node node(
      node_identity{node_id{"master", 0}, cluster::node_role::master, 0, work, "b", "b", 0});
  record_server server(node, data_paths{dir, ""});
  transport_config cfg;
  cfg.token = "bench";
  auto srv = endpoint::create(node_id{"master", 0}, cfg);
  auto cli = endpoint::create(node_id{"worker-0", 0}, cfg);
  if (!srv || !cli) die("endpoints");
  endpoint& s = **srv;
  (void)s.register_name("records",
                        [&](const message& m) { (void)send_reply(s, m, server.answer(m), "records"); });
  auto addr = s.listen("127.0.0.1", 0);
  if (!addr || !(*cli)->connect(*addr, false)) die("connect");
  auto rpc = rpc_client::create(**cli, "records-rpc");
  if (!rpc) die(rpc.err().to_string());

  for (int r = 0; r < repeat; ++r) {
    double local = local_pass(*store);
    record_fetcher::options o;
    o.cache_bytes = 0;
    record_fetcher cold(**rpc, o);
    if (auto m = cold.manifest(false, std::chrono::seconds(10)); !m) die(m.err().to_string());
    double served = served_pass(cold, store->count());
    o.cache_bytes = std::size_t{1} << 30;
    record_fetcher warm(**rpc, o);
    (void)warm.manifest(false, std::chrono::seconds(10));
    (void)served_pass(warm, store->count());
    double cached = served_pass(warm, store->count());
    auto rate = [&](double sec) { return static_cast<double>(store->count()) / sec; };
    nlohmann::json j = {{"bench", "served_records"},
                        {"records", store->count()},
                        {"task_records", task_records},
                        {"mb", mb},
                        {"served_records_per_s", rate(served)},
                        {"served_mb_per_s", mb / served},
                        {"cached_records_per_s", rate(cached)},
                        {"cached_mb_per_s", mb / cached},
                        {"peer", "local_lmdb_read_records"},
                        {"peer_records_per_s", rate(local)},
                        {"peer_mb_per_s", mb / local},
                        {"ratio", local / served}};
    std::printf("%s\n", j.dump().c_str());
    std::fflush(stdout);
  }
  return 0;
}
