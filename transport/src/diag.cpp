#include "troupe/transport/diag.hpp"

#include <algorithm>
#include <future>
#include <numeric>
#include <vector>

#include "troupe/transport/errc.hpp"
#include "troupe/transport/message.hpp"

namespace troupe {
namespace {
std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
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
  struct state {
    std::vector<double> rtts;
    std::uint64_t seq = 0;
    std::promise<expected<void>> done;
    bool finished = false;
  };
  auto st = std::make_shared<state>();
  st->rtts.reserve(o.count);
  const std::string me = probe_name("ping");
  const std::uint64_t total = o.count + o.warmup;
  auto send_next = [&ep, st, o, me] {
    outbound m(static_cast<unsigned>(64 + o.payload_bytes / 8));
    auto p = m.body().initPing();
    p.setSeq(++st->seq);
    p.initPayload(o.payload_bytes);
    p.setSentNs(now_ns());
    if (auto r = ep.send(o.node, o.name, std::move(m), me); !r && !st->finished) {
      st->finished = true;
      st->done.set_value(r);
    }
  };
  auto reg = ep.register_name(me, [st, send_next, total, warmup = o.warmup](const message& m) {
    if (!m.body().isPong() || st->finished) return;
    auto pong = m.body().getPong();
    if (pong.getSeq() != st->seq) return;
    if (st->seq > warmup) st->rtts.push_back(static_cast<double>(now_ns() - pong.getSentNs()) / 1000.0);
    if (st->seq >= total) {
      st->finished = true;
      st->done.set_value({});
      return;
    }
    send_next();
  });
  if (!reg) return std::move(reg).err();
  auto fut = st->done.get_future();
  ep.post(send_next);
  const bool ready = fut.wait_for(o.timeout) == std::future_status::ready;
  ep.unregister_name(me);
  if (!ready)
    return make_unexpected(transport_errc::timeout, "ping " + o.node + ": no pong within the timeout");
  if (auto r = fut.get(); !r) return std::move(r).err();
  // The handler no longer touches rtts once finished is set (before the promise).
  std::vector<double> v = st->rtts;
  std::sort(v.begin(), v.end());
  ping_result res;
  res.count = v.size();
  res.payload_bytes = o.payload_bytes;
  if (!v.empty()) {
    res.min_us = v.front();
    res.max_us = v.back();
    res.p50_us = percentile(v, 0.50);
    res.p90_us = percentile(v, 0.90);
    res.p99_us = percentile(v, 0.99);
    res.mean_us = std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
  }
  return res;
}

expected<bulk_result> run_bulk(endpoint& ep, const bulk_options& o) {
  if (ep.in_io_thread()) return make_unexpected(transport_errc::wrong_thread, "run_bulk");
  static std::vector<std::byte> payload;  // referenced, never copied, by every bulk frame
  if (payload.size() < o.frame_bytes) payload.assign(o.frame_bytes, std::byte{0x5a});
  auto done = std::make_shared<std::promise<void>>();
  auto fut = done->get_future();
  const std::string me = probe_name("bulk");
  auto reg = ep.register_name(me, [done](const message& m) {
    if (m.body().isPong()) done->set_value();
  });
  if (!reg) return std::move(reg).err();
  const auto start = std::chrono::steady_clock::now();
  const auto deadline = start + o.timeout;
  auto fail = [&](error e) {
    ep.unregister_name(me);
    return e;
  };
  for (std::size_t i = 0; i < o.frames + 1; ++i) {
    outbound m(64);
    auto p = m.body().initPing();
    p.setSeq(i + 1);
    if (i < o.frames) {
      p.setNoReply(true);
      capnp::Data::Reader ext(reinterpret_cast<const capnp::byte*>(payload.data()), o.frame_bytes);
      p.adoptPayload(m.builder().getOrphanage().referenceExternalData(ext));
    }
    auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return fail(error(transport_errc::timeout, "bulk to " + o.node));
    if (auto r = ep.send(o.node, o.name, std::move(m), me, left); !r) return fail(std::move(r).err());
  }
  const bool ready = fut.wait_until(deadline) == std::future_status::ready;
  ep.unregister_name(me);
  if (!ready) return make_unexpected(transport_errc::timeout, "bulk to " + o.node + ": no final pong");
  bulk_result res;
  res.frames = o.frames;
  res.frame_bytes = o.frame_bytes;
  res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  res.gbit_per_s = static_cast<double>(o.frames * o.frame_bytes) * 8 / 1e9 / res.seconds;
  return res;
}

}  // namespace troupe
