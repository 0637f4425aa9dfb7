# Parameter server: pulls and pushes of dense tensors and sparse (embedding) rows.
@0xfc5528701136aa61;

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("troupe::schema");

# Dense parameters or gradients of one named tensor, float32, row-major.
struct DenseTensor {
  name @0 :Text;
  shape @1 :List(UInt32);
  values @2 :List(Float32);
}

# Rows of an embedding table: ids[i] owns values[i*dim .. (i+1)*dim).
struct SparseRows {
  table @0 :Text;
  dim @1 :UInt32;
  ids @2 :List(UInt64);
  values @3 :List(Float32);
}

struct PsPull {
  dense @0 :List(Text);    # names of dense tensors wanted
  sparse @1 :List(SparseRef);
  struct SparseRef {
    table @0 :Text;
    ids @1 :List(UInt64);  # de-duplicated by the worker
  }
}

struct PsPullReply {
  version @0 :UInt64;      # shard's model version when the reply was built
  dense @1 :List(DenseTensor);
  sparse @2 :List(SparseRows);
  error @3 :Text;          # empty on success
}

struct PsPush {
  baseVersion @0 :UInt64;  # version the gradients were computed against (staleness)
  dense @1 :List(DenseTensor);
  sparse @2 :List(SparseRows);  # gradients of equal ids combined by the worker
}

struct PsPushReply {
  version @0 :UInt64;
  error @1 :Text;
}
