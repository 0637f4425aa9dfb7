// One rank of a ring session (collective/mixed/session.hpp) with a fixed membership, for runs across
// hosts (scripts/hosts.sh): the session links each pair of neighbours by their host keys, shared
// memory inside a host and TCP across, so ranks 2+2 on two hosts form one ring mixing both.
//   ring_session_rank --rank R --hosts K0,K1,... --addrs A0,A1,... [--job NAME] [--mb M] [--iters K]
//                     [--heartbeat-ms H] [--timeout-ms T]
// K<i>: rank i's host key (equal keys: linked over shared memory; give every rank its own key for an
// all-TCP ring); A<i>: rank i's ring listener "ip:port" (rank R listens on A<R>). Every rank checks
// every element of every sum; rank 0 prints one JSON line with the median algbw and busbw
// (nccl-tests convention). Exit 0 when all sums were exact.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "troupe/collective/mixed/session.hpp"

using namespace troupe;
using namespace troupe::collective;
using steady = std::chrono::steady_clock;

namespace {

struct args {
  int rank = 0, iters = 10;
  double mb = 64;
  std::vector<std::string> hosts, addrs;
  std::string job = "ringbench";
  long heartbeat_ms = 3000, timeout_ms = 60000;
};

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');) out.push_back(item);
  return out;
}

bool parse(int argc, char** argv, args& a) {
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i], v = argv[i + 1];
    if (k == "--rank")
      a.rank = std::atoi(v.c_str());
    else if (k == "--hosts")
      a.hosts = split(v);
    else if (k == "--addrs")
      a.addrs = split(v);
    else if (k == "--job")
      a.job = v;
    else if (k == "--mb")
      a.mb = std::atof(v.c_str());
    else if (k == "--iters")
      a.iters = std::atoi(v.c_str());
    else if (k == "--heartbeat-ms")
      a.heartbeat_ms = std::atol(v.c_str());
    else if (k == "--timeout-ms")
      a.timeout_ms = std::atol(v.c_str());
    else
      return false;
  }
  int n = static_cast<int>(a.hosts.size());
  return argc % 2 == 1 && n >= 2 && a.addrs.size() == a.hosts.size() && a.rank >= 0 && a.rank < n &&
         a.iters > 0;
}

// The node side of the session: one fixed view (epoch 1), this host's liveness, a listener.
class fixed_context final : public ring_context {
 public:
  fixed_context(const args& a, std::unique_ptr<tcp_listener> l)
      : job_(a.job), live_(make_host_liveness(a.job)), listener_(std::move(l)) {
    for (std::size_t i = 0; i < a.hosts.size(); ++i) {
      ring_member m;
      m.id = {"worker-" + std::to_string(i), 1};
      m.host = a.hosts[i];
      m.ring_address = a.addrs[i];
      ring_.ranks.push_back(std::move(m));
    }
    ring_.epoch = 1;
    self_ = ring_.ranks[static_cast<std::size_t>(a.rank)].id;
    if (auto b = live_->start(self_); b) beacon_ = std::move(*b);
  }
  const std::string& job() const override { return job_; }
  const node_id& self() const override { return self_; }
  ring_members members() const override { return ring_; }
  const std::atomic<std::uint64_t>& ring_epoch() const override { return epoch_; }
  void report_gone(const node_id& node, const std::string& why) override {
    std::fprintf(stderr, "gone: %s (%s)\n", node.to_string().c_str(), why.c_str());
  }
  liveness& live() override { return *live_; }
  tcp_listener* ring_listener() override { return listener_.get(); }
  // Every rank of a run is given the job id: it stands for the job's token.
  const std::string& ring_secret() const override { return job_; }

 private:
  std::string job_;
  node_id self_;
  ring_members ring_;
  std::atomic<std::uint64_t> epoch_{1};
  std::unique_ptr<liveness> live_;
  std::unique_ptr<liveness::beacon> beacon_;
  std::unique_ptr<tcp_listener> listener_;
};

