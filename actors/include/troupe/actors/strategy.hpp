// The actor API for new training algorithms. A strategy decides what one worker does with one
// minibatch: async PS pulls parameters from the shards and pushes gradients, sync allreduce
// averages gradients over the ring of workers, local SGD trains alone and averages parameters every
// K steps. The worker actor owns everything else (tasks, leases, progress, evaluation, restarts),
// so a new algorithm is one file: a class implementing `strategy` and a `strategy_registrar`.
// docs/strategies.md walks through local_sgd.cpp as the example.
//
// Threading: a worker calls its strategy from one thread (its own); a strategy may block (network,
// collectives) but every wait it makes is bounded (rpc and collective timeouts).
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "troupe/actors/trainer_backend.hpp"
#include "troupe/collective/ring_session.hpp"
#include "troupe/core/clock.hpp"
#include "troupe/core/ids.hpp"
#include "troupe/job/job_spec.hpp"
#include "troupe/nn/data/dataset.hpp"
#include "troupe/wire/goodput_report.hpp"

namespace troupe::actors {

// Parameter-server access for a worker: pulls overwrite the backend's parameters (its flat dense
// buffer and the batch's embedding rows) with the shards' values; pushes send the gradients the
// last compute_gradients left in it (equal ids already combined by the embedding tables). Host
// memory: a device backend's strategy moves its mirror (trainer_backend::to_host / from_host).
//
// Requests in flight ([ps] in_flight_pushes, prefetch; docs/job.md): push may return before the
// shards acknowledge it (at most in_flight_pushes pushes unacknowledged); a push that fails later
// fails a later pull, push or settle (the caller retries its batch). prefetch sends the pull of a
// batch to come; the pull of that batch then takes its replies (rows that miss the pushes this
// worker sent after the prefetch: at most one, the batch trained meanwhile).
// The gradient noise statistics the PS shards estimated from the pushes they received (docs/goodput.md,
// "async_ps"), summed over the shards that hold dense tensors: |G|^2 and tr(Sigma) / M0 before the
// floors, the fewest pairs any of them estimated from.
struct pushed_noise {
  double grad_sqr = 0, grad_var = 0;
  std::uint64_t rounds = 0;
  std::uint32_t shards = 0;
  bool preconditioned = false;  // of Adam's preconditioned gradient (every shard's, in a sum)
};

class ps_client {
 public:
  virtual ~ps_client() = default;
  virtual expected<void> pull(trainer_backend& m, const nn::batch& b) = 0;
  // The gradients of a batch of `rows` (the shards pair pushes of equal rows for the noise scale).
  virtual expected<void> push(trainer_backend& m, std::size_t rows) = 0;
  // Once every shard holding dense tensors has answered a push with its estimate.
  virtual std::optional<pushed_noise> noise_from_pushes() const { return std::nullopt; }
  // Starts the pull of `next` without waiting for it (nothing when prefetching is off or a shard
  // cannot be reached now: its pull then asks again).
  virtual void prefetch(trainer_backend& m, const nn::batch& next) {}
  // Waits until every push is acknowledged; the error of one that failed.
  virtual expected<void> settle() { return {}; }
  // Pushes sent and not acknowledged yet (a batch each), without waiting.
  virtual std::size_t unsettled_pushes() const { return 0; }
};

// The ring of alive workers for the current membership epoch: rebuilt by ensure() after a
// membership change; a collective interrupted by a change fails fast (collective_errc), after
// which the strategy calls ensure() again and resynchronises. Defined with its implementations in
// the collective module (troupe/collective/ring_session.hpp).
using ring_session = collective::ring_session;

// Where a ring job keeps its replicas durable (the worker's ring checkpoints, docs/job.md): a
// strategy that finds no trained replica in its ring (a resumed job's first ring) starts from the
// latest checkpoint instead of initial weights.
class replica_store {
 public:
  virtual ~replica_store() = default;
  // The latest checkpoint into `b` (parameters, buffers, optimizer state and its step counts): its
  // step (the replica steps it holds: strategy::checkpointed_step when it was written), nullopt when
  // there is none. Errors name the checkpoint and the tensor that does not fit. `strategy_state`,
  // when given, receives what the strategy kept beside the replica (strategy::durable_state() when
  // the checkpoint was written; empty when it kept nothing).
  virtual expected<std::optional<std::uint64_t>> restore_latest(
      trainer_backend& b, std::vector<float>* strategy_state = nullptr) = 0;
};

// Per-task output of a strategy that produces it (prediction): the worker keeps it durably before it
// reports the task done, so a task redone after a kill replaces its output (every row once).
class task_output {
 public:
  virtual ~task_output() = default;
  // `rows` rows of `task` (records first..first+rows-1), in record order: `labels` [rows], `values`
  // [rows * width], and the sum of the rows' losses. Errors name the file.
  virtual expected<void> write(std::uint64_t task, std::uint64_t first, std::size_t rows, std::size_t width,
                               std::span<const float> labels, std::span<const float> values,
                               double loss_sum) = 0;
};

struct worker_context {
  const job::job_spec& spec;
  const node_id& self;
  trainer_backend& backend;  // the replica, its optimizer and their state (trainer_backend.hpp)
  ps_client& ps;
  ring_session& ring;
  replica_store* store = nullptr;  // ring strategies' checkpoints; null when there are none
  task_output* output = nullptr;   // per-task output (prediction jobs); null when there is none
  // The batch the worker offers after the one of this step, when known (the rest of its task, or
  // the first of the task leased ahead); null otherwise. Set by the worker before each step, valid
  // during it: async_ps prefetches its rows.
  const nn::batch* next = nullptr;
  // The node's clock (step and sync times of the goodput estimate); null: the system clock.
  troupe::clock* clock = nullptr;
  // The batch the worker cuts from its task per step: set by a strategy that chooses its own
  // ([train] batch = "auto", docs/goodput.md); 0: [train] batch_size.
  std::size_t local_batch = 0;
  // The data epoch (0-based) of the task the worker trains now, set by the worker before each step.
  std::uint32_t data_epoch = 0;
  // [train] max_samples_per_s: set by the worker when it is paced. A ring strategy calls it once the
  // step's gradients are computed, before the collective, with the step's samples and its start
  // (seconds on the node's clock): it sleeps until samples / rate have passed since then, as on a CPU
  // that trains `rate` samples a second, so that the pace counts as compute time (the goodput
  // model's) and not as waiting for peers in the collective. A step so paced is not paced again
  // after it. Empty: not paced.
  std::function<void(std::size_t, double)> pace = {};
  // Set by the worker: replicas::sync_from_most_trained calls it when no replica of the ring had
  // trained (every one that had is gone), so the replicas start again from the ring's checkpoint of
  // `step` steps (0: none, the initial weights). It returns true when the batch offered to this step
  // is no longer the one to train: a task the worker holds came with rows kept at a later step, lost
  // with the replicas, and trains from its first row. `offered_batch_stale` is set then, and a ring
  // strategy whose tasks report their step (strategy::checkpointed_step) trains nothing in that step
  // (step_result::kind::retry: the worker offers the task's first batch instead).
  std::function<bool(std::uint64_t step)> replicas_restarted = {};
  // Also set by a strategy that trains nothing in a step and wants its batch offered again at once
  // (local_sgd, after a resync averaged this replica's rows: the worker marks the task's rows trained
  // so far as settled after the step, which the batch, not in the average, must not be among).
  bool offered_batch_stale = false;
  // A strategy whose rows reach the other replicas at its rounds (strategy::rows_settle_in_rounds,
  // local_sgd's averaging) counts each round that put every row this replica trained into every
  // replica; the worker reports the tasks it trained to their end before that round once it sees the
  // count move (after the step).
  std::uint64_t rounds_settled = 0;
  // Set by the worker, for those strategies: called when a ring's resync is about to overwrite this
  // replica with another's (local_sgd: it was not of the ring's latest round), losing the rows it
  // trained since its last settled round. The worker gives back the tasks it trained to their end since then
  // and moves the task it trains back to where that round found it; true when that moved the batch offered to
  // this step (the strategy trains nothing in it then, and sets offered_batch_stale).
  std::function<bool()> replica_overwritten = {};
};

struct step_result {
  enum class kind {
    trained,   // the batch was trained (samples, loss set)
    idle,      // nothing to do now (no batch); the worker waits for its next lease or a ring change
    retry,     // the batch could not be trained now (a peer is gone); offer it again
    finished,  // no worker has data left: the training loop is over
  };
  kind what = kind::idle;
  std::size_t samples = 0;
  double loss = 0;
  bool dropped = false;  // a collective was interrupted by a membership change
};

class strategy {
 public:
  virtual ~strategy() = default;
  virtual std::string_view name() const = 0;
  // `b`: this worker's next minibatch, or null when it has none right now. `exhausted`: no task is
  // left for anyone, and this worker holds none.
  virtual step_result step(worker_context& ctx, const nn::batch* b, bool exhausted) = 0;
  // Makes the model current for predicting `b` (async PS pulls the rows it needs).
  virtual expected<void> prepare_eval(worker_context& ctx, const nn::batch& b) { return {}; }
  // Once, before the worker joins the membership: allocate (and touch) what the first steps will
  // need, so that ring partners do not wait for this worker's page faults.
  virtual void warm_up(worker_context& ctx) {}
  // A strategy that writes per-task output (prediction) takes a task's rows in record order (not
  // shuffled), and its output once the task's last batch is done, before the worker reports it
  // (an error fails the task).
  virtual bool keeps_row_order() const { return false; }
  // Every trained step's rows are in a model that outlives this worker (the ring's replicas; the PS
  // shards once its pushes are settled): a worker that leaves hands its task back with the rows it
  // trained, and they are not trained again. local_sgd's steps since the last average are its own.
  virtual bool steps_outlive_worker() const { return false; }
  // The rows of its steps are held by the PS shards once they acknowledged the pushes (async_ps),
  // whatever becomes of this worker or any other.
  virtual bool steps_on_shards() const { return false; }
  // Its rows reach every replica only at its next round (local_sgd: the averaging): a task trained
  // to its end is reported done once worker_context::rounds_settled moves, and a resync that
  // overwrites this replica first gives it back (worker_context::replica_overwritten). Otherwise a
  // dying worker's finished tasks would stay done with their rows in no model.
  virtual bool rows_settle_in_rounds() const { return false; }
  virtual expected<void> task_done(worker_context& ctx, std::uint64_t task, std::uint64_t first,
                                   std::size_t rows) {
    return {};
  }
  // What the strategy measured about its gradients and speed (docs/goodput.md), sent with the
  // worker's progress; `valid` false when it measures nothing.
  virtual wire::goodput_report goodput() const { return {}; }
  // What a ring strategy keeps beside its replica in the ring's checkpoints (allreduce: its goodput
  // controller, the floats sync_from_most_trained's `extra` carries), so that a job resumed from a
  // checkpoint goes on with its noise-scale estimate, batch and progress; empty: nothing.
  virtual std::vector<float> durable_state() const { return {}; }
  // The replica's step that a ring checkpoint written now would carry (model::state_meta::step),
  // where such a checkpoint holds every step up to it and those steps hold every row this worker
  // trained (allreduce, on the host and on the device): a task's last rows applied at a step after a
  // resumed job's checkpoint are trained again (TaskReport.step). 0: not known (a resumed job keeps
  // the task done; the checkpoint's meta then has the host trainer's optimizer steps).
  virtual std::uint64_t checkpointed_step(worker_context& ctx) const { return 0; }
};

using strategy_factory = std::function<std::unique_ptr<strategy>(const job::job_spec&)>;

// A static registrar in the strategy's file registers it under `name` ([job] strategy = name), with
// what the job needs to know of it (job/strategy_traits.hpp: PS shards or replicas, whether the
// replicas agree at the end, a ring's global batch); without traits, those the job module knows
// the name by (the built-ins'), else the defaults (replicas that agree, a fixed batch).
// docs/strategies.md, "Adding one".
struct strategy_registrar {
  strategy_registrar(std::string name, strategy_factory f,
                     std::optional<job::strategy_traits> traits = std::nullopt);
};
// Runs the registrars of the strategies built into troupe (worker/strategies/registry.cpp), once: a
// program reads job files only after this (troupe's main does it first), so that a strategy of its
// own is a name the job file may give.
void register_strategies();
// Errors (core_errc::invalid_argument) list the registered names.
expected<std::unique_ptr<strategy>> make_strategy(const std::string& name, const job::job_spec& spec);
std::vector<std::string> strategy_names();

}  // namespace troupe::actors
