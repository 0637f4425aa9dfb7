# The elastic job's own messages: progress, status, evaluation, scaling and stopping.
# Documented in docs/wire_format.md ("job").
@0xe3b1c5a27d9f4e61;

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("troupe::schema");

using Control = import "control.capnp";

# Worker -> master, every progress interval: what it trained since the last report.
struct WorkerProgress {
  samples @0 :UInt64;
  steps @1 :UInt64;
  lossSum @2 :Float64;     # sum of minibatch losses over `steps`
  droppedSteps @3 :UInt64; # steps lost to a collective interrupted by a membership change
  firstStepWallMs @4 :UInt64; # Unix ms of this worker's first trained minibatch, sent until acknowledged
                              # by a successful send; 0: none (yet, or already reported)
  goodput @5 :GoodputReport;  # what its strategy measured (docs/goodput.md); null: nothing
  task @6 :TaskRows;          # the task it trains and its rows that outlive it; null: none (or not known)
  replicaStep @7 :UInt64;     # its replica's optimizer steps (Strategy::checkpointed_step); 0: not known
}

# The rows of a leased task a worker trained whose steps outlive it, should it die now (SIGKILL):
# the first `trained` of the task's order. The master keeps the latest few; if the worker dies, its
# task goes back to TODO with the last of them that another worker's replica holds (`step` at most
# its `replicaStep`), or, with `onShards`, with the last (the PS shards acknowledged their pushes).
struct TaskRows {
  taskId @0 :UInt64;
  attempt @1 :UInt32;      # the lease's attempt (Task.attempt)
  trained @2 :UInt64;      # rows of the task's order, fewer than all
  step @3 :UInt64;         # the replica step that applied them (TaskReport.step); 0 with onShards
  onShards @4 :Bool;       # async_ps: the shards acknowledged every push of those rows
}

# Pollux's throughput model of a synchronous job (docs/goodput.md): seconds of one replica's compute
# (alpha + beta x micro-batch) and of the allreduce (alpha + beta x (replicas - 2), across hosts or
# on one), combined with the overlap exponent gamma.
struct ThroughputModel {
  alphaC @0 :Float64;
  betaC @1 :Float64;
  alphaN @2 :Float64;
  betaN @3 :Float64;
  alphaR @4 :Float64;
  betaR @5 :Float64;
  gamma @6 :Float64;
}

# A worker's gradient noise scale, learning-rate scaling, batch and goodput (docs/goodput.md). The
# master keeps the latest of the ring's rank 0 (JobStatus.goodput).
struct GoodputReport {
  ringRank @0 :UInt32;          # the reporter's rank in its ring (async_ps: 0)
  replicas @1 :UInt32;          # ring size
  hosts @2 :UInt32;             # hosts the ring spans
  baseBatch @3 :UInt32;         # M0: the job file's workers x batch_size
  gradSqr @4 :Float64;          # moving average of |G|^2 (Adam: of the preconditioned gradient)
  gradVar @5 :Float64;          # moving average of tr(Sigma) / M0: the variance of an M0 batch's gradient
  noiseScale @6 :Float64;       # tr(Sigma) / |G|^2 in samples; 0 before the first estimate
  rounds @7 :UInt64;            # estimates in the averages
  lrScaling @8 :Text;           # [train] lr_scaling
  lrFactor @9 :Float64;         # the learning rate's multiple at the last step
  gain @10 :Float64;            # AdaScale's gain r at the current scale
  progress @11 :Float64;        # scale-invariant steps so far
  batch @12 :UInt32;            # global batch: replicas x localBatch x (accumSteps + 1)
  localBatch @13 :UInt32;       # one replica's micro-batch
  accumSteps @14 :UInt32;       # micro-batches accumulated before the synchronising one
  computeSeconds @15 :Float64;  # mean seconds of one micro-batch's forward and backward
  stepSeconds @16 :Float64;     # mean seconds of a step
  throughput @17 :Float64;      # samples/s measured since the latest batch choice
  goodput @18 :Float64;         # throughput x statistical efficiency of the batch
  predictedGoodput @19 :Float64; # the fitted model's goodput of the current batch; 0: not fitted
  model @20 :ThroughputModel;   # the fitted model
  choice @21 :UInt32;           # batch choices so far ([train] batch = "auto")
  choiceFrom @22 :UInt32;       # the global batch before the latest choice
  choicePredicted @23 :Float64; # predicted goodput of the latest choice
  choiceBefore @24 :Float64;    # predicted goodput of the batch it replaced
  choiceMeasured @25 :Float64;  # measured goodput at the chosen batch; 0 until measured
  pushShards @26 :UInt32;       # async_ps: the PS shards whose estimates from the pushes they received
                                # are summed in gradSqr / gradVar; 0: the worker's own batches'
  choiceBatch @27 :UInt32;      # the global batch of the latest choice, at the ring it was made for
  choiceReplicas @28 :UInt32;   # the ring size the latest choice was made for (0: no choice yet)
  choiceProgress @29 :Float64;  # the scale-invariant step the latest choice was made at: with `choice`,
                                # what tells it from another choice of the same number (a job resumed
                                # from a checkpoint older than its last choice numbers its next one again)
}

