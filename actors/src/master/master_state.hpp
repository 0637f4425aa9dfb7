// The master actor's state, shared by master.cpp (membership) and master_status.cpp (progress,
// status, evaluation, completion).
#pragma once

#include <caf/stateful_actor.hpp>

#include <chrono>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "eval_round.hpp"
#include "gpu_rendezvous.hpp"
#include "job_counters.hpp"
#include "node_context.hpp"
#include "troupe/cluster/membership.hpp"
#include "troupe/supervision/name_registry.hpp"
#include "troupe/transport/schema/job.capnp.h"
#include "troupe/wire/status_codec.hpp"

namespace troupe::actors {

class master_observer;
// The master's own message: broadcast the view changes applied so far (master.cpp publish).
using publish_atom = caf::atom_constant<caf::atom("publish")>;
class pause_watch;

struct master_state {
  node_context* ctx = nullptr;
  // The node's actors by name: the master asks "dispenser" for counts and re-queues.
  supervision::name_registry* names = nullptr;
  cluster::membership_view view;
  std::uint64_t ring_epoch = 0;  // the epoch the allreduce ring last changed at
  std::string epoch_file;
  // View changes since the last broadcast, and whether the broadcast is queued (master.cpp publish).
  std::vector<std::string> publish_reasons;
  bool publish_queued = false;
  // Members the last broadcast failed to reach. The others that had an address then hold its view
  // (`view`'s mark) and get the next one as a delta.
  std::set<std::string, std::less<>> unsent;
  // When the heap's free pages go back to the system (master_status.cpp trim_heap): the first
  // broadcast since the last trim, and a second after the latest one.
  std::optional<std::pair<troupe::clock::time_point, troupe::clock::time_point>> trim_at;
  troupe::clock::time_point started, window_start, last_reconcile;
  // Progress: totals and the current window (samples/s and loss are over the last full window).
  std::uint64_t samples_total = 0, dropped_steps = 0;
  std::uint64_t first_step_wall_ms = 0;  // earliest first trained minibatch of any worker (Unix ms)
  // Durable counters (job_counters.hpp): what was last saved, when, and how many masters started.
  std::string job_dir;
  std::uint64_t master_starts = 0;
  job_counters saved;
  std::optional<troupe::clock::time_point> last_save;  // on ctx->clock(); none: the next tick saves
  std::string fault;                                   // a disk fault saving them; empty when none
  // Disk faults other nodes reported (DiskFault: a PS shard's checkpoints, a node's log), by node
  // name and source.
  std::map<std::pair<std::string, std::string>, std::string> node_faults;
  std::string published_fault;  // the fault the dispenser was last told of
  std::uint64_t window_samples = 0, window_steps = 0;
  double window_loss = 0;
  double samples_per_sec = 0;
  double loss = std::numeric_limits<double>::quiet_NaN();  // NaN until a window with a step
  // The latest goodput report (docs/goodput.md) of the ring's rank 0 (async_ps: of any worker).
  wire::goodput_report goodput;
  // The dispenser's counts; nullopt until it answered.
  std::optional<wire::task_counts> counts;
  std::set<std::string> done_workers;
  // Members whose connection dropped while this master was itself paused (its own silence made
  // them drop it): kept in the view until they re-join, or declared dead when `until` passes.
  struct suspect {
    node_id id;
    std::string reason;
    troupe::clock::time_point until;
  };
  std::map<std::string, suspect> suspects;  // by node name
  std::shared_ptr<pause_watch> pause;       // this process's own pauses (pause_watch.hpp)
  // The end-of-job evaluation (eval_round.hpp: parts of the test set over the workers), once every
  // task is over; then completion.
  std::optional<eval_round> eval;
  bool finished = false, result_ok = false;
  std::string result_json;
  // Holders whose leases the dispenser was told to re-queue (a departed member, or a worker that
  // exited before it joined): each id once.
  std::set<std::string> requeued_holders;
  // NCCL unique ids and devices per ring epoch (GPU workers).
  gpu_rendezvous gpu;
  // The timeline and /metrics (master_observer.hpp).
  std::shared_ptr<master_observer> obs;
  static inline const char* name = "master";
};
using master_actor = caf::stateful_actor<master_state>;

void on_tick(master_actor* self);
// Loads <job dir>/counters.json into `st` (a restarted master continues the counts) and saves it
// with one more master start.
void restore_counters(master_state& st, const std::string& job_dir);
// Saves the counters when they changed (at most once a second, or at once with `now`); a disk
// fault is kept in st.fault and passed to the dispenser, which pauses until it is over.
void persist_counters(master_actor* self, bool now);
// The job's disk faults, "; "-separated: the master's own first, then each one a node reported
// ("ps-0: ...", "worker-1: ... (log write)").
std::string job_fault(const master_state& st);
// Tells the dispenser the job's disk fault when it changed: it hands out no task while one lasts.
void publish_fault(master_actor* self);
// JobMessage diskFault from a member: kept (empty: over) and published.
void on_disk_fault(master_actor* self, const message& m);
// Answers a StatusRequest with the job's status (reply_to: it carries the request's correlation id).
void send_status(master_actor* self, const message& request);
// An EvalResult from `from`; `correlation_id` (its envelope's) pairs it with its part of the round.
void on_eval_result(master_actor* self, schema::EvalResult::Reader r, const node_id& from,
                    std::uint64_t correlation_id);
// JobMessage gpuCommPost / gpuCommFetch: answers with a GpuCommInfo.
void on_gpu_comm(master_state& st, const message& m);

}  // namespace troupe::actors
