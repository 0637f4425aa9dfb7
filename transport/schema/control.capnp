# Control plane: how nodes join a job and learn the membership.
# Documented in docs/wire_format.md.
@0xd29a72b1688300d6;

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("troupe::schema");

struct NodeRef {
  name @0 :Text;           # node name, [a-z0-9_-]{1,64}
  incarnation @1 :UInt64;  # grows each time the node is (re)started
}

# A node asks the master to be admitted (sent to name "master").
struct Join {
  node @0 :NodeRef;
  address @1 :Text;        # "host:port" where the node's endpoint listens
  role @2 :Text;           # "worker", "ps", "dispenser", ...
  pid @3 :UInt32;          # the node's process id (same-machine rings watch their neighbours)
  ringAddress @4 :Text;    # a worker's ring listener "host:port" (TCP ring links across hosts); "" none
}

# Liveness probe. The transport sends one per connection every heartbeat interval; any frame
# received counts as a sign of life.
struct Heartbeat {
  seq @0 :UInt64;
  sentNs @1 :Int64;        # sender's monotonic clock; only meaningful to the sender
}

struct Member {
  node @0 :NodeRef;
  address @1 :Text;
  role @2 :Text;
  pid @3 :UInt32;
  state @4 :Text;          # "launching", "alive", "leaving"
  ringAddress @5 :Text;    # as in Join
}

# The master's view of the job. Epochs grow strictly; a receiver ignores an epoch <= the one it has.
# A whole view (baseEpoch 0) lists every member. A delta (baseEpoch > 0) goes to a member that was
# sent the view of baseEpoch: that view without `gone`, with `members` added or replacing the
# member of the same name, is the view of `epoch`. A receiver that does not hold the view of
# baseEpoch ignores the delta and joins again: the master answers a join of a member with its whole
# view.
struct Membership {
  epoch @0 :UInt64;
  members @1 :List(Member);
  reason @2 :Text;         # why the epoch changed ("worker-3 down", "worker-9 joined")
  ringEpoch @3 :UInt64;    # the epoch at which the ring of alive workers last changed
  masterIncarnation @4 :UInt64;
  baseEpoch @5 :UInt64;    # 0: a whole view; else a delta from the view of this epoch
  gone @6 :List(NodeRef);  # a delta's members removed (this incarnation)
}