# Worker -> master: its training loop is over (dataset exhausted); it still answers Evaluate.
struct WorkerDone {
  steps @0 :UInt64;        # steps this incarnation trained
}

# Master -> worker: evaluate the model on the test set; the answer is EvalResult (paired with the
# request by the envelope's correlationId, like every reply).
struct Evaluate {
  part @0 :UInt32;         # evaluate part `part` of `parts` of the test set (rows*part/parts ..)
  parts @1 :UInt32;        # 0: the whole test set, and write the final state (an older master)
  writeState @2 :Bool;     # also write the job's final state (checkpoints/final)
}

struct EvalResult {
  rows @0 :UInt64;
  loss @1 :Float64;
  accuracy @2 :Float64;
  auc @3 :Float64;         # NaN when the model is not binary (the final JSON then has no test_auc)
  error @4 :Text;          # empty on success
  scores @5 :List(Float32); # binary models: each row's probability (the master's AUC of all parts)
  labels @6 :List(Float32); # and its label
  diskFault @7 :Bool;      # the error is a disk fault writing the final state: the job's end pauses
                           # (asked again, not counted as a failure; DiskFault "final state" names it)
}

# Anyone -> master (status) or runner (status of the whole job); the answer is JobStatus.
struct StatusRequest {
}

# The dispenser's task counts (actors/src/status_codec.hpp: task_counts).
struct TaskCounts {
  todo @0 :UInt64;
  doing @1 :UInt64;
  done @2 :UInt64;
  failed @3 :UInt64;             # quarantined after repeated failures
  requeued @4 :UInt64;           # moved back to TODO so far (dead holder or expired lease)
  dataEpoch @5 :UInt32;          # pass over the dataset the dispenser is handing out
  dataEpochs @6 :UInt32;
}

# The answer to a StatusRequest (actors/src/status_codec.hpp: job_status, and its JSON).
struct JobStatus {
  jobId @0 :Text;
  epoch @1 :UInt64;              # membership epoch (JSON: membership_epoch; the data epoch is tasks.dataEpoch)
  masterIncarnation @2 :UInt64;
  workersAlive @3 :UInt32;
  workersTarget @4 :UInt32;      # set by the runner
  psAlive @5 :UInt32;
  tasks @6 :TaskCounts;
  samplesPerSec @7 :Float64;     # over the last progress window
  loss @8 :Float64;              # mean minibatch loss over the last progress window; NaN before the first
  samplesTotal @9 :UInt64;
  finished @10 :Bool;
  resultJson @11 :Text;          # final metrics once finished
  members @12 :List(Control.Member);
  restarts @13 :UInt64;          # node relaunches by the runner
  fault @14 :Text;               # a disk fault pausing the job ("no space left on device: <path> ..."); empty when none
  evaluating @15 :Text;          # who evaluates the trained model now ("worker-0"); empty when nobody does
  taskError @16 :Text;           # the last error of a quarantined task; empty when none was quarantined
  goodput @17 :GoodputReport;    # the latest report of the ring's rank 0 (docs/goodput.md); null: none
  workersLaunched @18 :UInt32;   # set by the runner: worker processes launched or queued (Slurm) and not ended
  notice @19 :Text;              # the master's latest word for the job's console, which the runner prints
                                 # once as it changes (a ring that lost every replica: what goes back to
                                 # TODO, and why); empty: none
}

# CLI -> runner: change the number of workers.
struct Scale {
  workers @0 :UInt32;
  host @1 :Text;           # the workers this change adds start on this host (a Slurm node, one of
                           # cluster.hosts); empty: where the launcher puts them
}

struct ScaleReply {
  workers @0 :UInt32;      # the target now
  error @1 :Text;          # a clamp to [min, max] (the scale happened), or why it was refused
  refused @2 :Bool;        # nothing changed (a host the launcher cannot place workers on)
}

# Runner -> master: a node process exited (faster than waiting for the connection to drop).
struct NodeExited {
  node @0 :Control.NodeRef;
  status @1 :Text;         # "exited with code 0", "killed by SIGKILL"
}

# Master -> runner: the job is over. CLI -> runner: stop the job.
struct JobFinished {
  resultJson @0 :Text;
  ok @1 :Bool;
}

struct Stop {
  reason @0 :Text;
}

# Runner -> CLI: the answer to Stop, once the runner has recorded it (it then stops the nodes and
# exits: the asker waits for that, or not).
struct StopReply {
}

