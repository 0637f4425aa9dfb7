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
  rows @2 :UInt32;              # the batch's rows behind the gradients; 0: not said (no noise estimate)
}

struct PsPushReply {
  error @0 :Text;          # empty when every gradient was applied
  noise @1 :PushNoise;     # the shard's gradient noise estimate from the pushes; null: none yet
}

# A shard's estimate of its slice of the dense gradient (docs/goodput.md, "async_ps"): the
# bias-corrected moving averages before the floors, summed over the shards by the worker.
struct PushNoise {
  gradSqr @0 :Float64;        # |G_s|^2
  gradVar @1 :Float64;        # tr(Sigma_s) / M0 (M0: the job file's workers x batch_size)
  rounds @2 :UInt64;          # pairs of pushes estimated from
  preconditioned @3 :Bool;    # Adam: of the preconditioned gradient
}
