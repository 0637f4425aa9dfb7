// PS sparse pull+push (issue 19): rows/s workers get from one PS shard over the transport.
// The shard is the real PS shard actor (troupe/actors/testing/ps_shard_host.hpp) in a server
// process; each client does what a worker's step does to it: pull the rows of N unique ids (1000,
// fresh each round, from a key space of 1M), copy them out, then push one gradient row per id
// (applied with Adam), one request in flight. With --clients C, C such clients run at once, each
// with its own transport endpoint (connection) and thread, as C workers would. Rows are 16 floats (64 bytes).
// rows/s counts pulled + pushed rows of all clients over the measured wall-clock window.
//   ps_bench --serve HOST:PORT [--work DIR]   the shard; runs until SIGINT/SIGTERM
//   ps_bench --fetch HOST:PORT [--seconds S] [--ids N] [--clients C] [--work DIR]
//                                              the clients; one JSON line
//   ps_bench --loopback [--seconds S] [--clients C]   both in this process, over 127.0.0.1
//   --in-flight D (with --fetch or --loopback): each client keeps D requests in flight (pulls and
//       pushes in turn, replies taken oldest first), as a worker that prefetches its next batch's
//       rows and does not wait for its pushes; 1 (the default): one request at a time
//   ps_bench --check                           loopback, verifies the rows, also across restarts (ctest)
//   ps_bench --loopback --checkpoint-ms MS [--full-every K]
//       the shard checkpoints every MS ms (every Kth full) while the clients run: how long pulls and
//       pushes take during full and incremental checkpoints and outside them (p50/p99/max, same
//       run), the shard's longest stretch of checkpoint work between two requests, and the
//       checkpoints' write throughput against a plain file + fsync of the same bytes; then, for as
//       long again, the machine's own stalls (machine_stalls below), the peer of the slices
#include <algorithm>
#include <bit>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <deque>
#include <filesystem>
#include <latch>
#include <random>
#include <thread>

#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <unistd.h>

#include "ps_bench_job.hpp"
#include "troupe/actors/ps_checkpoint_log.hpp"
#include "troupe/actors/testing/ps_shard_host.hpp"
#include "troupe/core/config.hpp"
#include "troupe/job/data_model.hpp"
#include "troupe/nn/model.hpp"
#include "troupe/nn/optimizer.hpp"
#include "troupe/wire/messages.hpp"
#include "troupe/wire/raw.hpp"
#include "troupe/wire/rpc.hpp"

using namespace troupe;
using namespace troupe::actors;
namespace fs = std::filesystem;

namespace {

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "ps_bench: %s\n", what.c_str());
  std::exit(1);
}

template <typename T>
T must(expected<T> v, const char* what) {
  if (!v) die(std::string(what) + ": " + v.err().to_string());
  return std::move(*v);
}

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct bench_data {
  job::job_spec spec;
  job::prepared_data data;
};

bench_data prepare(const std::string& work) {
  auto doc = must(config_doc::from_string(bench::ps_bench_job, "ps_bench job"), "job");
  bench_data b;
  b.spec = must(job::job_spec::read(doc), "job spec");
  b.data = must(job::prepare_datasets(b.spec.nn.data, work + "/datasets"), "dataset");
  return b;
}

std::pair<std::string, std::uint16_t> split_addr(const std::string& a) {
  auto c = a.rfind(':');
  if (c == std::string::npos) die("address '" + a + "' is not HOST:PORT");
  return {a.substr(0, c), static_cast<std::uint16_t>(std::stoi(a.substr(c + 1)))};
}

// The bench model's 16-float table: its name, and the rows a shard creates for fresh ids.
struct bench_model {
  std::unique_ptr<nn::model> model;
  nn::embedding_table* table = nullptr;
};

bench_model load_model(const bench_data& b) {
  bench_model m;
  auto store = must(storage::record_store::open(b.data.train_dir), "store");
  m.model = must(job::build_model(b.spec, store), "model");
  for (auto* t : m.model->embedding_tables())
    if (t->dim() == 16) m.table = t;
  if (!m.table) die("the bench model has no 16-float embedding table");
  return m;
}

