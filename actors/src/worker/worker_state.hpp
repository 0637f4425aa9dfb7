// A worker trains the job's model on the tasks it leases until none is left: lease a task
// (task_lease_client.hpp), get its records (data_feed.hpp), train its minibatches through the job's
// strategy on a trainer backend, synchronised through the PS client or the ring (worker_services.hpp),
// report the task and the progress, and evaluate a part of the test set at the end (README.md in
// this folder: the parts, their contracts, their tests).
//
// This is its state: the parts above, the task it holds and the one leased ahead with the
// minibatches left, and its progress window. Set up from the node's worker_host (worker.cpp); the
// loop (worker_loop.cpp) reads only `node`, so unit tests run it on a fake node_context.
#pragma once

#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <optional>

#include "data_feed.hpp"
#include "node_context.hpp"
#include "replica_checkpoint.hpp"
#include "roles.hpp"
#include "task_lease_client.hpp"
#include "troupe/actors/strategy.hpp"
#include "troupe/actors/trainer_backend.hpp"
#include "troupe/storage/record_store.hpp"
#include "troupe/transport/schema/job.capnp.h"
#include "troupe/wire/rpc.hpp"
#include "worker_services.hpp"

namespace troupe::actors {

// A leased task (its id, attempt and record range) with its records and the order they train in.
struct held_task : task_lease_client::lease {
  nn::dataset rows;
  std::vector<std::uint32_t> order;
  std::size_t cursor = 0;  // next row of `order`
  // strategy::rows_settle_in_rounds: `cursor` at the strategy's last settled round (or as the task
  // started after it): the rows before it are in every replica.
  std::size_t settled = 0;
  // Served records (data_feed::fetch): the feed's ticket, until the rows are in.
  std::optional<std::uint64_t> ticket;
};

struct worker_state {
  using clock = troupe::clock;
  // The node as the training loop sees it (spec, sends, ring epoch, readiness, clock): every wait
  // and timeout of the loop reads node->clock().
  node_context* node = nullptr;
  // What the set-up builds the parts from (rpc channels, PS connections, ring listener, liveness);
  // null in unit tests of the loop.
  worker_host* host = nullptr;
  // The records of its tasks and the test set: the local store or served records (data_feed.hpp).
  std::unique_ptr<data_feed> feed;
  std::optional<nn::dataset> test;
  // The replica (native, CUDA or TorchScript; backends/make_backend.hpp). Declared before the
  // strategy, which may refer to its device side, so that it is destroyed after.
  std::unique_ptr<trainer_backend> backend;
  std::unique_ptr<wire::rpc_channel> rpc;
  // Leases, renewals and task reports (task_lease_client.hpp), through `rpc` in a worker, a fake
  // channel in unit tests of the loop.
  std::unique_ptr<task_lease_client> leases;
  std::unique_ptr<remote_ps> ps;
  std::unique_ptr<node_ring_context> ring_context;  // before the ring, which refers to it
  std::unique_ptr<collective::mixed_ring_session> ring;
  std::unique_ptr<strategy> strat;
  // Ring strategies: the ring's checkpoints (replica_checkpoint.hpp), and when this worker next
  // considers writing one; async_ps: its buffers' (worker.cpp, set_up_buffer_checkpoints).
  std::unique_ptr<ring_checkpoints> checkpoints;
  std::unique_ptr<task_output> output;  // prediction jobs: the tasks' part files
  clock::time_point next_checkpoint{};
  std::uint64_t steps_at_checkpoint = 0;  // steps_total when the last checkpoint was handed over
  // The disk fault of the last try to write the job's final state (reported to the master, which
  // pauses the job's end while it lasts); empty: none.
  std::string final_state_fault;
  std::unique_ptr<worker_context> ctx;
  std::optional<held_task> task;
  // The task leased ahead while `task` trains (from its second half on), so that a task boundary
  // costs no round trip to the dispenser.
  std::optional<held_task> next;
  // strategy::rows_settle_in_rounds: the tasks trained to their end whose rows the strategy's next
  // round puts into every replica (reported done then), and the rounds settled so far as last seen
  // (worker_context::rounds_settled).
  std::vector<task_lease_client::lease> unsettled;
  std::uint64_t rounds_seen = 0;
  std::vector<task_lease_client::lease> held_scratch;  // worker_loop.cpp's held()
  bool done = false;                                   // the training loop is over
  bool left = false;                                   // the node leaves (SIGTERM): no further step
  // Progress since the last report.
  std::uint64_t win_samples = 0, win_steps = 0, dropped = 0, steps_total = 0;
  double win_loss = 0;
  clock::time_point last_report;
  // [train] max_samples_per_s: the earliest time the next step may start (the steps so far at
  // that rate); the epoch of the clock until the first paced step.
  clock::time_point pace_until;
  bool paced_in_step = false;  // the strategy paced this step itself (worker_context::pace)
  // Unix ms of the first trained minibatch (benchmarks: time to first step); 0 until then.
  std::uint64_t first_step_wall_ms = 0;
  bool first_step_sent = false;
  // TROUPE_STEP_LOG=<dir>: one wall-clock timestamp (us) per trained step into
  // <dir>/<node>#<incarnation>.steps (recovery benchmark). Off: one null check per step.
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> step_log{nullptr, &std::fclose};
  // The timestamps' base: the clock's wall time (Unix us, from wall_ms) and its monotonic time when
  // the log was opened; a step's stamp adds the monotonic time since then.
  std::int64_t step_log_wall_us = 0;
  clock::time_point step_log_opened{};
  static inline const char* name = "worker";
};

// The worker actor's slice of training between two looks at its mailbox (evaluate requests).
inline constexpr std::chrono::milliseconds tick_budget{50};

// One pass of the training loop: lease a task when needed, train one minibatch through the
// strategy, report finished tasks and progress. Returns false once the loop is over. A pass with
// nothing to train waits for what it lacks (the lease reply, the task's records, a ring change, the
// loop's next deadline) on the node's clock, woken by the event itself, but never past `until`.
bool train_some(worker_state& st, worker_state::clock::time_point until);
inline bool train_some(worker_state& st) {
  return train_some(st, st.node->clock().now() + tick_budget);
}
// The task's rows in a shuffled order, the same for the same task id and order attempt (the
// lease's own attempt, or, for a task whose first rows a holder that left trained, that lease's).
void shuffle_rows(held_task& h);
// The samples per step: the strategy's choice (worker_context::local_batch) or [train] batch_size.
std::size_t batch_size(const worker_state& st);
// The minibatch at the held task's cursor (and the task's data epoch into the context); nullopt
// without a task (worker_batches.cpp).
std::optional<nn::batch> current_batch(worker_state& st);
// The minibatch the worker offers after the current one, for the strategy to prepare (async_ps pulls
// its rows meanwhile): the rest of the task, else the first one of the task leased ahead once its
// records are in; nullopt otherwise.
std::optional<nn::batch> batch_after(worker_state& st);
// The rows of the held task trained so far that go back with it as it leaves this worker partway (a
// leave, a failed step) when its steps outlive the worker (the ring's replicas; the PS shards once
// they took the pushes, settled here): rows_that_go_back of its cursor, else 0 (task_rows.cpp).
std::uint64_t rows_to_keep(worker_state& st);
// Of the first `rows` of the held task's order (st.task, st.ctx set), those that can go back with it
// as it leaves this worker partway: more than it came with, fewer than all, and a lone last row left
// to the next holder (the ring's batches fold it into the batch before); 0: none.
std::uint64_t rows_that_go_back(const worker_state& st, std::uint64_t rows);
// Into a WorkerProgress: the replica's step (strategy::checkpointed_step) and the held task's rows
// that would outlive this worker should it die now (task_rows.cpp): the master keeps them for its
// task's re-queue (surviving_rows.hpp).
void write_task_rows(const worker_state& st, schema::WorkerProgress::Builder p);
// worker_context::replicas_restarted: the held tasks with rows kept at a step after `step` (lost with
// the replicas) train from their first row; true when one did (task_rows.cpp).
bool forget_rows_kept_after(worker_state& st, std::uint64_t step);
// strategy::rows_settle_in_rounds, after a step (task_rows.cpp): once the strategy's settled rounds
// moved, the tasks trained to their end before it are reported done and the held ones' `settled`
// marks move to their cursors.
void report_settled(worker_state& st);
// worker_context::replica_overwritten (task_rows.cpp): the unsettled tasks go back to the dispenser
// whole, the held task's cursor back to its `settled` mark; true when the cursor moved.
bool lose_unsettled_rows(worker_state& st);
// Gives the unsettled tasks back whole (hand-backs of 0 rows; `why` empty: the worker leaves).
void give_back_unsettled(worker_state& st, const std::string& why);
// Evaluates the model on the test set and answers the master.
void evaluate(worker_state& st, const message& request);
// How often the checkpoint writer writes: a ring's job.checkpoint_every_ms; an async_ps worker's
// buffers with the shards' parameters, every ps.checkpoint_every_ms.
std::chrono::milliseconds checkpoint_every(const job::job_spec& spec);
// Ring strategies: every checkpoint_every() the alive worker of the lowest index hands a copy of
// its replica to the ring's checkpoint writer (replica_checkpoint.hpp); async_ps, of its buffers.
void maybe_checkpoint(worker_state& st);
// A ring worker that leaves (SIGTERM: the job stopped, a preemption, a scale-down) and was the
// checkpoint writer as it began to leave hands its replica to the writer once more when it trained
// since the last checkpoint: a job stopped before its first periodic checkpoint keeps what it
// learnt (its model, `--resume`), and one stopped later loses no steps. Waits (2 s at most) for
// the write: false when one was due and is not written (the task it trains is not handed back
// with its trained rows then: they are trained again).
bool checkpoint_on_leave(worker_state& st);
// The ring's replicas start again from its checkpoint of `step` steps (the ring's source restored it:
// every replica that had trained is gone): the master puts what later steps applied back to TODO
// (RingRestored). Waits for its answer (10 s at most; the ring waits with it): the journal holds it
// before this ring trains, so no task the ring trains is taken for a lost one.
void tell_ring_restored(worker_state& st, std::uint64_t step);
// A leaving worker hands back the task it trains with the rows it trained, when their steps outlive
// it (strategy::steps_outlive_worker, and its last checkpoint written: `checkpointed`), and waits
// (leave_reports_bound at most) for the acknowledgements of its reports, before the master hears that it
// leaves (node_main's leave_job waits for this: node_context::hand_back_pending): a stop, a preemption or a
// scale-down trains no row twice (docs/job.md, "A leaving worker's task").
void hand_back_on_leave(worker_state& st, bool checkpointed);
// The state the evaluation scored, as the job's final state (<job dir>/checkpoints/final): what
// `troupe export` writes the job's model from. An error when it cannot be written: the evaluation
// answers with it (a part whose state is not written is no result).
expected<void> write_final_state(worker_state& st);
// [train] max_samples_per_s in a ring strategy's step (worker_context::pace): sleeps until `samples`
// at that rate have passed since `since_s` (seconds on the node's clock).
void pace_compute(worker_state& st, std::size_t samples, double since_s);
// Opens the TROUPE_STEP_LOG file when that variable is set.
void open_step_log(worker_state& st);
// Opens the data, builds the trainer backend the job names, the services and the strategy; throws
// on failure (the supervisor restarts the actor, and gives up past its intensity limit).
void setup_worker(worker_state& st, worker_host* rt, data_paths data);

}  // namespace troupe::actors
