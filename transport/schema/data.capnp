# Data plane: task leases between the dispenser and workers.
@0xd44a52d9a0e9ca19;

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("troupe::schema");

# A contiguous range of records of the dataset for one pass.
struct Task {
  id @0 :UInt64;
  firstRecord @1 :UInt64;
  recordCount @2 :UInt64;
  attempt @3 :UInt32;      # lease token: reports and renewals must quote it (stale leases are refused)
  epoch @4 :UInt32;        # the data epoch the task belongs to (0-based)
  trained @5 :UInt64;      # rows a holder that left trained already (TaskReport.left): the task
                           # trains the order of orderAttempt from there
  orderAttempt @6 :UInt32; # the attempt whose row order the task trains in (its own unless trained > 0)
  trainedStep @7 :UInt64;  # with trained: the replica step that applied the last of those rows
                           # (TaskReport.step). A ring that starts again from a checkpoint of an
                           # earlier step (every replica lost) lost them: the worker trains the task
                           # from its first row. 0: not known (other strategies; a master before this)
}

# Worker -> dispenser: lease me a task. The answer is a TaskLease.
struct TaskRequest {
  holding @0 :List(UInt64); # tasks the requester holds and keeps (the one it trains, one leased
                            # ahead, finished ones whose report is not acknowledged yet); any other
                            # lease of it was lost on its side and goes back to TODO
}

# A task handed to a worker for leaseMs from when the dispenser granted it (the holder renews it
# with TaskRenew before then); none = no task right now.
struct TaskLease {
  union {
    task @0 :Task;
    none @1 :Void;
    finished @2 :Void;     # the dataset is exhausted: the worker may stop asking
  }
  leaseMs @3 :UInt64;      # the job's lease_timeout_ms
}

# Worker -> dispenser, no answer: the worker still works on these leases; each one still held by it
# gets leaseMs more from now (a lease of another holder or attempt is left alone). Sent every
# third of leaseMs while the worker holds anything, so a task that trains longer than the lease is
# not re-queued while its worker is alive.
struct TaskRenew {
  leases @0 :List(HeldLease);
}

struct HeldLease {
  taskId @0 :UInt64;
  attempt @1 :UInt32;      # the lease's attempt (Task.attempt)
}

# Worker -> dispenser: a leased task is over. The answer is a TaskReportAck.
struct TaskReport {
  taskId @0 :UInt64;
  union {
    done @1 :Void;
    failed @2 :Text;       # why; the dispenser re-queues or quarantines the task
    left @4 :UInt64;       # the holder leaves (SIGTERM) having trained this many rows of the task's
                           # order (Task.trained included), whose steps outlive it (the ring's
                           # replicas, the PS shards): back to TODO with them kept
  }
  attempt @3 :UInt32;      # the lease's attempt (Task.attempt)
  failedAfter @5 :UInt64;  # with failed: the rows of the task's order trained before the step that
                           # failed (Task.trained included), whose steps outlive the failure (the
                           # ring's replicas, the PS shards): kept as left's are, so the retry
                           # starts at the failing step; 0: none kept (a master before this field
                           # reads 0 too, and trains the task again whole)
  step @6 :UInt64;         # with done, and with the rows kept by left or failedAfter: the replica
                           # step that applied the last of them, under a strategy whose ring
                           # checkpoints hold every step up to theirs (allreduce); a job resumed from
                           # a checkpoint of an earlier step trains them again. 0: not known (other
                           # strategies; a worker before this field)
  givenBack @7 :Text;      # with left: why a holder that goes on training gives the task back
                           # (local_sgd: the rows it trained were lost when the ring's resync
                           # overwrote its replica before they were averaged); empty: it leaves
}

# The dispenser took a report (applied, or refused as stale: either way the worker forgets it).
struct TaskReportAck {
  error @0 :Text;          # why it was refused; empty when applied
}

# Record serving (issue 19): a worker on a host without the record store asks the master node's
# record server ("records") for the encoded records of its task. The answer is a RecordReply.
struct RecordRequest {
  test @0 :Bool;           # false: the training store, true: the test store
  firstRecord @1 :UInt64;
  recordCount @2 :UInt64;  # 0: only the manifest
}

# Records [firstRecord, firstRecord + recordCount) as the store holds them (each
# storage::encoded_size bytes, checksum first: the receiver verifies each one): back to back in
# `records`, or one element each in `recordList` (then each element is the record in the server's
# LMDB map, sent without a copy: a segment of the frame of its own). recordCount may be less than
# asked: the server bounds a reply's size, the requester asks again for the rest.
struct RecordReply {
  manifest @0 :Text;       # the store's manifest (TOML, docs/storage_format.md), in every reply
  firstRecord @1 :UInt64;
  recordCount @2 :UInt64;
  union {
    records @3 :Data;
    error @4 :Text;        # a range outside the store, an unknown split, a store that fails
    recordList @5 :List(Data);
  }
}