// One client: an endpoint of its own connected to the shard.
struct client {
  std::unique_ptr<endpoint> net;
  std::unique_ptr<wire::rpc_client> rpc;
  std::string shard;
  std::string table;
  std::size_t dim = 0;
  std::vector<float> rows;  // the last pull's rows
};

client connect(const bench_data& b, const nn::embedding_table& table, const std::string& addr, int index) {
  client c;
  transport_config cfg = b.spec.transport;
  cfg.token = "ps-bench";
  c.net = must(endpoint::create(node_id{"worker-" + std::to_string(index), 1}, cfg), "endpoint");
  c.shard = must(c.net->connect(addr, false), "connect").name;
  c.rpc = must(wire::rpc_client::create(*c.net, "ps-rpc"), "rpc");
  c.table = table.name();
  c.dim = table.dim();
  return c;
}

wire::rpc_channel::request pull_request(const client& c, const std::vector<std::uint64_t>& ids) {
  wire::rpc_channel::request r{c.shard, "ps", outbound()};
  auto p = r.out.body().initPsPull();
  p.initDense(0);
  auto refs = p.initSparse(1);
  refs[0].setTable(c.table);
  refs[0].setIds(kj::arrayPtr(ids.data(), ids.size()));
  return r;
}

// The pulled rows of `n` ids, copied out into c.rows.
void read_pull(client& c, const message& m, std::size_t n) {
  auto rep = m.body().getPsPullReply();
  if (rep.getError().size() > 0) die(std::string("pull: ") + rep.getError().cStr());
  if (rep.getSparse().size() != 1 || rep.getSparse()[0].getIds().size() != n)
    die("pull: the reply does not hold the rows asked for");
  wire::to_vector(rep.getSparse()[0].getValues(), c.rows);
  if (c.rows.size() != n * c.dim) die("pull: rows of the wrong size");
}

void pull(client& c, const std::vector<std::uint64_t>& ids) {
  auto m = must(c.rpc->call(pull_request(c, ids), std::chrono::seconds(30)), "pull");
  read_pull(c, m, ids.size());
}

wire::rpc_channel::request push_request(const client& c, const nn::sparse_grad& g) {
  wire::rpc_channel::request r{c.shard, "ps", outbound()};
  auto p = r.out.body().initPsPush();
  p.initDense(0);
  auto sl = p.initSparse(1);
  sl[0].setTable(c.table);
  sl[0].setDim(static_cast<std::uint32_t>(g.dim));
  sl[0].setIds(kj::arrayPtr(g.ids.data(), g.ids.size()));
  // One memcpy into the request (wire_raw.hpp), so that the clients leave the cores to the shard.
  auto v = wire::raw<float>(sl[0].initValues(static_cast<unsigned>(g.rows.size())));
  std::memcpy(v.data(), g.rows.data(), g.rows.size() * sizeof(float));
  return r;
}

void read_push(const message& m) {
  auto err = m.body().getPsPushReply().getError();
  if (err.size() > 0) die(std::string("push: ") + err.cStr());
}

void push(client& c, const nn::sparse_grad& g) {
  read_push(must(c.rpc->call(push_request(c, g), std::chrono::seconds(30)), "push"));
}

