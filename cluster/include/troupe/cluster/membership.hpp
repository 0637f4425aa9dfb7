// Membership views with epochs: who is in the job, in which role, at which address.
//
// The master owns the one authoritative membership_view and publishes a copy after every change;
// every other node only reads copies. The epoch grows by exactly one on every successful mutation
// (launching, join, leave, death, limits), never on a failed one, so (master incarnation, epoch)
// names a view exactly and a node can drop any view older than the one it holds. Strategies build
// a new allreduce ring per epoch (worker_ring), and skip the rebuild when same_ring says nothing
// changed for them.
//
// A view also remembers the highest incarnation it has seen per node name, even after the node
// left or died, so a late join or message from a dead incarnation is refused (stale_incarnation)
// and a replacement can be given the next incarnation (next_incarnation).
//
// Pure data and logic: no I/O, no threads; not thread-safe (copy it to share).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "troupe/core/error.hpp"
#include "troupe/core/ids.hpp"

namespace troupe::cluster {

// The words of a worker's join refused for want of a slot (every one up to max_workers taken; nodes
// joined by hand take them too): a refused worker that reads them exits exit_no_worker_slot.
inline constexpr const char* no_worker_slot = "no worker slot left";

enum class node_role : std::uint8_t { master, dispenser, ps, worker };
std::string_view to_string(node_role r) noexcept;
// "master", "dispenser", "ps", "worker"; the error names the bad text and the choices.
expected<node_role> parse_role(std::string_view text);
// The conventional node name of a role: "master", "dispenser", "ps-<index>", "worker-<index>".
std::string node_name(node_role r, std::size_t index);

enum class member_state : std::uint8_t {
  launching,  // started by the master, not yet joined: holds a worker slot, has no address yet
  alive,      // joined; takes part in rings and task dispensing
  leaving,    // asked to leave (scale down): finishes or returns its task, then is removed
};
std::string_view to_string(member_state s) noexcept;

// The small fields together: a master's view holds one per member (112 bytes, not 120).
struct member {
  node_id id;
  node_role role = node_role::worker;
  member_state state = member_state::launching;
  int pid = 0;          // process id, for same-machine peers (0: unknown)
  std::string address;  // "host:port" of its transport endpoint; empty while launching
  // A worker's ring listener "host:port", dialled by its previous rank on another host; empty: none.
  std::string ring_address;
  bool operator==(const member&) const = default;
};

// "host:port" with a non-empty host and a port in 1..65535; the error names the text.
expected<void> validate_address(std::string_view address);

// Orders "worker-2" before "worker-10": runs of digits compare as numbers, the rest bytewise.
bool natural_less(std::string_view a, std::string_view b) noexcept;

// The allreduce ring of one epoch: the alive workers in natural name order. Every node computes
// the same ring from the same view, and survivors keep their relative order across epochs.
struct ring {
  std::uint64_t epoch = 0;
  std::vector<node_id> ranks;

  std::size_t size() const noexcept { return ranks.size(); }
  // The rank of the node with this name, or nullopt when it is not in the ring.
  std::optional<std::size_t> rank_of(std::string_view name) const noexcept;
  // Neighbours of `rank` (which must be < size()).
  std::size_t next(std::size_t rank) const noexcept { return (rank + 1) % ranks.size(); }
  std::size_t prev(std::size_t rank) const noexcept { return (rank + ranks.size() - 1) % ranks.size(); }
};

// True when both rings hold the same node ids in the same order (the epochs may differ).
bool same_ring(const ring& a, const ring& b) noexcept;

struct worker_limits {
  std::size_t min = 1;
  std::size_t max = 1;
};

class membership_view;

// What changed from one view to a later one. A node whose incarnation changed appears in `left`
// (the old incarnation) and in `joined` (the new one).
struct view_diff {
  std::vector<member> joined;                      // in `to` only
  std::vector<member> left;                        // in `from` only (left, died or replaced)
  std::vector<std::pair<member, member>> changed;  // same id, other state or address: (from, to)
  bool empty() const noexcept { return joined.empty() && left.empty() && changed.empty(); }
};
view_diff diff(const membership_view& from, const membership_view& to);

class membership_view {
 public:
  // An empty view at epoch 0 with limits {1, 1}.
  membership_view() = default;
  // Errors (invalid_spec) when min > max or max == 0.
  static expected<membership_view> make(worker_limits limits);
  // Rebuilds a persisted view (a restarted master): checks the limits, names, roles, addresses
  // and that no name appears twice.
  static expected<membership_view> restore(std::uint64_t epoch, worker_limits limits,
                                           std::vector<member> members);
  // This view at `epoch` without the members `gone` (each removed only while it is that
  // incarnation) and with `changed` added or replacing the member of the same name: what a
  // membership delta describes. Checks the changed members as restore() does.
  expected<membership_view> with_changes(std::uint64_t epoch, const std::vector<node_id>& gone,
                                         const std::vector<member>& changed) const;

