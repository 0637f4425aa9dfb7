# Collectives: chunks of a ring allreduce (or other collective) tagged so that a chunk of an old
# membership epoch or another operation is recognised and dropped.
@0xd05959f3a4c2fe89;

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("troupe::schema");

struct CollectiveChunk {
  epoch @0 :UInt64;        # membership epoch the ring was built for
  opId @1 :UInt64;         # operation id, increasing per epoch
  chunkIndex @2 :UInt32;   # which chunk of the buffer
  step @3 :UInt32;         # ring step (reduce-scatter steps, then allgather steps)
  fromRank @4 :UInt32;
  values @5 :List(Float32);
}

# A rank aborts an operation (membership changed, peer down): every rank fails it fast.
struct CollectiveAbort {
  epoch @0 :UInt64;
  opId @1 :UInt64;
  reason @2 :Text;
}