// A client's rounds: N unique ids out of [0, space) each round, fresh from a splitmix64 stream
// (distinct per client), deduplicated in a small open-addressing set that stays in cache, so that
// making a round costs a few microseconds and leaves the cores to the clients and the shard; one
// gradient row per id, drawn once (Adam's work does not depend on the values).
class round_maker {
 public:
  round_maker(std::uint64_t seed, std::size_t n, std::uint64_t space)
      : state_(seed), n_(n), space_(space), seen_(std::bit_ceil(4 * n)) {
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<float> d(-0.01F, 0.01F);
    g_.dim = 16;
    g_.rows.resize(n * g_.dim);
    for (auto& x : g_.rows) x = d(rng);
  }
  const nn::sparse_grad& next() {
    g_.ids.clear();
    std::fill(seen_.begin(), seen_.end(), kEmpty);
    const std::size_t mask = seen_.size() - 1;
    while (g_.ids.size() < n_) {
      const std::uint64_t id = splitmix() % space_;
      std::size_t i = (id * 0x9E3779B97F4A7C15ULL) >> 40 & mask;
      while (seen_[i] != kEmpty && seen_[i] != id) i = (i + 1) & mask;
      if (seen_[i] == kEmpty) seen_[i] = id, g_.ids.push_back(id);
    }
    return g_;
  }

 private:
  static constexpr std::uint64_t kEmpty = ~std::uint64_t{0};
  std::uint64_t splitmix() {
    std::uint64_t z = (state_ += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  }
  std::uint64_t state_;
  std::size_t n_;
  std::uint64_t space_;
  std::vector<std::uint64_t> seen_;  // this round's ids, kEmpty where free (at most a quarter full)
  nn::sparse_grad g_;
};

struct client_result {
  std::uint64_t rounds = 0;
  double seconds = 0;  // from the common start to this client's last reply
  // Every request of the measured window: when it was sent (ps_checkpoint_clock) and how long
  // its reply took; pulls and pushes apart.
  std::vector<std::pair<double, double>> pulls, pushes;
};

// --in-flight D: one client's rounds with D requests in flight on its connection, as a worker that
// prefetches and does not wait for its pushes: pull r and push r are sent in turn, and once D are
// unanswered the oldest reply is taken (rows copied out, push checked) before the next goes out.
// The shard serves them in order; a request's latency runs from its send to its reply's turn.
void pipelined_rounds(client& c, round_maker& rounds, double end, std::size_t depth, client_result& r) {
  struct sent {
    std::uint64_t id;
    bool push;
    double at;
    std::size_t n;
  };
  std::deque<sent> q;
  auto take_oldest = [&] {
    const sent s = q.front();
    q.pop_front();
    std::optional<expected<message>> m;
    while (!(m = c.rpc->poll(s.id))) c.rpc->wait(s.id, std::chrono::milliseconds(50));
    auto reply = must(std::move(*m), s.push ? "push" : "pull");
    if (s.push)
      read_push(reply);
    else
      read_pull(c, reply, s.n);
    (s.push ? r.pushes : r.pulls).emplace_back(s.at, ps_checkpoint_clock() - s.at);
    if (s.push) ++r.rounds;
  };
  auto send = [&](wire::rpc_channel::request req, bool is_push, std::size_t n) {
    const double at = ps_checkpoint_clock();
    q.push_back({must(c.rpc->send(std::move(req), std::chrono::seconds(30)), "send"), is_push, at, n});
    if (q.size() >= depth) take_oldest();
  };
  while (now_s() < end) {
    const auto& g = rounds.next();
    send(pull_request(c, g.ids), false, g.ids.size());
    send(push_request(c, g), true, 0);
  }
  while (!q.empty()) take_oldest();
}

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<std::size_t>(q * static_cast<double>(v.size())))];
}

// Latencies (ms) of the requests that overlap a checkpoint of the given kind (from its snapshot to
// its write's end), or none.
nlohmann::json latency_by_phase(const std::vector<client_result>& res,
                                const std::vector<ps_checkpoint_record>& log) {
  enum phase { outside, full, incremental };
  auto phase_of = [&](double t, double d) {
    for (const auto& c : log)
      if (t <= c.end_s && t + d >= c.begin_s) return c.full ? full : incremental;
    return outside;
  };
  std::vector<double> ms[3][2];
  for (const auto& r : res)
    for (int push = 0; push < 2; ++push)
      for (auto [t, d] : push ? r.pushes : r.pulls) ms[phase_of(t, d)][push].push_back(d * 1e3);
  nlohmann::json j;
  const char* names[] = {"outside", "full", "incremental"};
  for (int p = 0; p < 3; ++p)
    for (int push = 0; push < 2; ++push) {
      auto& v = ms[p][push];
      j[names[p]][push ? "push" : "pull"] = {
          {"n", v.size()},
          {"p50_ms", percentile(v, 0.5)},
          {"p99_ms", percentile(v, 0.99)},
          {"max_ms", v.empty() ? 0 : *std::max_element(v.begin(), v.end())}};
    }
  return j;
}

