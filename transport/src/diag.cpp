#include "troupe/transport/diag.hpp"

#include <algorithm>
#include <future>
#include <numeric>
#include <vector>

#include "troupe/transport/errc.hpp"
#include "troupe/transport/message.hpp"

namespace troupe {
namespace {
std::int64_t now_ns(const clock& clk) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(clk.now().time_since_epoch()).count();
}

std::atomic<std::uint64_t> probe_counter{0};
std::string probe_name(const char* kind) {
  return std::string(kind) + "-" + std::to_string(++probe_counter);
}

double percentile(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) return 0;
  auto i = static_cast<std::size_t>(q * static_cast<double>(sorted.size() - 1) + 0.5);
  return sorted[std::min(i, sorted.size() - 1)];
}

// Waits for `f` until `deadline` on `clk`, in slices, so that a manual clock moved past the deadline
// ends the wait; true when the value came.
template <class T>
bool wait_until(clock& clk, std::future<T>& f, clock::time_point deadline) {
  while (f.wait_for(std::chrono::milliseconds(20)) != std::future_status::ready)
    if (clk.now() >= deadline) return false;
  return true;
}

// One prober's round trips: the handler (io thread) appends, run_ping reads once `finished` is set.
struct ping_state {
  std::vector<double> rtts;
  std::uint64_t seq = 0;
  std::promise<expected<void>> done;
  bool finished = false;

  void finish(expected<void> r) {
    if (finished) return;
    finished = true;
    done.set_value(std::move(r));
  }
};

ping_result summarize(std::vector<double> v, std::size_t payload_bytes) {
  std::sort(v.begin(), v.end());
  ping_result res;
  res.count = v.size();
  res.payload_bytes = payload_bytes;
  if (v.empty()) return res;
  res.min_us = v.front();
  res.max_us = v.back();
  res.p50_us = percentile(v, 0.50);
  res.p90_us = percentile(v, 0.90);
  res.p99_us = percentile(v, 0.99);
  res.mean_us = std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
  return res;
}

// The probe's target watched: a node without that name (not a `troupe net serve` node) answers "not
// registered" at once, and a node that goes down says so, where the probe waited out its whole timeout
// (30 s) for a reply that never came. `fail` runs on the io thread.
std::uint64_t watch_target(endpoint& ep, const std::string& node, const std::string& name,
                           std::function<void(expected<void>)> fail) {
  return ep.watch(
      node, name, [fail = std::move(fail), node, name](const actor_address&, const std::string& why) {
        const auto code = why == "not registered" ? transport_errc::bad_name : transport_errc::not_connected;
        fail(make_unexpected(code,
                             "'" + name + "' on node " + node + ": " + why +
                                 (why == "not registered" ? " (is it a `troupe net serve` node?)" : "")));
      });
}
}  // namespace

expected<void> install_echo(endpoint& ep, const std::string& name) {
  return ep.register_name(name, [&ep, name](const message& m) {
    if (!m.body().isPing()) return;
    auto ping = m.body().getPing();
    if (ping.getNoReply()) return;
    outbound o(static_cast<unsigned>(64 + ping.getPayload().size() / 8));
    auto pong = o.body().initPong();
    pong.setSeq(ping.getSeq());
    pong.setSentNs(ping.getSentNs());
    pong.setPayload(ping.getPayload());
    (void)ep.send(m.from_node().name, std::string(m.from()), std::move(o), name);
  });
}

