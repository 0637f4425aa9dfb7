// The master actor's state, one member per concern, each with its contract in its own header:
// - members (master_members.hpp): the membership view, its broadcasts, suspects and re-queues;
// - progress (job_progress.hpp): samples, loss and samples/s as the workers report them;
// - goodput (wire/goodput_report.hpp): rank 0's latest gradient-noise/goodput report;
// - durable (master_durable.hpp): counters.json across master restarts, and the job's disk faults;
// - outcome (job_outcome.hpp): task counts, the end-of-job evaluation, the result;
// - gpu (gpu_rendezvous.hpp): the NCCL rendezvous per ring epoch;
// - obs (master_observer.hpp): the timeline and /metrics.
// master.cpp handles membership; master_status.cpp progress, status, evaluation and completion;
// master_durable.cpp the counters and faults; master_gpu.cpp the rendezvous.
#pragma once

#include <caf/stateful_actor.hpp>

#include <memory>

#include "gpu_rendezvous.hpp"
#include "job_outcome.hpp"
#include "job_progress.hpp"
#include "master_durable.hpp"
#include "master_members.hpp"
#include "node_context.hpp"
#include "surviving_rows.hpp"
#include "troupe/supervision/name_registry.hpp"
#include "troupe/transport/schema/job.capnp.h"
#include "troupe/wire/goodput_report.hpp"

namespace troupe::actors {

class master_observer;
// The master's own message: broadcast the view changes applied so far (master.cpp publish).
using publish_atom = caf::atom_constant<caf::atom("publish")>;
class pause_watch;

struct master_state {
  node_context* ctx = nullptr;
  // The node's actors by name: the master asks "dispenser" for counts and re-queues.
  supervision::name_registry* names = nullptr;
  troupe::clock::time_point started;  // this master's start, on ctx->clock()
  master_members members;
  job_progress progress;
  // The latest goodput report (docs/goodput.md) of the ring's rank 0 (async_ps: of any worker).
  wire::goodput_report goodput;
  master_durable durable;
  job_outcome outcome;
  surviving_rows rows;  // what each worker's task would keep should it die (WorkerProgress.task)
  gpu_rendezvous gpu;
  std::shared_ptr<master_observer> obs;
  std::string notice;  // the latest word for the job's console (JobStatus.notice); empty: none
  static inline const char* name = "master";
};
using master_actor = caf::stateful_actor<master_state>;

void on_tick(master_actor* self);
// The dispenser puts the leases of worker `id` back in TODO (once per id), its task keeping the rows
// that a surviving model holds (surviving_rows.hpp: decided now, or deferred until settle_requeues).
void requeue(master_actor* self, const node_id& id);
// The deferred re-queues that the survivors' reports settled, or whose wait is over (every tick).
void settle_requeues(master_actor* self);
// JobMessage ringRestored from a member: the ring starts again from its checkpoint; what later
// steps applied goes back to TODO (surviving_rows::restored, task_dispenser::ring_restored), then
// the answer.
void on_ring_restored(master_actor* self, const message& m);
// Loads <job dir>/counters.json into `st` (a restarted master continues the counts) and saves it
// with one more master start.
void restore_counters(master_state& st, const std::string& job_dir);
// Saves the counters when they changed (at most once a second, or at once with `now`); a disk
// fault is kept in st.durable.fault and passed to the dispenser, which pauses until it is over.
void persist_counters(master_actor* self, bool now);
// Tells the dispenser the job's disk fault when it changed: it hands out no task while one lasts.
void publish_fault(master_actor* self);
// The member that sent `m` when it is that member's current incarnation; nullptr for a node that is
// no member or a dead incarnation's word.
const cluster::member* sending_member(const master_state& st, const message& m);
// JobMessage diskFault from a member: kept (empty: over) and published.
void on_disk_fault(master_actor* self, const message& m);
// Answers a StatusRequest with the job's status (reply_to: it carries the request's correlation id).
void send_status(master_actor* self, const message& request);
// A PS shard's FinalCheckpointReply (final_checkpoints.hpp); the job ends once every shard's is in.
void on_final_checkpoint(master_actor* self, const message& m);
// An EvalResult from `from`; `correlation_id` (its envelope's) pairs it with its part of the round.
void on_eval_result(master_actor* self, schema::EvalResult::Reader r, const node_id& from,
                    std::uint64_t correlation_id);
// JobMessage gpuCommPost / gpuCommFetch: answers with a GpuCommInfo.
void on_gpu_comm(master_state& st, const message& m);

}  // namespace troupe::actors
