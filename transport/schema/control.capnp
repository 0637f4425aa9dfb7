# Control plane: how nodes join a job, learn the membership and are asked to start roles.
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
  cpus @3 :UInt32;
  gpus @4 :UInt32;
  memoryBytes @5 :UInt64;
  pid @6 :UInt32;          # the node's process id (same-machine rings watch their neighbours)
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
  rank @3 :UInt32;         # position in this epoch (ring order for collectives)
  pid @4 :UInt32;
  state @5 :Text;          # "launching", "alive", "leaving"
}

# The master's view of the job. Epochs grow strictly; a receiver ignores an epoch <= the one it has.
struct Membership {
  epoch @0 :UInt64;
  members @1 :List(Member);
  reason @2 :Text;         # why the epoch changed ("worker-3 down", "worker-9 joined")
  ringEpoch @3 :UInt64;    # the epoch at which the ring of alive workers last changed
  masterIncarnation @4 :UInt64;
}

# The master (through a launcher) asks a node to start a role actor under its supervisor.
struct Spawn {
  role @0 :Text;
  index @1 :UInt32;
  name @2 :Text;           # stable actor name, e.g. "worker/7"
  config @3 :Text;         # the job's TOML, or the role's section of it
}