expected<ping_result> run_ping(endpoint& ep, const ping_options& o) {
  if (ep.in_io_thread()) return make_unexpected(transport_errc::wrong_thread, "run_ping");
  auto st = std::make_shared<ping_state>();
  st->rtts.reserve(o.count);
  const std::string me = probe_name("ping");
  const std::uint64_t total = o.count + o.warmup;
  clock& clk = o.clock;
  auto send_next = [&ep, &clk, st, o, me] {
    outbound m(static_cast<unsigned>(64 + o.payload_bytes / 8));
    auto p = m.body().initPing();
    p.setSeq(++st->seq);
    p.initPayload(o.payload_bytes);
    p.setSentNs(now_ns(clk));
    if (auto r = ep.send(o.node, o.name, std::move(m), me); !r) st->finish(r);
  };
  auto reg = ep.register_name(me, [&clk, st, send_next, total, warmup = o.warmup](const message& m) {
    if (!m.body().isPong() || st->finished) return;
    auto pong = m.body().getPong();
    if (pong.getSeq() != st->seq) return;
    if (st->seq > warmup) st->rtts.push_back(static_cast<double>(now_ns(clk) - pong.getSentNs()) / 1000.0);
    if (st->seq >= total) return st->finish({});
    send_next();
  });
  if (!reg) return std::move(reg).err();
  auto fut = st->done.get_future();
  const auto watch = watch_target(ep, o.node, o.name, [st](expected<void> e) { st->finish(std::move(e)); });
  ep.post(send_next);
  const bool ready = wait_until(clk, fut, clk.now() + o.timeout);
  ep.unwatch(watch);
  ep.unregister_name(me);
  if (!ready)
    return make_unexpected(transport_errc::timeout, "ping " + o.node + ": no pong within the timeout");
  if (auto r = fut.get(); !r) return std::move(r).err();
  // The handler no longer touches rtts once finished is set (before the promise).
  return summarize(st->rtts, o.payload_bytes);
}

namespace {
// Sends the bulk frames (no reply) and the final ping (replied) until `deadline`, or until `over`
// (the watch said the target is not there: the rest would go to a node that drops it all).
expected<void> send_bulk(endpoint& ep, const bulk_options& o, const std::string& me,
                         clock::time_point deadline, const std::function<bool()>& over) {
  static std::vector<std::byte> payload;  // referenced, never copied, by every bulk frame
  if (payload.size() < o.frame_bytes) payload.assign(o.frame_bytes, std::byte{0x5a});
  clock& clk = o.clock;
  for (std::size_t i = 0; i < o.frames + 1; ++i) {
    outbound m(64);
    auto p = m.body().initPing();
    p.setSeq(i + 1);
    if (i < o.frames) {
      p.setNoReply(true);
      capnp::Data::Reader ext(reinterpret_cast<const capnp::byte*>(payload.data()), o.frame_bytes);
      p.adoptPayload(m.builder().getOrphanage().referenceExternalData(ext));
    }
    if (over()) return {};
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clk.now());
    if (left.count() <= 0) return make_unexpected(transport_errc::timeout, "bulk to " + o.node);
    if (auto r = ep.send(o.node, o.name, std::move(m), me, left); !r) return r;
  }
  return {};
}
}  // namespace

expected<bulk_result> run_bulk(endpoint& ep, const bulk_options& o) {
  if (ep.in_io_thread()) return make_unexpected(transport_errc::wrong_thread, "run_bulk");
  auto done = std::make_shared<ping_state>();  // its rtts unused: the final pong or the watch's news
  auto fut = done->done.get_future();
  const std::string me = probe_name("bulk");
  auto reg = ep.register_name(me, [done](const message& m) {
    if (m.body().isPong()) done->finish({});
  });
  if (!reg) return std::move(reg).err();
  const auto watch =
      watch_target(ep, o.node, o.name, [done](expected<void> e) { done->finish(std::move(e)); });
  struct unwatch_at_exit {
    endpoint& ep;
    std::uint64_t id;
    ~unwatch_at_exit() { ep.unwatch(id); }
  } unwatch{ep, watch};
  clock& clk = o.clock;
  const auto start = clk.now();
  const auto deadline = start + o.timeout;
  auto over = [&fut] { return fut.wait_for(std::chrono::seconds(0)) == std::future_status::ready; };
  if (auto sent = send_bulk(ep, o, me, deadline, over); !sent) {
    ep.unregister_name(me);
    return std::move(sent).err();
  }
  const bool ready = wait_until(clk, fut, deadline);
  ep.unregister_name(me);
  if (!ready) return make_unexpected(transport_errc::timeout, "bulk to " + o.node + ": no final pong");
  if (auto r = fut.get(); !r) return std::move(r).err();
  bulk_result res;
  res.frames = o.frames;
  res.frame_bytes = o.frame_bytes;
  res.seconds = std::chrono::duration<double>(clk.now() - start).count();
  res.gbit_per_s = static_cast<double>(o.frames * o.frame_bytes) * 8 / 1e9 / res.seconds;
  return res;
}

}  // namespace troupe
