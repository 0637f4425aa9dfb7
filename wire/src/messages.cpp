#include "troupe/wire/messages.hpp"

#include <spdlog/spdlog.h>

namespace troupe::wire {

bool guarded(const char* what, const std::function<void()>& fn) {
  try {
    fn();
    return true;
  } catch (const std::exception& e) {
    spdlog::warn("{}: dropped a malformed message: {}", what, e.what());
    return false;
  }
}

node_id read_node(schema::NodeRef::Reader r) {
  return {r.getName().cStr(), r.getIncarnation()};
}

void write_node(schema::NodeRef::Builder b, const node_id& id) {
  b.setName(id.name);
  b.setIncarnation(id.incarnation);
}

outbound join(const node_id& self, cluster::node_role role, const std::string& address, int pid,
              const std::string& ring_address) {
  outbound o;
  auto j = o.body().initJoin();
  write_node(j.initNode(), self);
  j.setAddress(address);
  j.setRole(std::string(cluster::to_string(role)));
  j.setPid(static_cast<std::uint32_t>(pid));
  j.setRingAddress(ring_address);
  return o;
}

namespace {
// A Membership of `epoch` listing `members` (every member, or a delta's changed ones).
schema::Membership::Builder init_membership(outbound& o, std::uint64_t epoch,
                                            const std::vector<cluster::member>& members,
                                            const std::string& reason, std::uint64_t ring_epoch,
                                            std::uint64_t master_incarnation) {
  auto m = o.body().initMembership();
  m.setEpoch(epoch);
  m.setReason(reason);
  m.setRingEpoch(ring_epoch);
  m.setMasterIncarnation(master_incarnation);
  write_members(m.initMembers(static_cast<unsigned>(members.size())), members);
  return m;
}
}  // namespace

outbound membership(const cluster::membership_view& v, const std::string& reason, std::uint64_t ring_epoch,
                    std::uint64_t master_incarnation) {
  outbound o;
  init_membership(o, v.epoch(), v.members(), reason, ring_epoch, master_incarnation);
  return o;
}

void write_members(capnp::List<schema::Member>::Builder list, const std::vector<cluster::member>& members) {
  unsigned i = 0;
  for (const auto& mem : members) {
    auto b = list[i++];
    write_node(b.initNode(), mem.id);
    b.setAddress(mem.address);
    b.setRole(std::string(cluster::to_string(mem.role)));
    b.setPid(static_cast<std::uint32_t>(mem.pid));
    b.setState(std::string(cluster::to_string(mem.state)));
    b.setRingAddress(mem.ring_address);
  }
}

namespace {
cluster::member_state parse_state(const std::string& s) {
  if (s == "alive") return cluster::member_state::alive;
  if (s == "leaving") return cluster::member_state::leaving;
  return cluster::member_state::launching;
}
}  // namespace

std::vector<cluster::member> read_members(capnp::List<schema::Member>::Reader list) {
  std::vector<cluster::member> members;
  for (auto m : list) {
    auto role = cluster::parse_role(m.getRole().cStr());
    if (!role) continue;  // a role this version does not know: not ours to judge
    cluster::member mem;
    mem.id = read_node(m.getNode());
    mem.role = *role;
    mem.address = m.getAddress().cStr();
    mem.state = parse_state(m.getState().cStr());
    mem.pid = static_cast<int>(m.getPid());
    mem.ring_address = m.getRingAddress().cStr();
    members.push_back(std::move(mem));
  }
  return members;
}

membership_msg read_membership(schema::Membership::Reader r) {
  membership_msg out;
  out.reason = r.getReason().cStr();
  out.ring_epoch = r.getRingEpoch();
  out.master_incarnation = r.getMasterIncarnation();
  out.epoch = r.getEpoch();
  out.base_epoch = r.getBaseEpoch();
  if (out.delta()) {
    out.changed = read_members(r.getMembers());
    for (auto g : r.getGone()) out.gone.push_back(read_node(g));
    return out;
  }
  auto v = cluster::membership_view::restore(r.getEpoch(), {0, 1024}, read_members(r.getMembers()));
  if (v) out.view = std::move(*v);
  return out;
}

outbound membership_delta(const cluster::membership_view& from, const cluster::membership_view& to,
                          const std::string& reason, std::uint64_t ring_epoch,
                          std::uint64_t master_incarnation) {
  return membership_delta(cluster::diff(from, to), from.epoch(), to, reason, ring_epoch, master_incarnation);
}

outbound membership_delta(cluster::view_diff d, std::uint64_t base_epoch, const cluster::membership_view& to,
                          const std::string& reason, std::uint64_t ring_epoch,
                          std::uint64_t master_incarnation) {
  std::vector<cluster::member> changed = std::move(d.joined);
  for (auto& c : d.changed) changed.push_back(std::move(c.second));
  outbound o;
  auto b = init_membership(o, to.epoch(), changed, reason, ring_epoch, master_incarnation);
  b.setBaseEpoch(base_epoch);
  auto gone = b.initGone(static_cast<unsigned>(d.left.size()));
  for (unsigned i = 0; i < d.left.size(); ++i) write_node(gone[i], d.left[i].id);
  return o;
}

expected<cluster::membership_view> expand_delta(const cluster::membership_view& base,
                                                const membership_msg& d) {
  if (!d.delta() || base.epoch() != d.base_epoch)
    return make_unexpected(core_errc::invalid_argument, "membership delta " + std::to_string(d.base_epoch) +
                                                            " -> " + std::to_string(d.epoch) +
                                                            " does not apply to the view of epoch " +
                                                            std::to_string(base.epoch()));
  return base.with_changes(d.epoch, d.gone, d.changed);
}

job_out job() {
  outbound o;
  auto b = o.body().initJob();
  return {std::move(o), b};
}

job_out job_reply(const message& request) {
  outbound o = reply_to(request);
  auto b = o.body().initJob();
  return {std::move(o), b};
}

outbound node_exited(const node_id& node, const std::string& status) {
  auto o = job();
  auto n = o.body.initNodeExited();
  write_node(n.initNode(), node);
  n.setStatus(status);
  return std::move(o.out);
}

outbound disk_fault(const std::string& source, const std::string& fault) {
  auto o = job();
  auto d = o.body.initDiskFault();
  d.setFault(fault);
  d.setSource(source);
  return std::move(o.out);
}

}  // namespace troupe::wire
