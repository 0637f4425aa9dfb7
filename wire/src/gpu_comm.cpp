#include "troupe/wire/gpu_comm.hpp"

namespace troupe::wire {

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

gpu_comm_post read_gpu_post(schema::GpuCommPost::Reader r) {
  gpu_comm_post p;
  p.ring_epoch = r.getRingEpoch();
  p.ranks = r.getRanks();
  p.who = {r.getRank(), text(r.getNode()), text(r.getHost()), text(r.getDeviceUuid())};
  p.unique_id = bytes(r.getUniqueId());
  return p;
}

void write_gpu_post(schema::GpuCommPost::Builder b, const gpu_comm_post& p) {
  b.setRingEpoch(p.ring_epoch);
  b.setRanks(p.ranks);
  b.setRank(p.who.rank);
  b.setNode(p.who.node);
  b.setHost(p.who.host);
  b.setDeviceUuid(p.who.device_uuid);
  b.setUniqueId(bytes_of(p.unique_id));
}

void write_gpu_info(schema::GpuCommInfo::Builder b, const expected<gpu_comm_info>& s) {
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

expected<gpu_comm_info> read_gpu_info(schema::GpuCommInfo::Reader r) {
  if (r.getError().size() > 0) return make_unexpected(core_errc::io_error, "master: " + text(r.getError()));
  gpu_comm_info s{r.getRingEpoch(), r.getRanks(), {}, bytes(r.getUniqueId())};
  for (auto p : r.getPosted())
    s.posted.push_back({p.getRank(), text(p.getNode()), text(p.getHost()), text(p.getDeviceUuid())});
  return s;
}

}  // namespace troupe::wire
