#include "gpu_rendezvous.hpp"

namespace troupe::actors {

namespace {
expected<void> check_text(const char* what, const std::string& s) {
  if (s.size() > gpu_rendezvous::max_text)
    return make_unexpected(core_errc::invalid_argument,
                           std::string("gpu comm post: ") + what + " longer than " +
                               std::to_string(gpu_rendezvous::max_text) + " bytes");
  return {};
}
gpu_rendezvous::snapshot empty(std::uint64_t epoch) {
  gpu_rendezvous::snapshot s;
  s.ring_epoch = epoch;
  return s;
}
}  // namespace

expected<void> gpu_rendezvous::check_fresh(std::uint64_t ring_epoch) const {
  if (ring_epoch < floor_)
    return make_unexpected(core_errc::out_of_range, "stale ring epoch " + std::to_string(ring_epoch) +
                                                        " (current " + std::to_string(floor_) + ")");
  return {};
}

gpu_rendezvous::snapshot gpu_rendezvous::to_snapshot(std::uint64_t epoch, const entry& e) {
  snapshot s{epoch, e.ranks, {}, e.unique_id};
  for (const auto& [rank, p] : e.posted) s.posted.push_back(p);
  return s;
}

expected<gpu_rendezvous::snapshot> gpu_rendezvous::add(const post& p) {
  if (auto f = check_fresh(p.ring_epoch); !f) return f.err();
  if (p.ranks == 0 || p.ranks > max_ranks)
    return make_unexpected(core_errc::out_of_range, "gpu comm post: ring size " + std::to_string(p.ranks) +
                                                        " outside 1.." + std::to_string(max_ranks));
  if (p.who.rank >= p.ranks)
    return make_unexpected(core_errc::out_of_range, "gpu comm post: rank " + std::to_string(p.who.rank) +
                                                        " outside a ring of " + std::to_string(p.ranks));
  for (auto [what, s] :
       {std::pair{"node", &p.who.node}, {"host", &p.who.host}, {"device uuid", &p.who.device_uuid}})
    if (auto c = check_text(what, *s); !c) return c.err();
  if (!p.unique_id.empty() && p.who.rank != 0)
    return make_unexpected(core_errc::invalid_argument, "gpu comm post: rank " + std::to_string(p.who.rank) +
                                                            " sent a unique id (only rank 0 does)");
  if (!p.unique_id.empty() && p.unique_id.size() != unique_id_bytes)
    return make_unexpected(core_errc::invalid_argument,
                           "gpu comm post: unique id of " + std::to_string(p.unique_id.size()) +
                               " bytes (want " + std::to_string(unique_id_bytes) + ")");
  auto found = epochs_.find(p.ring_epoch);
  if (found != epochs_.end() && found->second.ranks != p.ranks)
    return make_unexpected(core_errc::invalid_argument,
                           "gpu comm post: ring epoch " + std::to_string(p.ring_epoch) + " has " +
                               std::to_string(found->second.ranks) + " ranks, the post says " +
                               std::to_string(p.ranks));
  auto& e = epochs_[p.ring_epoch];
  e.ranks = p.ranks;
  e.posted[p.who.rank] = p.who;
  if (e.unique_id.empty()) e.unique_id = p.unique_id;
  while (epochs_.size() > max_epochs) epochs_.erase(epochs_.begin());
  auto it = epochs_.find(p.ring_epoch);
  if (it == epochs_.end()) return empty(p.ring_epoch);  // older than every kept epoch
  return to_snapshot(p.ring_epoch, it->second);
}

expected<gpu_rendezvous::snapshot> gpu_rendezvous::get(std::uint64_t ring_epoch) const {
  if (auto f = check_fresh(ring_epoch); !f) return f.err();
  auto it = epochs_.find(ring_epoch);
  if (it == epochs_.end()) return empty(ring_epoch);
  return to_snapshot(ring_epoch, it->second);
}

void gpu_rendezvous::forget_before(std::uint64_t ring_epoch) {
  if (ring_epoch <= floor_) return;
  floor_ = ring_epoch;
  epochs_.erase(epochs_.begin(), epochs_.lower_bound(ring_epoch));
}

// ---- wire ----

namespace {
std::string text(capnp::Text::Reader t) {
  return {t.cStr(), t.size()};
}
std::string bytes(capnp::Data::Reader d) {
  return {reinterpret_cast<const char*>(d.begin()), d.size()};
}
kj::ArrayPtr<const kj::byte> bytes_of(const std::string& s) {
  return kj::arrayPtr(reinterpret_cast<const kj::byte*>(s.data()), s.size());
}
}  // namespace

gpu_rendezvous::post read_gpu_post(schema::GpuCommPost::Reader r) {
  gpu_rendezvous::post p;
  p.ring_epoch = r.getRingEpoch();
  p.ranks = r.getRanks();
  p.who = {r.getRank(), text(r.getNode()), text(r.getHost()), text(r.getDeviceUuid())};
  p.unique_id = bytes(r.getUniqueId());
  return p;
}

void write_gpu_post(schema::GpuCommPost::Builder b, const gpu_rendezvous::post& p) {
  b.setRingEpoch(p.ring_epoch);
  b.setRanks(p.ranks);
  b.setRank(p.who.rank);
  b.setNode(p.who.node);
  b.setHost(p.who.host);
  b.setDeviceUuid(p.who.device_uuid);
  b.setUniqueId(bytes_of(p.unique_id));
}

void write_gpu_info(schema::GpuCommInfo::Builder b, const expected<gpu_rendezvous::snapshot>& s) {
  if (!s) {
    b.setError(s.err().to_string());
    return;
  }
  b.setRingEpoch(s->ring_epoch);
  b.setRanks(s->ranks);
  b.setUniqueId(bytes_of(s->unique_id));
  auto list = b.initPosted(static_cast<unsigned>(s->posted.size()));
  for (unsigned i = 0; i < list.size(); ++i) {
    const auto& p = s->posted[i];
    list[i].setRank(p.rank);
    list[i].setNode(p.node);
    list[i].setHost(p.host);
    list[i].setDeviceUuid(p.device_uuid);
  }
}

expected<gpu_rendezvous::snapshot> read_gpu_info(schema::GpuCommInfo::Reader r) {
  if (r.getError().size() > 0) return make_unexpected(core_errc::io_error, "master: " + text(r.getError()));
  gpu_rendezvous::snapshot s{r.getRingEpoch(), r.getRanks(), {}, bytes(r.getUniqueId())};
  for (auto p : r.getPosted())
    s.posted.push_back({p.getRank(), text(p.getNode()), text(p.getHost()), text(p.getDeviceUuid())});
  return s;
}

}  // namespace troupe::actors