  std::uint64_t epoch() const noexcept { return epoch_; }
  worker_limits limits() const noexcept { return limits_; }
  // Sorted in natural name order (find() is a binary search).
  const std::vector<member>& members() const noexcept { return members_; }
  const member* find(std::string_view name) const noexcept;
  std::size_t count(node_role role, member_state state) const noexcept;
  // Workers holding a slot against max: launching + alive + leaving.
  std::size_t worker_slots() const noexcept;
  // How many workers the master should launch to reach min (0 when enough are alive or launching).
  std::size_t worker_deficit() const noexcept;
  // The incarnation to give the next (re)start of `name`: one more than the highest ever seen, or 0.
  std::uint64_t next_incarnation(std::string_view name) const noexcept;
  // The sum over names of the highest incarnation seen (each restart of a node counts one), the
  // node named `except` left out.
  std::uint64_t restarts(std::string_view except = {}) const noexcept;
  // The lowest index i such that node_name(role, i) is not a member (for ps and worker).
  std::size_t free_index(node_role role) const noexcept;

  // Records a node the master just started. Errors: already_exists (name is a member),
  // stale_incarnation (not newer than one seen), membership_limit (a worker past max).
  expected<void> add_launching(const node_id& id, node_role role);
  // The node is up at `m.address` and becomes alive. If `m.id` is launching it is promoted; an
  // unknown name is admitted (a worker only below max); a newer incarnation of a member replaces
  // it. Errors: stale_incarnation, already_exists (the same incarnation already alive), invalid_spec
  // (bad name/address, or a role that differs from the launching entry), membership_limit.
  expected<void> join(member m);
  // alive -> leaving. Errors: no_such_node, membership_limit (a worker leave that would drop the
  // alive workers below min), invalid_spec (not alive).
  expected<void> begin_leave(std::string_view name);
  // Removes this incarnation (it left, died or failed to start). Always allowed: deaths ignore
  // min. Errors: no_such_node, stale_incarnation (a different incarnation is the member).
  expected<void> remove(const node_id& id);
  // New min/max (troupe scale). Errors: invalid_spec (min > max, max == 0).
  expected<void> set_limits(worker_limits limits);

  // Change tracking, the master's base for deltas. mark() makes this epoch the base: from then on
  // each mutator (add_launching, join, begin_leave, remove) keeps the member it changes as it was
  // at the mark, the first time it changes it. The base costs a copy of the changed members only.
  void mark();
  std::uint64_t mark_epoch() const noexcept { return mark_epoch_; }  // 0: never marked
  // The member `now` (one of members()) as its name's member was at the mark (nullptr: none
  // then); `now` itself when it has not changed since.
  const member* at_mark(const member& now) const noexcept;
  // diff(the view at the mark, this view), from the changed members alone.
  view_diff diff_since_mark() const;
  // Whether worker_ring() has other ranks than it had at the mark.
  bool ring_changed_since_mark() const noexcept;

  ring worker_ring() const;
  // Alive workers to ask to leave so that `target` alive workers remain: the last in ring order.
  std::vector<node_id> surplus_workers(std::size_t target) const;

  // "epoch 3, workers 2..4: master#0 alive 127.0.0.1:7000, worker-1#0 launching"
  std::string to_string() const;
  bool operator==(const membership_view& o) const noexcept {
    return epoch_ == o.epoch_ && members_ == o.members_ && limits_.min == o.limits_.min &&
           limits_.max == o.limits_.max;
  }

 private:
  member* find_mutable(std::string_view name) noexcept;
  void insert_sorted(member m);
  void erase(const member* m);
  // The highest incarnation seen of this name (nullopt: never seen).
  std::optional<std::uint64_t> highest(std::string_view name) const noexcept;
  expected<void> check_new_incarnation(const node_id& id) const;
  void note(std::string_view name);  // before a mutator changes the member of this name

  std::uint64_t epoch_ = 0;
  worker_limits limits_;
  std::vector<member> members_;
  // The highest incarnation seen of names that are no members now (they left or died). A member's
  // own incarnation is the highest of its name, so the view keeps no entry per member.
  std::map<std::string, std::uint64_t, std::less<>> departed_;
  std::uint64_t mark_epoch_ = 0;
  std::map<std::string, std::optional<member>, std::less<>> at_mark_;  // changed since the mark
};

}  // namespace troupe::cluster