// Seconds to write `bytes` to a new file at `path` and fsync it (the peer of a checkpoint write).
double plain_write_fsync(const std::string& path, std::size_t bytes) {
  std::vector<char> buf(bytes, 'x');
  const double t0 = now_s();
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) die("open " + path);
  for (std::size_t off = 0; off < bytes;) {
    ssize_t n = ::write(fd, buf.data() + off, bytes - off);
    if (n <= 0) die("write " + path);
    off += static_cast<std::size_t>(n);
  }
  ::fsync(fd);
  ::close(fd);
  const double t = now_s() - t0;
  ::unlink(path.c_str());
  return t;
}

// The checkpoints the shard wrote during the run: the longest stretch of checkpoint work on the
// shard's actor, and each kind's write throughput against a plain file + fsync of the same bytes
// (written right after the run, on the same filesystem).
nlohmann::json checkpoint_summary(const std::vector<ps_checkpoint_record>& log, const std::string& work) {
  nlohmann::json j = nlohmann::json::object();
  for (bool full : {true, false}) {
    std::vector<double> slices, slices_cpu, snapshot_ms, write_s;
    std::uint64_t all_slices = 0, over_1ms = 0, over_1ms_cpu = 0;
    double cpu_s = 0;
    std::uint64_t n = 0, bytes = 0, rows = 0, failed = 0, max_bytes = 0;
    for (const auto& c : log) {
      if (c.full != full) continue;
      if (!c.ok) {
        ++failed;
        continue;
      }
      ++n;
      bytes += c.bytes;
      rows += c.rows;
      max_bytes = std::max(max_bytes, c.bytes);
      slices.push_back(c.longest_slice_s * 1e3);
      slices_cpu.push_back(c.longest_slice_cpu_s * 1e3);
      all_slices += c.slices;
      cpu_s += c.slices_cpu_s;
      over_1ms += c.slices_over_1ms;
      over_1ms_cpu += c.slices_over_1ms_cpu;
      snapshot_ms.push_back((c.snapshot_end_s - c.begin_s) * 1e3);
      write_s.push_back(c.end_s - c.snapshot_end_s);
    }
    if (n == 0) continue;
    double total_write = 0;
    for (double w : write_s) total_write += w;
    const double peer = plain_write_fsync(work + "/plain-peer.bin", static_cast<std::size_t>(bytes / n));
    const double mb_s = static_cast<double>(bytes) / 1e6 / total_write;
    const double peer_mb_s = static_cast<double>(bytes / n) / 1e6 / peer;
    j[full ? "full" : "incremental"] = {
        {"checkpoints", n},
        {"failed", failed},
        {"mean_mb", static_cast<double>(bytes) / 1e6 / static_cast<double>(n)},
        {"max_mb", static_cast<double>(max_bytes) / 1e6},
        {"mean_rows", rows / n},
        {"longest_slice_ms_max", *std::max_element(slices.begin(), slices.end())},
        {"longest_slice_ms_p50", percentile(slices, 0.5)},
        {"longest_slice_cpu_ms_max", *std::max_element(slices_cpu.begin(), slices_cpu.end())},
        {"slices", all_slices},
        {"slices_cpu_s", cpu_s},
        {"slices_over_1ms", over_1ms},
        {"slices_over_1ms_cpu", over_1ms_cpu},
        {"snapshot_ms_p50", percentile(snapshot_ms, 0.5)},
        {"write_mb_per_s", mb_s},
        {"peer", "plain_file_write_fsync"},
        {"peer_mb_per_s", peer_mb_s},
        {"ratio", mb_s / peer_mb_s}};
  }
  return j;
}

