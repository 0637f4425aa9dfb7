#include "troupe/cluster/membership.hpp"

#include <algorithm>
#include <charconv>

#include "troupe/cluster/errc.hpp"

namespace troupe::cluster {

#if defined(__GLIBCXX__) && defined(__x86_64__)
static_assert(sizeof(member) <= 112);  // a master's view holds one per member: keep the small fields together
#endif

std::string_view to_string(node_role r) noexcept {
  switch (r) {
    case node_role::master:
      return "master";
    case node_role::dispenser:
      return "dispenser";
    case node_role::ps:
      return "ps";
    case node_role::worker:
      return "worker";
  }
  return "unknown";
}

expected<node_role> parse_role(std::string_view text) {
  for (auto r : {node_role::master, node_role::dispenser, node_role::ps, node_role::worker})
    if (text == to_string(r)) return r;
  return make_unexpected(cluster_errc::invalid_spec,
                         "role '" + std::string(text) + "': expected master, dispenser, ps or worker");
}

std::string node_name(node_role r, std::size_t index) {
  if (r == node_role::master || r == node_role::dispenser) return std::string(to_string(r));
  return std::string(to_string(r)) + "-" + std::to_string(index);
}

std::string_view to_string(member_state s) noexcept {
  switch (s) {
    case member_state::launching:
      return "launching";
    case member_state::alive:
      return "alive";
    case member_state::leaving:
      return "leaving";
  }
  return "unknown";
}

expected<void> validate_address(std::string_view address) {
  auto colon = address.rfind(':');
  auto bad = [&](const char* why) {
    return make_unexpected(cluster_errc::invalid_spec, "address '" + std::string(address) + "': " + why);
  };
  if (colon == std::string_view::npos || colon == 0) return bad("expected host:port");
  auto port_text = address.substr(colon + 1);
  unsigned port = 0;
  auto [ptr, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (port_text.empty() || ec != std::errc() || ptr != port_text.data() + port_text.size() || port == 0 ||
      port > 65535)
    return bad("the port must be a number in 1..65535");
  return {};
}

bool natural_less(std::string_view a, std::string_view b) noexcept {
  auto digit = [](char c) { return c >= '0' && c <= '9'; };
  std::size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    if (digit(a[i]) && digit(b[j])) {
      std::size_t ie = i, je = j;
      while (ie < a.size() && digit(a[ie])) ++ie;
      while (je < b.size() && digit(b[je])) ++je;
      // Compare the numbers without leading zeros by length first, then digit by digit.
      std::size_t is = i, js = j;
      while (is + 1 < ie && a[is] == '0') ++is;
      while (js + 1 < je && b[js] == '0') ++js;
      if (ie - is != je - js) return ie - is < je - js;
      auto na = a.substr(is, ie - is), nb = b.substr(js, je - js);
      if (na != nb) return na < nb;
      if (ie - i != je - j) return ie - i < je - j;  // "01" after "1": a total order
      i = ie;
      j = je;
    } else {
      if (a[i] != b[j]) return static_cast<unsigned char>(a[i]) < static_cast<unsigned char>(b[j]);
      ++i;
      ++j;
    }
  }
  return a.size() - i < b.size() - j;
}

std::optional<std::size_t> ring::rank_of(std::string_view name) const noexcept {
  for (std::size_t i = 0; i < ranks.size(); ++i)
    if (ranks[i].name == name) return i;
  return std::nullopt;
}

bool same_ring(const ring& a, const ring& b) noexcept {
  return a.ranks == b.ranks;
}

view_diff diff(const membership_view& from, const membership_view& to) {
  view_diff d;
  for (const auto& m : from.members()) {
    const member* n = to.find(m.id.name);
    if (!n || n->id != m.id)
      d.left.push_back(m);
    else if (*n != m)
      d.changed.emplace_back(m, *n);
  }
  for (const auto& m : to.members()) {
    const member* o = from.find(m.id.name);
    if (!o || o->id != m.id) d.joined.push_back(m);
  }
  return d;
}

namespace {
expected<void> check_limits(worker_limits l) {
  if (l.max == 0 || l.min > l.max)
    return make_unexpected(cluster_errc::invalid_spec, "worker limits " + std::to_string(l.min) + ".." +
                                                           std::to_string(l.max) +
                                                           ": need 0 <= min <= max and max >= 1");
  return {};
}

expected<void> check_name(const node_id& id) {
  if (!valid_node_name(id.name))
    return make_unexpected(
        cluster_errc::invalid_spec,
        "node name '" + id.name + "': 1-64 characters of a-z, 0-9, '_' or '-', starting with a letter");
  return {};
}
}  // namespace

expected<membership_view> membership_view::make(worker_limits limits) {
  if (auto ok = check_limits(limits); !ok) return ok.err();
  membership_view v;
  v.limits_ = limits;
  return v;
}

namespace {
expected<void> check_member(const member& m) {
  if (auto ok = check_name(m.id); !ok) return ok.err();
  if (m.state != member_state::launching)
    if (auto ok = validate_address(m.address); !ok)
      return std::move(ok).err().wrap("member " + m.id.to_string());
  return {};
}

bool by_name(const member& a, const member& b) noexcept {
  return natural_less(a.id.name, b.id.name);
}
}  // namespace

expected<membership_view> membership_view::restore(std::uint64_t epoch, worker_limits limits,
                                                   std::vector<member> members) {
  auto v = make(limits);
  if (!v) return v;
  for (const auto& m : members)
    if (auto ok = check_member(m); !ok) return ok.err();
  // Sorted once (a view of N members in O(N log N), not N sorted inserts and lookups).
  std::stable_sort(members.begin(), members.end(), by_name);
  for (std::size_t i = 1; i < members.size(); ++i)
    if (members[i].id.name == members[i - 1].id.name)
      return make_unexpected(cluster_errc::already_exists,
                             "member '" + members[i].id.name + "' appears twice");
  v->members_ = std::move(members);
  v->epoch_ = epoch;
  return v;
}

expected<membership_view> membership_view::with_changes(std::uint64_t epoch, const std::vector<node_id>& gone,
                                                        const std::vector<member>& changed) const {
  for (const auto& m : changed)
    if (auto ok = check_member(m); !ok) return ok.err();
  membership_view v = *this;
  v.mark_epoch_ = 0;  // a new view: these changes are not tracked
  v.at_mark_.clear();
  for (const auto& id : gone)
    if (auto* m = v.find_mutable(id.name); m && m->id == id) v.erase(m);
  for (const auto& m : changed) {
    if (auto* old = v.find_mutable(m.id.name)) {
      if (old->id.incarnation > m.id.incarnation) {  // keep the higher one seen
        auto& d = v.departed_[m.id.name];
        d = std::max(d, old->id.incarnation);
      }
      *old = m;
    } else {
      v.insert_sorted(m);
    }
  }
  v.epoch_ = epoch;
  return v;
}

const member* membership_view::find(std::string_view name) const noexcept {
  auto it = std::lower_bound(members_.begin(), members_.end(), name,
                             [](const member& m, std::string_view n) { return natural_less(m.id.name, n); });
  return it != members_.end() && it->id.name == name ? &*it : nullptr;
}

member* membership_view::find_mutable(std::string_view name) noexcept {
  return const_cast<member*>(static_cast<const membership_view*>(this)->find(name));
}

std::size_t membership_view::count(node_role role, member_state state) const noexcept {
  return static_cast<std::size_t>(std::count_if(
      members_.begin(), members_.end(), [&](const member& m) { return m.role == role && m.state == state; }));
}

std::size_t membership_view::worker_slots() const noexcept {
  return static_cast<std::size_t>(std::count_if(members_.begin(), members_.end(),
                                                [](const member& m) { return m.role == node_role::worker; }));
}

std::size_t membership_view::worker_deficit() const noexcept {
  std::size_t have =
      count(node_role::worker, member_state::alive) + count(node_role::worker, member_state::launching);
  return have >= limits_.min ? 0 : limits_.min - have;
}

std::uint64_t membership_view::restarts(std::string_view except) const noexcept {
  std::uint64_t n = 0;
  for (const auto& m : members_)
    if (m.id.name != except) n += *highest(m.id.name);
  for (const auto& [name, inc] : departed_)
    if (name != except && !find(name)) n += inc;
  return n;
}

std::optional<std::uint64_t> membership_view::highest(std::string_view name) const noexcept {
  std::optional<std::uint64_t> h;
  if (const auto* m = find(name)) h = m->id.incarnation;
  if (auto it = departed_.find(name); it != departed_.end()) h = std::max(h.value_or(0), it->second);
  return h;
}

std::uint64_t membership_view::next_incarnation(std::string_view name) const noexcept {
  auto h = highest(name);
  return h ? *h + 1 : 0;
}

std::size_t membership_view::free_index(node_role role) const noexcept {
  std::size_t i = 0;
  while (find(node_name(role, i))) ++i;
  return i;
}

void membership_view::insert_sorted(member m) {
  // The new member's incarnation is now the highest of its name, unless a higher one left before.
  if (auto it = departed_.find(m.id.name); it != departed_.end() && it->second <= m.id.incarnation)
    departed_.erase(it);
  auto pos = std::upper_bound(members_.begin(), members_.end(), m, by_name);
  members_.insert(pos, std::move(m));
}

void membership_view::erase(const member* m) {
  auto& d = departed_[m->id.name];
  d = std::max(d, m->id.incarnation);
  members_.erase(members_.begin() + (m - members_.data()));
}

expected<void> membership_view::check_new_incarnation(const node_id& id) const {
  if (auto h = highest(id.name); h && id.incarnation <= *h)
    return make_unexpected(cluster_errc::stale_incarnation,
                           id.to_string() + ": incarnation " + std::to_string(*h) + " was already seen");
  return {};
}

void membership_view::note(std::string_view name) {
  if (mark_epoch_ == 0 || at_mark_.find(name) != at_mark_.end()) return;
  const member* m = find(name);
  at_mark_.emplace(std::string(name), m ? std::optional<member>(*m) : std::nullopt);
}

void membership_view::mark() {
  mark_epoch_ = epoch_;
  at_mark_.clear();
}

const member* membership_view::at_mark(const member& now) const noexcept {
  if (auto it = at_mark_.find(now.id.name); it != at_mark_.end()) return it->second ? &*it->second : nullptr;
  return &now;
}

view_diff membership_view::diff_since_mark() const {
  view_diff d;
  for (const auto& [name, was] : at_mark_) {  // the members no mutator touched are the same
    const member* now = find(name);
    if (was && (!now || now->id != was->id))
      d.left.push_back(*was);
    else if (was && *now != *was)
      d.changed.emplace_back(*was, *now);
    if (now && (!was || was->id != now->id)) d.joined.push_back(*now);
  }
  return d;
}

bool membership_view::ring_changed_since_mark() const noexcept {
  auto in_ring = [](const member* m) {
    return m && m->role == node_role::worker && m->state == member_state::alive;
  };
  for (const auto& [name, was] : at_mark_) {  // the ring is the alive workers in name order
    const member* then = was ? &*was : nullptr;
    const member* now = find(name);
    if (in_ring(then) != in_ring(now) || (in_ring(then) && then->id != now->id)) return true;
  }
  return false;
}

}  // namespace troupe::cluster
