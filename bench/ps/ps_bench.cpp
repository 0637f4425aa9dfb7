// PS sparse pull+push (issue 19): rows/s one worker gets from one PS shard over the transport.
// The shard is the real PS shard actor (ps_shard_host.hpp) in a server process; the client does
// what a worker's step does to it: pull the rows of N unique ids (1000, fresh each round, from a
// key space of 1M), copy them out, then push one gradient row per id (applied with Adam), one
// request in flight. Rows are 16 floats (64 bytes). rows/s counts pulled + pushed rows.
//   ps_bench --serve HOST:PORT [--work DIR]   the shard; runs until SIGINT/SIGTERM
//   ps_bench --fetch HOST:PORT [--seconds S] [--ids N] [--work DIR]   the client; one JSON line
//   ps_bench --loopback [--seconds S]          both in this process, over 127.0.0.1
//   ps_bench --check                           loopback, one round, verifies the rows (ctest)
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <random>
#include <unordered_set>

#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include "data_model.hpp"
#include "ps_shard_host.hpp"
#include "rpc.hpp"
#include "troupe/core/config.hpp"
#include "troupe/nn/model.hpp"
#include "troupe/nn/optimizer.hpp"
#include "wire.hpp"

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
  job_spec spec;
  prepared_data data;
};

bench_data prepare(const std::string& work) {
  auto doc = must(config_doc::from_string(bench::ps_bench_job, "ps_bench job"), "job");
  bench_data b;
  b.spec = must(job_spec::read(doc), "job spec");
  b.data = must(prepare_datasets(b.spec.nn.data, work + "/datasets"), "dataset");
  return b;
}

std::pair<std::string, std::uint16_t> split_addr(const std::string& a) {
  auto c = a.rfind(':');
  if (c == std::string::npos) die("address '" + a + "' is not HOST:PORT");
  return {a.substr(0, c), static_cast<std::uint16_t>(std::stoi(a.substr(c + 1)))};
}

// The client: an endpoint connected to the shard, and the model's 16-float table (its name, and
// the rows a shard creates for fresh ids).
struct client {
  std::unique_ptr<endpoint> net;
  std::unique_ptr<rpc_client> rpc;
  std::unique_ptr<nn::model> model;
  nn::embedding_table* table = nullptr;
  std::string shard;
  std::vector<float> rows;  // the last pull's rows
};

client connect(const bench_data& b, const std::string& addr) {
  client c;
  transport_config cfg = b.spec.transport;
  cfg.token = "ps-bench";
  c.net = must(endpoint::create(node_id{"worker-0", 1}, cfg), "endpoint");
  c.shard = must(c.net->connect(addr, false), "connect").name;
  c.rpc = must(rpc_client::create(*c.net, "ps-rpc"), "rpc");
  auto store = must(storage::record_store::open(b.data.train_dir), "store");
  c.model = must(build_model(b.spec, store), "model");
  for (auto* t : c.model->embedding_tables())
    if (t->dim() == 16) c.table = t;
  if (!c.table) die("the bench model has no 16-float embedding table");
  return c;
}

void pull(client& c, const std::vector<std::uint64_t>& ids) {
  rpc_channel::request r{c.shard, "ps", outbound()};
  auto p = r.out.body().initPsPull();
  p.initDense(0);
  auto refs = p.initSparse(1);
  refs[0].setTable(c.table->name());
  refs[0].setIds(kj::arrayPtr(ids.data(), ids.size()));
  auto m = must(c.rpc->call(std::move(r), std::chrono::seconds(30)), "pull");
  auto rep = m.body().getPsPullReply();
  if (rep.getError().size() > 0) die(std::string("pull: ") + rep.getError().cStr());
  if (rep.getSparse().size() != 1 || rep.getSparse()[0].getIds().size() != ids.size())
    die("pull: the reply does not hold the rows asked for");
  wire::to_vector(rep.getSparse()[0].getValues(), c.rows);
  if (c.rows.size() != ids.size() * c.table->dim()) die("pull: rows of the wrong size");
}

void push(client& c, const nn::sparse_grad& g) {
  rpc_channel::request r{c.shard, "ps", outbound()};
  auto p = r.out.body().initPsPush();
  p.initDense(0);
  auto sl = p.initSparse(1);
  sl[0].setTable(c.table->name());
  sl[0].setDim(static_cast<std::uint32_t>(g.dim));
  sl[0].setIds(kj::arrayPtr(g.ids.data(), g.ids.size()));
  auto v = sl[0].initValues(static_cast<unsigned>(g.rows.size()));
  for (std::size_t k = 0; k < g.rows.size(); ++k) v.set(static_cast<unsigned>(k), g.rows[k]);
  auto m = must(c.rpc->call(std::move(r), std::chrono::seconds(30)), "push");
  auto err = m.body().getPsPushReply().getError();
  if (err.size() > 0) die(std::string("push: ") + err.cStr());
}