// The machine's own stalls, timed as the slices are: a fixed unit of work (64 rows of 50 floats,
// the shard's row and its Adam slots, copied from random places of 200 MB touched beforehand into
// a buffer, about what a slice copies between two looks at its clock) on the thread's CPU clock,
// again and again for `seconds`. On a VM the host may stop a vCPU, or back a page, unseen by the
// guest; that time counts as the thread's CPU, in a slice as in this unit. Each checkpoint kind
// then gets the number of its slices over 1 ms of CPU to expect from such stalls alone: the rate
// per CPU second times its slices' CPU seconds.
void add_machine_stalls(nlohmann::json& j, double seconds) {
  constexpr std::size_t width = 50, table_rows = 1'000'000;
  std::vector<float> from(table_rows * width, 1.0f), to(64 * width);
  std::mt19937_64 pick(7);
  std::vector<double> units;
  units.reserve(1 << 20);
  double cpu = 0;
  std::uint64_t over_1ms = 0;
  const double end = ps_checkpoint_clock() + seconds;
  while (ps_checkpoint_clock() < end) {
    const double c0 = ps_thread_cpu_clock();
    for (std::size_t r = 0; r < 64; ++r)
      std::memcpy(to.data() + r * width, from.data() + pick() % table_rows * width, width * sizeof(float));
    const double d = ps_thread_cpu_clock() - c0;
    cpu += d;
    over_1ms += d > 1e-3 ? 1 : 0;
    if (units.size() < units.capacity()) units.push_back(d);
    to[0] += 1.0f;
  }
  const double rate = cpu > 0 ? static_cast<double>(over_1ms) / cpu : 0;
  j["machine_stalls"] = {
      {"seconds", seconds},
      {"units", units.size()},
      {"unit_median_us", percentile(units, 0.5) * 1e6},
      {"unit_max_ms", units.empty() ? 0 : *std::max_element(units.begin(), units.end()) * 1e3},
      {"units_over_1ms_cpu", over_1ms},
      {"over_1ms_per_cpu_s", rate},
      {"check", to[7]}};
  for (auto& [kind, k] : j["checkpoints"].items())
    k["slices_over_1ms_cpu_expected_from_machine"] = rate * k["slices_cpu_s"].get<double>();
}

