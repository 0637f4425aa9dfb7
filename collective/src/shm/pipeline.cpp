// shm_ring_link's own allreduce: NCCL's ring allreduce over the shared-memory rings. The data is cut
// into the ring's n segments and each segment into chunks; a round moves one chunk of every segment
// through the ring's 2n-2 steps as a sequence of operations, each reading at most one message from
// the previous rank's ring and writing at most one into the next rank's:
//
//   send (its own segment) | recvReduceSend x (n-2) | recvReduceCopySend | recvCopySend x (n-2) | recv
//
// A received piece is summed with the local values straight into the next rank's ring, so the
// partial sums of the reduce-scatter never touch the local buffer and a reduced chunk is copied out
// once while it is passed on: about 5 memory passes per byte of data where ring_allreduce's exchanges
// (a copy into the ring, a sum or copy out of it, step by step) make 6.75 at 4 ranks. Every op's
// message carries the usual header (epoch, op, step, floats), checked as ever. Rings of at least 4
// chunks keep it deadlock-free: an op streams what it can read into what it can write.
#include <algorithm>
#include <cstring>

#include "shm/stream.hpp"
#include "troupe/collective/shm/link.hpp"
#include "troupe/transport/shm_ring.hpp"

namespace troupe::collective {

using namespace shm_detail;

namespace {

enum class op_kind { send, reduce_send, reduce_copy_send, copy_send, recv };

// Fused steps are numbered above ring_allreduce's (which the lanes' agreement uses with the same op).
constexpr std::uint32_t fused_step_base = 1u << 30;

// One piece of an op: `in` (the previous rank's values) and `local` (this rank's chunk) into `out`
// (the next rank's ring) and/or back into `local`.
inline void run_piece(op_kind k, const float* in, float* local, float* out, std::size_t n) {
  switch (k) {
    case op_kind::send:
      std::memcpy(out, local, n * sizeof(float));
      break;
    case op_kind::reduce_send:
      for (std::size_t i = 0; i < n; ++i) out[i] = in[i] + local[i];
      break;
    case op_kind::reduce_copy_send:
      for (std::size_t i = 0; i < n; ++i) {
        float v = in[i] + local[i];
        local[i] = v;
        out[i] = v;
      }
      break;
    case op_kind::copy_send:
      std::memcpy(local, in, n * sizeof(float));
      std::memcpy(out, in, n * sizeof(float));
      break;
    case op_kind::recv:
      std::memcpy(local, in, n * sizeof(float));
      break;
  }
}

op_kind kind_of(int p, int n) {
  return p == 0          ? op_kind::send
         : p < n - 1     ? op_kind::reduce_send
         : p == n - 1    ? op_kind::reduce_copy_send
         : p < 2 * n - 2 ? op_kind::copy_send
                         : op_kind::recv;
}

}  // namespace

namespace shm_detail {
// One op of a round: its kind, this rank's chunk, the tag of the message it reads and the header of
// the one it writes (a message of no payload: the payload is written in place by move_payload).
struct fused_op {
  op_kind kind;
  std::span<float> local;
  step_tag in_tag;
  sender header;
  bool has_in() const { return kind != op_kind::send; }
  bool has_out() const { return kind != op_kind::recv; }
};
}  // namespace shm_detail

namespace {
// Moves what both rings allow of `f`'s payload from `done` on; true when anything moved.
inline bool move_payload(const fused_op& f, transport::shm_ring& in, transport::shm_ring& out,
                         std::size_t& done) {
  std::size_t m = f.local.size() - done;
  const float* src = nullptr;
  float* dst = nullptr;
  if (f.has_in()) {
    auto region = in.peek();
    m = std::min(m, region.size() / sizeof(float));
    src = reinterpret_cast<const float*>(region.data());
  }
  if (f.has_out()) {
    auto region = out.reserve();
    m = std::min(m, region.size() / sizeof(float));
    dst = reinterpret_cast<float*>(region.data());
  }
  if (m == 0) return false;
  run_piece(f.kind, src, f.local.data() + done, dst, m);
  if (f.has_in()) in.consume(m * sizeof(float));
  if (f.has_out()) out.commit(m * sizeof(float));
  done += m;
  return true;
}
}  // namespace

std::optional<expected<void>> shm_ring_link::own_allreduce(int rank, int size, std::span<float> data,
                                                           std::uint64_t epoch, std::uint64_t op) {
  if (!opt_.all_on_host || rank != opt_.rank || size != opt_.size ||
      data.size() * sizeof(float) < opt_.fused_min_bytes)
    return std::nullopt;
  unlink_attached();
  if (ring_lanes_ == 0) {
    // Once per link: every rank counts the ranks by their inbound lanes (a small allreduce of
    // exchanges, under this op); the pipeline uses as many lanes as the fewest.
    std::vector<float> have(max_lanes + 1, 0.f);
    have[static_cast<std::size_t>(lanes_in_)] = 1.f;
    if (auto r = ring_allreduce_exchanges(*this, rank, size, have, epoch, op); !r) return r;
    ring_lanes_ = 1;
    while (ring_lanes_ < max_lanes && have[static_cast<std::size_t>(ring_lanes_)] == 0.f) ++ring_lanes_;
  }
  const int used = lanes_for(data.size(), ring_lanes_);
  if (used == 1) return fused_lane(lanes_[0], data, 1, epoch, op);
  return on_lanes(used, [&](int l) {
    auto [b, e] = segment_bounds(data.size(), used, l);
    return fused_lane(lanes_[static_cast<std::size_t>(l)], data.subspan(b, e - b), used, epoch, op);
  });
}

std::size_t shm_ring_link::fused_chunk_bytes(int lanes) const noexcept {
  // The option's capacity (equal on every rank), not the ring's (a spare one may be larger).
  const std::size_t quarter = std::max<std::size_t>(opt_.capacity / 4, 4096);
  if (opt_.fused_chunk_bytes) return std::min(quarter, std::max<std::size_t>(opt_.fused_chunk_bytes, 4096));
  // On lanes (cores to spare) smaller chunks pass sooner: on the H200's 16 cores, 4 ranks x 4 lanes
  // and 8 x 2 ran 1.11-1.25x faster with 256 KiB than 1 MiB; on one lane of the 2-core VM, where
  // ranks share cores, 1 MiB was 1.06-1.38x faster (docs/benchmarks.md).
  return std::min(quarter, std::size_t{lanes > 1 ? 256u : 1024u} << 10);
}

expected<void> shm_ring_link::fused_lane(lane& l, std::span<float> data, int lanes, std::uint64_t epoch,
                                         std::uint64_t op) {
  const int n = opt_.size, rank = opt_.rank;
  const std::size_t chunk = fused_chunk_bytes(lanes) / sizeof(float);
  const std::size_t longest = segment_bounds(data.size(), n, 0).second;  // segment 0 is never shorter
  const std::size_t rounds = (longest + chunk - 1) / chunk;
  const std::uint32_t per_round = static_cast<std::uint32_t>(2 * n - 2);
  auto seg_chunk = [&](int s, std::size_t round) {
    auto [b, e] = segment_bounds(data.size(), n, ((s % n) + n) % n);
    std::size_t from = std::min(e, b + round * chunk), to = std::min(e, from + chunk);
    return data.subspan(from, to - from);
  };
  for (std::size_t round = 0; round < rounds; ++round) {
    const std::uint32_t step = fused_step_base + static_cast<std::uint32_t>(round) * per_round;
    for (int p = 0; p <= 2 * n - 2; ++p) {
      // Op p receives what the previous rank sent as its op p-1, of segment rank-p in the
      // reduce-scatter and rank-(p-n) in the allgather; op 0 sends this rank's own segment.
      std::span<float> local = seg_chunk(p < n ? rank - p : rank - (p - n), round);
      fused_op f{
          kind_of(p, n),
          local,
          {epoch, op, step + static_cast<std::uint32_t>(p - 1)},
          {{epoch, op, step + static_cast<std::uint32_t>(p), static_cast<std::uint32_t>(local.size())}, {}}};
      if (!f.has_out()) f.header.sent = f.header.total();
      if (auto r = run_fused_op(l, f); !r) return r;
    }
  }
  return {};
}

expected<void> shm_ring_link::run_fused_op(lane& l, fused_op& f) const {
  wire_header in_hdr{};
  std::size_t hdr_got = f.has_in() ? 0 : sizeof(wire_header);
  std::size_t done = 0;
  const auto start = opt_.clock.get().now();  // one look at the clock per op, as many as before
  const auto deadline = start + opt_.timeout;
  auto next_probe = start + std::chrono::milliseconds(5);
  while (!f.header.done() || hdr_got < sizeof(wire_header) || done < f.local.size()) {
    bool progressed = !f.header.done() && f.header.pump(*l.out);
    if (hdr_got < sizeof(wire_header)) {
      int r = pump_header(*l.in, in_hdr, hdr_got, f.in_tag, f.local.size());
      if (r < 0) return header_mismatch(in_hdr, f.in_tag, f.local.size());
      progressed |= r > 0;
    }
    if (f.header.done() && hdr_got == sizeof(wire_header) && done < f.local.size())
      progressed |= move_payload(f, *l.in, *l.out, done);
    if (progressed) continue;
    if (auto s = check_stall(l, f.in_tag, deadline, next_probe); !s) return s;
    // Waiting for the previous rank's data, else for room in the next rank's ring.
    if (f.has_in() && (hdr_got < sizeof(wire_header) || l.in->readable() == 0))
      l.in->wait_for_data(std::chrono::microseconds(100));
    else
      l.out->wait_for_space(std::chrono::microseconds(100));
  }
  return {};
}

}  // namespace troupe::collective
