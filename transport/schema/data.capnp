# Data plane: task leases between the dispenser and workers, and record batches.
@0xd44a52d9a0e9ca19;

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("troupe::schema");

# A contiguous range of records of a dataset for one pass.
struct Task {
  id @0 :UInt64;
  dataset @1 :Text;
  firstRecord @2 :UInt64;
  recordCount @3 :UInt64;
  epoch @4 :UInt32;        # data epoch (pass over the dataset), not the membership epoch
  attempt @5 :UInt32;      # lease token: reports must quote it (stale leases are refused)
}

struct TaskRequest {
  worker @0 :Text;         # actor name of the requester
  holding @1 :List(UInt64); # tasks the requester holds and keeps (the one it trains, one leased
                            # ahead, finished ones whose report is not acknowledged yet); any other
                            # lease of it was lost on its side and goes back to TODO
}

# A task handed to a worker until deadlineMs (wall clock, Unix ms); none = no task right now.
struct TaskLease {
  union {
    task @0 :Task;
    none @1 :Void;
    finished @2 :Void;     # the dataset is exhausted: the worker may stop asking
  }
  deadlineMs @3 :Int64;
}

struct TaskReport {
  taskId @0 :UInt64;
  union {
    done @1 :Void;
    failed @2 :Text;       # why; the dispenser re-queues or quarantines the task
  }
  recordsProcessed @3 :UInt64;
  attempt @4 :UInt32;      # the lease's attempt (Task.attempt)
}

# The dispenser took a report (applied, or refused as stale: either way the worker forgets it).
struct TaskReportAck {
  error @0 :Text;          # why it was refused; empty when applied
}

# Records as opaque bytes: offsets[i]..offsets[i+1] delimits record i in data.
struct RecordBatch {
  taskId @0 :UInt64;
  firstRecord @1 :UInt64;
  offsets @2 :List(UInt32);
  data @3 :Data;
}