// `clients` clients pull and push for `seconds` (after 20 warm-up rounds each, then a common
// start); one JSON line: all clients' rows over the window from the start to the last reply, and
// each client's own rows/s.
nlohmann::json run_rounds(const bench_data& b, const nn::embedding_table& table, const std::string& addr,
                          int clients, double seconds, std::size_t n, const std::string& where,
                          std::size_t in_flight, const std::string& ckpt_work = {}) {
  std::vector<client> cs;
  for (int i = 0; i < clients; ++i) cs.push_back(connect(b, table, addr, i));
  std::vector<client_result> res(static_cast<std::size_t>(clients));
  std::latch warm(clients), go(1);
  double t0 = 0;
  std::vector<std::thread> threads;
  for (int i = 0; i < clients; ++i)
    threads.emplace_back([&, i] {
      auto& c = cs[static_cast<std::size_t>(i)];
      round_maker rounds(42 + static_cast<std::uint64_t>(i) * 7919, n, 1'000'000);
      for (int w = 0; w < 20; ++w) {
        const auto& g = rounds.next();
        pull(c, g.ids);
        push(c, g);
      }
      warm.count_down();
      go.wait();
      auto& r = res[static_cast<std::size_t>(i)];
      const double end = t0 + seconds;
      double t = now_s();
      if (in_flight > 1) {
        pipelined_rounds(c, rounds, end, in_flight, r);
        t = now_s();
      }
      while (in_flight <= 1 && t < end) {
        const auto& g = rounds.next();
        const double a = ps_checkpoint_clock();
        pull(c, g.ids);
        const double m = ps_checkpoint_clock();
        push(c, g);
        const double z = ps_checkpoint_clock();
        r.pulls.emplace_back(a, m - a);
        r.pushes.emplace_back(m, z - m);
        ++r.rounds;
        t = now_s();
      }
      r.seconds = t - t0;
    });
  warm.wait();
  (void)take_ps_checkpoint_log();  // the warm-up's
  t0 = now_s();
  go.count_down();
  for (auto& t : threads) t.join();
  double window = 0;
  std::uint64_t rounds = 0;
  nlohmann::json per = nlohmann::json::array();
  for (const auto& r : res) {
    window = std::max(window, r.seconds);
    rounds += r.rounds;
    per.push_back(std::round(2.0 * static_cast<double>(r.rounds * n) / r.seconds));
  }
  const double rows = 2.0 * static_cast<double>(rounds * n);
  nlohmann::json j = {{"bench", "ps_pull_push"},
                      {"where", where},
                      {"clients", clients},
                      {"in_flight", in_flight},
                      {"ids_per_request", n},
                      {"row_bytes", 64},
                      {"rounds", rounds},
                      {"rows_per_s", rows / window},
                      {"mb_per_s", rows * 64 / window / 1e6},
                      {"round_ms", window * clients / static_cast<double>(rounds) * 1e3},
                      {"per_client_rows_per_s", per}};
  if (!ckpt_work.empty()) {
    const auto log = take_ps_checkpoint_log();
    j["latency_by_phase"] = latency_by_phase(res, log);
    j["checkpoints"] = checkpoint_summary(log, ckpt_work);
  }
  return j;
}

void print(const nlohmann::json& j) {
  std::printf("%s\n", j.dump().c_str());
  std::fflush(stdout);
}

// The rows of `ids` pulled from the shard equal those of `table` here.
void expect_rows(client& c, nn::embedding_table& table, const std::vector<std::uint64_t>& ids,
                 const char* when) {
  pull(c, ids);
  std::vector<float> local(ids.size() * 16);
  table.read_rows(ids, local.data());
  if (local != c.rows) die(std::string("check: rows ") + when + " differ from the optimizer's update here");
}

// Three shards on the same work directory, one after the other, against the same optimizer here:
// a fresh one (pulled rows are the table's initial rows; after a push, a pull returns what the
// optimizer makes of them), stopped (its first checkpoint: full); one restored from it, pushed
// half of the same ids and new ones, stopped (an incremental checkpoint: only the rows pushed
// since the restore); one restored from both, which must return every row as here.
int check(const bench_data& b, nn::embedding_table& table, const std::string& shard_work) {
  round_maker rounds(7, 1000, 1'000'000);
  const nn::sparse_grad g = rounds.next();
  nn::sparse_grad h = rounds.next();
  std::copy(g.ids.begin(), g.ids.begin() + 500, h.ids.begin());
  auto opt = must(nn::make_optimizer(b.spec.nn.train.optimizer), "optimizer");
  nn::row_slots slots(16, *opt);
  auto shard = [&] {
    return must(actors::testing::ps_shard_host::start(b.spec, b.data, shard_work, "127.0.0.1", 0), "shard");
  };
  {
    auto s = shard();
    auto c = connect(b, table, s->bound(), 0);
    pull(c, g.ids);
    std::vector<float> want(16);
    for (std::size_t i = 0; i < g.ids.size(); ++i) {
      table.init_row(g.ids[i], want.data());
      if (!std::equal(want.begin(), want.end(), c.rows.begin() + static_cast<std::ptrdiff_t>(i * 16)))
        die("check: pulled row " + std::to_string(g.ids[i]) + " is not its initial value");
    }
    nn::apply_sparse(*opt, table, g, slots);
    push(c, g);
    expect_rows(c, table, g.ids, "after the push");
  }
  {
    auto s = shard();
    auto c = connect(b, table, s->bound(), 0);
    expect_rows(c, table, g.ids, "restored from the full checkpoint");
    nn::apply_sparse(*opt, table, h, slots);
    push(c, h);
  }
  auto s = shard();
  auto c = connect(b, table, s->bound(), 0);
  expect_rows(c, table, g.ids, "restored from the incremental checkpoint");
  expect_rows(c, table, h.ids, "restored from the incremental checkpoint");
  std::printf("{\"bench\":\"ps_pull_push_check\",\"rows\":%zu,\"restarts\":2,\"ok\":true}\n",
              g.ids.size() + h.ids.size() - 500);
  return 0;
}