// N unique ids out of [0, space), and a gradient row for each.
void next_round(std::mt19937_64& rng, std::size_t n, std::uint64_t space, nn::sparse_grad& g) {
  std::unordered_set<std::uint64_t> seen;
  g.clear();
  g.dim = 16;
  while (g.ids.size() < n)
    if (auto id = rng() % space; seen.insert(id).second) g.ids.push_back(id);
  std::uniform_real_distribution<float> d(-0.01F, 0.01F);
  g.rows.resize(n * g.dim);
  for (auto& x : g.rows) x = d(rng);
}

// Pulls and pushes for `seconds` (after 20 warm-up rounds); one JSON line.
void run_rounds(client& c, double seconds, std::size_t n, const std::string& where) {
  std::mt19937_64 rng(42);
  nn::sparse_grad g;
  for (int i = 0; i < 20; ++i) {
    next_round(rng, n, 1'000'000, g);
    pull(c, g.ids);
    push(c, g);
  }
  std::uint64_t rounds = 0;
  double busy = 0, t0 = now_s();
  while (now_s() - t0 < seconds) {
    next_round(rng, n, 1'000'000, g);  // not timed: the ids and gradients a worker's step makes
    double s = now_s();
    pull(c, g.ids);
    push(c, g);
    busy += now_s() - s;
    ++rounds;
  }
  const double rows = 2.0 * static_cast<double>(rounds * n);
  nlohmann::json j = {{"bench", "ps_pull_push"},
                      {"where", where},
                      {"ids_per_request", n},
                      {"row_bytes", 64},
                      {"rounds", rounds},
                      {"rows_per_s", rows / busy},
                      {"mb_per_s", rows * 64 / busy / 1e6},
                      {"round_ms", busy / static_cast<double>(rounds) * 1e3}};
  std::printf("%s\n", j.dump().c_str());
  std::fflush(stdout);
}

// One round on a fresh shard: the pulled rows are the table's initial rows; after the push, a
// second pull returns what the same optimizer makes of them here.
int check(client& c, const bench_data& b) {
  std::mt19937_64 rng(7);
  nn::sparse_grad g;
  next_round(rng, 1000, 1'000'000, g);
  pull(c, g.ids);
  std::vector<float> want(16);
  for (std::size_t i = 0; i < g.ids.size(); ++i) {
    c.table->init_row(g.ids[i], want.data());
    if (!std::equal(want.begin(), want.end(), c.rows.begin() + static_cast<std::ptrdiff_t>(i * 16)))
      die("check: pulled row " + std::to_string(g.ids[i]) + " is not its initial value");
  }
  auto opt = must(nn::make_optimizer(b.spec.nn.train.optimizer), "optimizer");
  nn::row_slots slots(16, *opt);
  nn::apply_sparse(*opt, *c.table, g, slots);
  push(c, g);
  pull(c, g.ids);
  std::vector<float> local(g.ids.size() * 16);
  c.table->read_rows(g.ids, local.data());
  if (local != c.rows) die("check: rows after the push differ from the optimizer's update");
  std::printf("{\"bench\":\"ps_pull_push_check\",\"rows\":%zu,\"ok\":true}\n", g.ids.size());
  return 0;
}

int serve(const bench_data& b, const std::string& work, const std::string& addr) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);  // before any thread starts
  auto [host, port] = split_addr(addr);
  auto h = must(bench::shard_host::start(b.spec, b.data, work, host, port), "shard");
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
    else if (a == "--work")
      work = val();
    else
      die("unknown argument '" + a + "'");
  }
  if (mode.empty()) die("usage: ps_bench --serve HOST:PORT | --fetch HOST:PORT | --loopback | --check");
  spdlog::set_level(spdlog::level::warn);
  auto b = prepare(work);
  if (mode == "serve") return serve(b, work, addr);
  if (mode == "fetch") {
    auto c = connect(b, addr);
    run_rounds(c, seconds, ids, addr);
    return 0;
  }
  // Loopback and check: a fresh shard (no checkpoint from an earlier run) in this process.
  const std::string shard_work = work + "/shard-" + std::to_string(::getpid());
  fs::remove_all(shard_work);
  int rc = 0;
  {
    auto h = must(bench::shard_host::start(b.spec, b.data, shard_work, "127.0.0.1", 0), "shard");
    auto c = connect(b, h->bound());
    if (mode == "check")
      rc = check(c, b);
    else
      run_rounds(c, seconds, ids, "loopback");
  }
  fs::remove_all(shard_work);
  return rc;
}