# Chaos tool -> a node's "node" name: set its transport fault-injection knob for `durationMs`
# (then it is reset to no faults). A later Inject replaces an earlier one.
struct Inject {
  dropProbability @0 :Float64;
  delayUs @1 :UInt64;
  durationMs @2 :UInt64;
}

# GPU communicator rendezvous, per ring epoch (docs/gpu_workers.md). Worker -> master: every rank of
# the ring posts its device; rank 0 also posts the NCCL unique id it created for that epoch. The
# master keeps the posts of the current ring epoch only (older epochs are forgotten, and posts
# for them refused as stale).
struct GpuCommPost {
  ringEpoch @0 :UInt64;
  rank @1 :UInt32;
  ranks @2 :UInt32;        # ring size
  node @3 :Text;
  host @4 :Text;
  deviceUuid @5 :Text;     # empty: no device (a CPU worker)
  uniqueId @6 :Data;       # rank 0 only: ncclUniqueId, 128 opaque bytes; empty otherwise
}

# Worker -> master: what is known of `ringEpoch`; the answer is GpuCommInfo.
struct GpuCommFetch {
  ringEpoch @0 :UInt64;
}

struct GpuRank {
  rank @0 :UInt32;
  node @1 :Text;
  host @2 :Text;
  deviceUuid @3 :Text;
}

# Master -> worker: the answer to GpuCommPost (ranks and uniqueId empty) and GpuCommFetch.
struct GpuCommInfo {
  ringEpoch @0 :UInt64;
  ranks @1 :UInt32;        # ring size the posts announced; 0 when nothing is known
  posted @2 :List(GpuRank);
  uniqueId @3 :Data;       # empty until rank 0 posted it
  error @4 :Text;          # empty on success ("stale ring epoch 3 (current 5)", bad post)
}

# Node -> master: a disk fault of this node's own files (a PS shard's checkpoints, a node's log:
# "no space left on device: <path> ..."), sent with each failed write; empty once a write succeeds
# again. While any lasts the master hands out no task, and the job's status names it.
struct DiskFault {
  fault @0 :Text;
  source @1 :Text;         # which files: "checkpoint", "log", "final state" (one fault per node and source)
}

# Master -> each PS shard once every task is over: write a checkpoint of every push applied so far,
# now. The job ends only once every shard answered without an error (the rows live only in the
# shards' memory until then). Asked again until answered.
struct FinalCheckpoint {
}

# PS shard -> master: the answer to FinalCheckpoint.
struct FinalCheckpointReply {
  version @0 :UInt64;      # the shard's checkpoint that holds every push it applied
  error @1 :Text;          # empty on success; else why not
  diskFault @2 :Bool;      # the error is a disk fault (the shard reported it as DiskFault "checkpoint")
}

# Worker -> master: the ring's replicas start again from the ring's latest checkpoint, which holds
# their first `step` steps (no replica of the new ring had trained: every one that had died with
# its worker). What later steps applied was lost with them: the master puts the DONE tasks of a
# later step (TaskReport.step) back to TODO and forgets the kept rows of a later step, as a resumed
# job does, before the ring trains. Sent by the ring's source as it restores; the answer is a
# RingRestoredReply, once the task journal holds it. Step 0: the ring has no checkpoint, and the
# replicas start from their initial weights (a job's first ring sends it too, and finds nothing).
struct RingRestored {
  step @0 :UInt64;
}

# Master -> worker: the answer to RingRestored.
struct RingRestoredReply {
  reopened @0 :UInt64;     # DONE tasks put back to TODO
  forgotten @1 :UInt64;    # tasks whose kept rows were forgotten (they train from their first row)
  error @2 :Text;          # empty on success; else why not (the tasks stay as they were)
}

struct JobMessage {
  union {
    workerProgress @0 :WorkerProgress;
    workerDone @1 :WorkerDone;
    evaluate @2 :Evaluate;
    evalResult @3 :EvalResult;
    statusRequest @4 :StatusRequest;
    jobStatus @5 :JobStatus;
    scale @6 :Scale;
    scaleReply @7 :ScaleReply;
    nodeExited @8 :NodeExited;
    jobFinished @9 :JobFinished;
    stop @10 :Stop;
    inject @11 :Inject;
    gpuCommPost @12 :GpuCommPost;
    gpuCommFetch @13 :GpuCommFetch;
    gpuCommInfo @14 :GpuCommInfo;
    diskFault @15 :DiskFault;
    stopReply @16 :StopReply;
    finalCheckpoint @17 :FinalCheckpoint;
    finalCheckpointReply @18 :FinalCheckpointReply;
    ringRestored @19 :RingRestored;
    ringRestoredReply @20 :RingRestoredReply;
  }
}
