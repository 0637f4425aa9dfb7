# `troupe serve`: the front end and its model replicas, and `troupe serve reload`.
# Documented in docs/wire_format.md ("serve") and docs/serving.md.
@0xb2a837d93dde6852;

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("troupe::schema");

# Replica -> front end (actor "serve"), once its model is loaded and warmed up: it takes batches.
struct ReplicaReady {
  generation @0 :UInt32;   # the model generation it was launched for (grows with each swap)
  version @1 :Text;        # the model's version (model.json: "<job id>@<created_unix_ms>")
  pid @2 :UInt32;
  placement @3 :Text;      # where libtorch runs it: "cpu", "cuda:0"
  loadMs @4 :Float64;      # torch::jit::load and the checks
  warmupMs @5 :Float64;    # the warm-up forwards
}

# Replica -> front end: its model could not be loaded; it exits next.
struct ReplicaFailed {
  generation @0 :UInt32;
  error @1 :Text;          # the file and the problem
}

# Front end -> replica (actor "replica"): one batch, the rows of whole requests back to back.
struct InferBatch {
  batchId @0 :UInt64;      # unique per front end; the result quotes it
  rows @1 :UInt32;
  dense @2 :Data;          # float32 [rows, dense_dim], row-major, little-endian
  ids @3 :Data;            # int64 [rows, fields] (empty for a dense-only model)
  retried @4 :Bool;        # its rows were sent before, to a replica lost with them: computed off the
                           # io thread (a forward there that outlasted the heartbeats had every
                           # replica it was sent to fenced in turn)
}

# Replica -> front end: the answer to one InferBatch.
struct InferResult {
  batchId @0 :UInt64;
  rows @1 :UInt32;
  width @2 :UInt32;        # logits per row
  logits @3 :Data;         # float32 [rows, width]; empty on error
  error @4 :Text;          # empty on success: forward's error (the batch is not retried)
  version @5 :Text;        # the model version that computed it
  forwardUs @6 :UInt32;    # time in forward (microseconds)
}

# `troupe serve reload` -> front end: move to the model in `modelDir` ("": the directory it was
# started with, read again). The answer is ReloadReply, once the swap is done or refused.
struct Reload {
  modelDir @0 :Text;
}

struct ReloadReply {
  ok @0 :Bool;
  error @1 :Text;          # why the model was refused (the old one keeps serving)
  version @2 :Text;        # the version serving now
  generation @3 :UInt32;
}

struct ServeMessage {
  union {
    replicaReady @0 :ReplicaReady;
    replicaFailed @1 :ReplicaFailed;
    inferBatch @2 :InferBatch;
    inferResult @3 :InferResult;
    reload @4 :Reload;
    reloadReply @5 :ReloadReply;
  }
}
