#include "gpu_comm_client.hpp"

#include <algorithm>
#include <optional>

#include "troupe/collective/ring.hpp"
#include "troupe/wire/messages.hpp"

namespace troupe::actors {

namespace {

expected<wire::gpu_comm_info> call(wire::rpc_channel& rpc, outbound out, std::chrono::milliseconds timeout) {
  auto reply = rpc.call({"master", "master", std::move(out)}, timeout);
  if (!reply) return reply.err();
  expected<wire::gpu_comm_info> s = make_unexpected(core_errc::io_error, "master: malformed GpuCommInfo");
  wire::guarded("gpu comm info", [&] {
    auto j = reply->body().getJob();
    if (j.which() == schema::JobMessage::GPU_COMM_INFO) s = wire::read_gpu_info(j.getGpuCommInfo());
  });
  return s;
}

expected<wire::gpu_comm_info> post(wire::rpc_channel& rpc, const wire::gpu_comm_post& mine,
                                   std::chrono::milliseconds timeout) {
  auto o = wire::job();
  wire::write_gpu_post(o.body.initGpuCommPost(), mine);
  return call(rpc, std::move(o.out), timeout);
}

expected<wire::gpu_comm_info> fetch(wire::rpc_channel& rpc, std::uint64_t epoch,
                                    std::chrono::milliseconds timeout) {
  auto o = wire::job();
  o.body.initGpuCommFetch().setRingEpoch(epoch);
  return call(rpc, std::move(o.out), timeout);
}

bool has_rank(const wire::gpu_comm_info& s, std::uint32_t rank) {
  for (const auto& p : s.posted)
    if (p.rank == rank) return true;
  return false;
}

std::string missing(const wire::gpu_comm_info& s, std::uint32_t ranks) {
  std::string out;
  for (std::uint32_t r = 0; r < ranks; ++r)
    if (!has_rank(s, r)) out += (out.empty() ? "" : ", ") + std::to_string(r);
  return out.empty() ? "none" : out;
}

}  // namespace

expected<wire::gpu_comm_info> gpu_comm_exchange(wire::rpc_channel& rpc, const wire::gpu_comm_post& mine,
                                                const gpu_exchange_options& o) {
  troupe::clock& clk = *o.clock;
  auto deadline = clk.now() + o.timeout;
  auto left = [&] {
    return std::max(std::chrono::milliseconds(1),
                    std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clk.now()));
  };
  auto s = post(rpc, mine, left());
  std::optional<wire::gpu_comm_info> last;  // the latest answer, for the timeout's message
  while (true) {
    if (!s && last && clk.now() >= deadline) s = *last;  // a call cut short by the deadline
    if (!s)
      return std::move(s).err().wrap("gpu comm rendezvous of ring epoch " + std::to_string(mine.ring_epoch));
    last = *s;
    if (s->complete() && (!o.need_unique_id || !s->unique_id.empty())) return s;
    if (o.current_epoch && o.current_epoch->load() != mine.ring_epoch)
      return make_unexpected(collective::collective_errc::cancelled,
                             "gpu comm rendezvous: ring epoch " + std::to_string(mine.ring_epoch) +
                                 " replaced by " + std::to_string(o.current_epoch->load()));
    if (clk.now() >= deadline)
      return make_unexpected(
          collective::collective_errc::timeout,
          "gpu comm rendezvous of ring epoch " + std::to_string(mine.ring_epoch) +
              (s->complete() ? ": no unique id from rank 0 after " + std::to_string(o.timeout.count()) + " ms"
                             : ": ranks still missing after " + std::to_string(o.timeout.count()) +
                                   " ms: " + missing(*s, mine.ranks)));
    // No event tells this rank of the others' posts (the master holds no request until they
    // come): a pause, then the next fetch.
    clk.sleep_for(o.poll);
    s = fetch(rpc, mine.ring_epoch, left());
    // A restarted master forgot every post: post again.
    if (s && !has_rank(*s, mine.who.rank)) s = post(rpc, mine, left());
  }
}

}  // namespace troupe::actors