int serve(const bench_data& b, const std::string& work, const std::string& addr) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);  // before any thread starts
  auto [host, port] = split_addr(addr);
  auto h = must(actors::testing::ps_shard_host::start(b.spec, b.data, work, host, port), "shard");
  std::printf("{\"bench\":\"ps_shard\",\"listening\":\"%s\"}\n", h->bound().c_str());
  std::fflush(stdout);
  int sig = 0;
  sigwait(&set, &sig);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string mode, addr, work = (fs::temp_directory_path() / "troupe-ps-bench").string();
  double seconds = 5;
  std::size_t ids = 1000;
  int clients = 1;
  std::size_t in_flight = 1;
  int checkpoint_ms = 0, full_every = 0;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto val = [&]() -> std::string { return i + 1 < argc ? argv[++i] : (die(a + " needs a value"), ""); };
    if (a == "--serve" || a == "--fetch")
      mode = a.substr(2), addr = val();
    else if (a == "--loopback" || a == "--check")
      mode = a.substr(2);
    else if (a == "--seconds")
      seconds = std::stod(val());
    else if (a == "--ids")
      ids = std::stoul(val());
    else if (a == "--clients")
      clients = std::stoi(val());
    else if (a == "--in-flight")
      in_flight = std::stoul(val());
    else if (a == "--work")
      work = val();
    else if (a == "--checkpoint-ms")
      checkpoint_ms = std::stoi(val());
    else if (a == "--full-every")
      full_every = std::stoi(val());
    else
      die("unknown argument '" + a + "'");
  }
  if (mode.empty()) die("usage: ps_bench --serve HOST:PORT | --fetch HOST:PORT | --loopback | --check");
  spdlog::set_level(spdlog::level::warn);
  auto b = prepare(work);
  if (checkpoint_ms > 0) b.spec.ps.checkpoint_every = std::chrono::milliseconds(checkpoint_ms);
  if (full_every > 0) b.spec.ps.full_checkpoint_every = static_cast<std::uint32_t>(full_every);
  if (mode == "serve") return serve(b, work, addr);
  if (clients < 1) die("--clients must be >= 1");
  if (in_flight < 1) die("--in-flight must be >= 1");
  auto model = load_model(b);
  if (mode == "fetch") {
    print(run_rounds(b, *model.table, addr, clients, seconds, ids, addr, in_flight));
    return 0;
  }
  // Loopback and check: a fresh shard (no checkpoint from an earlier run) in this process.
  const std::string shard_work = work + "/shard-" + std::to_string(::getpid());
  fs::remove_all(shard_work);
  int rc = 0;
  if (mode == "check") {
    rc = check(b, *model.table, shard_work);
  } else {
    auto h = must(actors::testing::ps_shard_host::start(b.spec, b.data, shard_work, "127.0.0.1", 0), "shard");
    auto j = run_rounds(b, *model.table, h->bound(), clients, seconds, ids, "loopback", in_flight,
                        checkpoint_ms > 0 ? shard_work : std::string());
    h.reset();  // the shard stopped (its last checkpoints taken): the machine alone is probed
    if (checkpoint_ms > 0) add_machine_stalls(j, seconds);
    print(j);
  }
  fs::remove_all(shard_work);
  return rc;
}
