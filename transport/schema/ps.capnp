# Parameter server: pulls and pushes of dense tensors and sparse (embedding) rows.
@0xfc5528701136aa61;

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("troupe::schema");

# Dense parameters or gradients of one named tensor, float32, row-major.
struct DenseTensor {
  name @0 :Text;
  values @1 :List(Float32);  # as many as the tensor of that name has (both sides know its shape)
}

# Rows of an embedding table: ids[i] owns values[i*dim .. (i+1)*dim).
struct SparseRows {
  table @0 :Text;
  dim @1 :UInt32;
  ids @2 :List(UInt64);
  values @3 :List(Float32);
}

# Worker -> shard; the answer is a PsPullReply.
struct PsPull {
  dense @0 :List(Text);    # names of dense tensors wanted
  sparse @1 :List(SparseRef);
  struct SparseRef {
    table @0 :Text;
    ids @1 :List(UInt64);  # de-duplicated by the worker
  }
}

struct PsPullReply {
  dense @0 :List(DenseTensor);
  sparse @1 :List(SparseRows);
  error @2 :Text;          # empty on success
}

# Worker -> shard: gradients to apply; the answer is a PsPushReply.
struct PsPush {
  dense @0 :List(DenseTensor);
  sparse @1 :List(SparseRows);  # gradients of equal ids combined by the worker
}

struct PsPushReply {
  error @0 :Text;          # empty when every gradient was applied
}