// Rank r's data: (r + 1) * (i % 7 + 1), so every sum is exact: n(n+1)/2 * (i % 7 + 1).
void fill(std::vector<float>& d, int rank) {
  for (std::size_t i = 0; i < d.size(); ++i)
    d[i] = static_cast<float>((rank + 1) * static_cast<int>(i % 7 + 1));
}

bool exact(const std::vector<float>& d, int size) {
  for (std::size_t i = 0; i < d.size(); ++i)
    if (d[i] != static_cast<float>(size * (size + 1) / 2 * static_cast<int>(i % 7 + 1))) return false;
  return true;
}

int run(ring_session& s, const args& a, int size) {
  auto n = static_cast<std::size_t>(a.mb * (1 << 20) / sizeof(float));
  std::vector<float> data(n), bar(static_cast<std::size_t>(size));
  std::vector<double> times;
  for (int it = 0; it < a.iters + 2; ++it) {
    fill(data, a.rank);
    (void)s.allreduce(bar);  // all ranks start together
    auto t0 = steady::now();
    auto res = s.allreduce(data);
    double dt = std::chrono::duration<double>(steady::now() - t0).count();
    if (!res) {
      std::fprintf(stderr, "rank %d: %s\n", a.rank, res.err().to_string().c_str());
      return 3;
    }
    if (!exact(data, size)) {
      std::fprintf(stderr, "rank %d: wrong sum\n", a.rank);
      return 4;
    }
    if (it >= 2) times.push_back(dt);
  }
  if (a.rank == 0) {
    std::sort(times.begin(), times.end());
    double med = times[times.size() / 2], bytes = static_cast<double>(n) * sizeof(float);
    double algbw = bytes / med / 1e9;
    std::string hosts;
    for (const auto& k : a.hosts) hosts.append(hosts.empty() ? "" : ",").append(k);
    std::printf(
        "{\"bench\":\"ring_session_allreduce\",\"ranks\":%d,\"hosts\":\"%s\",\"bytes\":%.0f,\"iters\":%d,"
        "\"median_s\":%.6f,\"algbw_GBps\":%.3f,\"busbw_GBps\":%.3f}\n",
        size, hosts.c_str(), bytes, a.iters, med, algbw, algbw * 2.0 * (size - 1) / size);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  args a;
  if (!parse(argc, argv, a)) {
    std::fprintf(stderr,
                 "usage: ring_session_rank --rank R --hosts K0,K1,... --addrs IP:PORT,... [--job NAME] "
                 "[--mb M] [--iters K] [--heartbeat-ms H] [--timeout-ms T]\n");
    return 2;
  }
  const auto& mine = a.addrs[static_cast<std::size_t>(a.rank)];
  auto colon = mine.rfind(':');
  auto listener = tcp_listener::open(mine.substr(0, colon),
                                     static_cast<std::uint16_t>(std::atoi(mine.c_str() + colon + 1)));
  if (!listener) {
    std::fprintf(stderr, "rank %d: %s\n", a.rank, listener.err().to_string().c_str());
    return 1;
  }
  fixed_context ctx(a, std::move(*listener));
  mixed_session_options o;
  o.capacity = 4 << 20;
  o.timeout = std::chrono::milliseconds(a.timeout_ms);
  o.heartbeat_timeout = std::chrono::milliseconds(a.heartbeat_ms);
  mixed_ring_session s(ctx, o);
  auto info = s.ensure();
  std::fprintf(stderr, "rank %d: ring ready\n", a.rank);
  if (!info) {
    std::fprintf(stderr, "rank %d: %s\n", a.rank, info.err().to_string().c_str());
    return 1;
  }
  int rc = run(s, a, static_cast<int>(a.hosts.size()));
  // A rank that is done may exit while its previous rank still waits on another neighbour to finish
  // the last exchange; its links' closing would read as a death there. Linger a little first.
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  return rc;
}
