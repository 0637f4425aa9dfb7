// Building and reading the job's Cap'n Proto messages (transport/schema/*.capnp). Readers throw
// kj::Exception on a malformed field: callers read inside `guarded` (node_runtime does for
// bridged handlers) so a bad peer message is logged and dropped, never fatal.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "troupe/cluster/membership.hpp"
#include "troupe/core/ids.hpp"
#include "troupe/transport/message.hpp"
#include "troupe/transport/schema/job.capnp.h"

namespace troupe::wire {

node_id read_node(schema::NodeRef::Reader r);
void write_node(schema::NodeRef::Builder b, const node_id& id);

outbound join(const node_id& self, cluster::node_role role, const std::string& address, int pid,
              const std::string& ring_address = {});
// Members as the wire lists them.
void write_members(capnp::List<schema::Member>::Builder list, const std::vector<cluster::member>& members);
std::vector<cluster::member> read_members(capnp::List<schema::Member>::Reader list);

outbound membership(const cluster::membership_view& v, const std::string& reason, std::uint64_t ring_epoch,
                    std::uint64_t master_incarnation);
// The change from view `from` to the later view `to`, for members that hold `from` (a member's
// death is one NodeRef, not the N members of the whole view). `from.epoch()` must be > 0.
outbound membership_delta(const cluster::membership_view& from, const cluster::membership_view& to,
                          const std::string& reason, std::uint64_t ring_epoch,
                          std::uint64_t master_incarnation);
// The same from the diff of the view of epoch `base_epoch` to `to` (the master's record of the
// changes since its last broadcast, membership_view::diff_since_mark()).
outbound membership_delta(cluster::view_diff d, std::uint64_t base_epoch, const cluster::membership_view& to,
                          const std::string& reason, std::uint64_t ring_epoch,
                          std::uint64_t master_incarnation);
struct membership_msg {
  cluster::membership_view view;  // a whole view; for a delta, empty until expanded (expand_delta)
  std::string reason;
  std::uint64_t ring_epoch = 0;
  std::uint64_t master_incarnation = 0;
  std::uint64_t epoch = 0;               // the view's epoch (a delta's too)
  std::uint64_t base_epoch = 0;          // 0: whole; else a delta from the view of this epoch:
  std::vector<node_id> gone;             //   these members removed,
  std::vector<cluster::member> changed;  //   these added or replacing the member of their name
  bool delta() const noexcept { return base_epoch != 0; }
};
membership_msg read_membership(schema::Membership::Reader r);
// The view a delta describes, from the view of its base epoch. Errors: invalid_argument when
// `base` is not at the delta's base epoch; a bad member (as restore()).
expected<cluster::membership_view> expand_delta(const cluster::membership_view& base,
                                                const membership_msg& d);

// A JobMessage envelope; fill the returned builder's union.
struct job_out {
  outbound out;
  schema::JobMessage::Builder body;
};
job_out job();
// The JobMessage answering `request` (reply_to: it carries the request's correlation id).
job_out job_reply(const message& request);

// NodeExited: `node` (that incarnation) is gone or going, and why. Sent to the master by the
// runner (a process exited), by a ring neighbour (its beacon released) and by the node itself
// when it leaves on SIGTERM.
outbound node_exited(const node_id& node, const std::string& status);
// DiskFault: a disk fault of the sender's `source` files ("checkpoint", "log", "final state"; empty: over).
outbound disk_fault(const std::string& source, const std::string& fault);

// Runs `fn` (which reads a Cap'n Proto message) and turns a kj exception into a logged warning;
// false when it threw.
bool guarded(const char* what, const std::function<void()>& fn);

// Cap'n Proto list readers have no standard iterators: element-wise copies.
template <class T, class List>
void to_vector(List list, std::vector<T>& out) {
  out.resize(list.size());
  for (unsigned i = 0; i < list.size(); ++i) out[i] = list[i];
}
template <class T, class List>
void copy_to(List list, T* out) {
  for (unsigned i = 0; i < list.size(); ++i) out[i] = list[i];
}

}  // namespace troupe::wire
