# The root of every frame. A frame is one Cap'n Proto message in the standard stream framing
# (segment table, then segments); its root is an Envelope. See docs/wire_format.md.
@0xa6fa878c88b0ff2f;

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("troupe::schema");

using Control = import "control.capnp";
using Dat = import "data.capnp";
using Ps = import "ps.capnp";
using Job = import "job.capnp";
using Serve = import "serve.capnp";

# Handshake, first frame each side sends.
struct Hello {
  protocol @0 :UInt32;     # wire protocol version, currently 1
  node @1 :Control.NodeRef;
  nonce @2 :Data;          # 32 random bytes
}

# Handshake, second frame: HMAC proving knowledge of the cluster token (see wire_format.md).
struct Auth {
  mac @0 :Data;            # 32 bytes
}

# Ask the receiving node to report when its actor `name` goes away.
struct Watch {
  watchId @0 :UInt64;      # chosen by the watcher, unique per connection
  name @1 :Text;
}

struct Unwatch {
  watchId @0 :UInt64;
}

# A watched name is gone (unregistered, or never registered).
struct Down {
  watchId @0 :UInt64;
  name @1 :Text;
  reason @2 :Text;
}

# Diagnostics: `troupe net ping` and the transport benchmark.
struct Ping {
  seq @0 :UInt64;
  sentNs @1 :Int64;
  payload @2 :Data;
  noReply @3 :Bool;        # bulk transfer: count it, do not answer
}

struct Envelope {
  to @0 :Text;             # destination actor name on the receiving node; "" = the transport
  from @1 :Text;           # sending actor name on the sending node; "" = the transport
  body :union {
    hello @2 :Hello;
    auth @3 :Auth;
    heartbeat @4 :Control.Heartbeat;
    watch @5 :Watch;
    unwatch @6 :Unwatch;
    down @7 :Down;
    ping @8 :Ping;
    pong @9 :Ping;
    join @10 :Control.Join;
    membership @11 :Control.Membership;
    taskRequest @12 :Dat.TaskRequest;
    taskLease @13 :Dat.TaskLease;
    taskReport @14 :Dat.TaskReport;
    taskReportAck @15 :Dat.TaskReportAck;
    taskRenew @16 :Dat.TaskRenew;
    psPull @17 :Ps.PsPull;
    psPullReply @18 :Ps.PsPullReply;
    psPush @19 :Ps.PsPush;
    psPushReply @20 :Ps.PsPushReply;
    job @21 :Job.JobMessage;
    opaque @22 :AnyPointer;  # application-defined payload for extensions
    recordRequest @24 :Dat.RecordRequest;
    recordReply @25 :Dat.RecordReply;
    serve @26 :Serve.ServeMessage;
  }
  correlationId @23 :UInt64;  # pairs a reply with its request: a requester sets a fresh non-zero id,
                              # the answer carries it back (reply_to); 0 = not part of an exchange
}
