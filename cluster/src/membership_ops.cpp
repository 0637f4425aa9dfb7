// The mutators of membership_view: each validates first and bumps the epoch only on success.
#include <algorithm>

#include "troupe/cluster/errc.hpp"
#include "troupe/cluster/membership.hpp"

namespace troupe::cluster {

namespace {
unexpected limit_error(const node_id& id, const char* why, worker_limits l) {
  return make_unexpected(cluster_errc::membership_limit, id.to_string() + ": " + why + " (workers " +
                                                             std::to_string(l.min) + ".." +
                                                             std::to_string(l.max) + ")");
}
}  // namespace

expected<void> membership_view::add_launching(const node_id& id, node_role role) {
  if (!valid_node_name(id.name))
    return make_unexpected(cluster_errc::invalid_spec, "node name '" + id.name + "' is not valid");
  if (find(id.name))
    return make_unexpected(cluster_errc::already_exists, id.to_string() + ": the name is already a member");
  if (auto ok = check_new_incarnation(id); !ok) return ok;
  if (role == node_role::worker && worker_slots() >= limits_.max)
    return limit_error(id, no_worker_slot, limits_);
  note(id.name);
  insert_sorted(member{
      .id = id, .role = role, .state = member_state::launching, .pid = 0, .address = "", .ring_address = ""});
  ++epoch_;
  return {};
}

expected<void> membership_view::join(member m) {
  if (!valid_node_name(m.id.name))
    return make_unexpected(cluster_errc::invalid_spec, "node name '" + m.id.name + "' is not valid");
  if (auto ok = validate_address(m.address); !ok) return std::move(ok).err().wrap(m.id.to_string());
  m.state = member_state::alive;
  member* old = find_mutable(m.id.name);
  if (!old) {
    if (auto ok = check_new_incarnation(m.id); !ok) return ok;
    if (m.role == node_role::worker && worker_slots() >= limits_.max)
      return limit_error(m.id, no_worker_slot, limits_);
    note(m.id.name);
    insert_sorted(std::move(m));
    ++epoch_;
    return {};
  }
  if (old->role != m.role)
    return make_unexpected(cluster_errc::invalid_spec,
                           m.id.to_string() + ": joins as " + std::string(cluster::to_string(m.role)) +
                               " but is a " + std::string(cluster::to_string(old->role)));
  if (m.id.incarnation < old->id.incarnation)
    return make_unexpected(cluster_errc::stale_incarnation,
                           m.id.to_string() + ": the member is already " + old->id.to_string());
  if (m.id.incarnation == old->id.incarnation && old->state != member_state::launching)
    return make_unexpected(cluster_errc::already_exists, m.id.to_string() + ": already joined");
  note(m.id.name);
  *old = std::move(m);
  ++epoch_;
  return {};
}

expected<void> membership_view::begin_leave(std::string_view name) {
  member* m = find_mutable(name);
  if (!m)
    return make_unexpected(cluster_errc::no_such_node, "node '" + std::string(name) + "' is not a member");
  if (m->state != member_state::alive)
    return make_unexpected(cluster_errc::invalid_spec, m->id.to_string() + ": cannot leave while " +
                                                           std::string(cluster::to_string(m->state)));
  if (m->role == node_role::worker && count(node_role::worker, member_state::alive) <= limits_.min)
    return limit_error(m->id, "leaving would drop the alive workers below min", limits_);
  note(name);
  m->state = member_state::leaving;
  ++epoch_;
  return {};
}

expected<void> membership_view::remove(const node_id& id) {
  member* m = find_mutable(id.name);
  if (!m) return make_unexpected(cluster_errc::no_such_node, id.to_string() + ": not a member");
  if (m->id.incarnation != id.incarnation)
    return make_unexpected(cluster_errc::stale_incarnation,
                           id.to_string() + ": the member is " + m->id.to_string());
  note(id.name);
  erase(m);
  ++epoch_;
  return {};
}

expected<void> membership_view::set_limits(worker_limits limits) {
  if (limits.max == 0 || limits.min > limits.max)
    return make_unexpected(cluster_errc::invalid_spec, "worker limits " + std::to_string(limits.min) + ".." +
                                                           std::to_string(limits.max) +
                                                           ": need min <= max and max >= 1");
  limits_ = limits;
  ++epoch_;
  return {};
}

ring membership_view::worker_ring() const {
  ring r;
  r.epoch = epoch_;
  for (const auto& m : members_)  // members_ is in natural name order already
    if (m.role == node_role::worker && m.state == member_state::alive) r.ranks.push_back(m.id);
  return r;
}

std::vector<node_id> membership_view::surplus_workers(std::size_t target) const {
  auto r = worker_ring();
  if (r.ranks.size() <= target) return {};
  return {r.ranks.begin() + static_cast<std::ptrdiff_t>(target), r.ranks.end()};
}

std::string membership_view::to_string() const {
  std::string s = "epoch " + std::to_string(epoch_) + ", workers " + std::to_string(limits_.min) + ".." +
                  std::to_string(limits_.max) + ":";
  for (std::size_t i = 0; i < members_.size(); ++i) {
    const auto& m = members_[i];
    s += (i ? ", " : " ") + m.id.to_string() + " " + std::string(cluster::to_string(m.state));
    if (!m.address.empty()) s += " " + m.address;
  }
  return s;
}

}  // namespace troupe::cluster
