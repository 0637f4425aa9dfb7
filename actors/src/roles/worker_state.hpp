// A worker's state: its model replica and trainer, strategy, services (PS client, ring), the task it
// holds and the minibatches left in it, and its progress window.
#pragma once

#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <optional>

#include "../node_context.hpp"
#include "../record_fetch.hpp"
#include "../worker_services.hpp"
#include "roles.hpp"
#include "troupe/actors/strategy.hpp"
#include "troupe/actors/trainer_backend.hpp"
#include "troupe/storage/record_store.hpp"
#include "troupe/wire/rpc.hpp"

namespace troupe::actors {

struct held_task {
  std::uint64_t id = 0;
  std::uint32_t attempt = 0;
  std::uint64_t first = 0, count = 0;
  nn::dataset rows;
  std::vector<std::uint32_t> order;
  std::size_t cursor = 0;  // next row of `order`
  // Served records (worker_state::fetch): the fetcher's ticket, until the rows are in.
  std::optional<std::uint64_t> ticket;
};

struct worker_state {
  using clock = troupe::clock;
  // The node as the training loop sees it (spec, sends, ring epoch, readiness, clock): every wait
  // and timeout of the loop reads node->clock().
  node_context* node = nullptr;
  // The concrete runtime, for set-up only (services, rpc, GPU); null in unit tests of the loop.
  node_runtime* rt = nullptr;
  data_paths data;
  std::optional<storage::record_store> train;  // the local store; empty when records are served
  // Served records ([data] serve, docs/data.md): its own rpc client for the record server, and the
  // fetcher (prefetching leased tasks, caching them); null when the local store is read.
  std::unique_ptr<wire::rpc_client> records_rpc;
  std::unique_ptr<record_fetcher> fetch;
  std::optional<nn::dataset> test;
  // The replica (native, CUDA or TorchScript; backends/make_backend.hpp). Declared before the
  // strategy, which may refer to its device side, so that it is destroyed after.
  std::unique_ptr<trainer_backend> backend;
  std::unique_ptr<wire::rpc_client> rpc;
  // The channel the loop's lease requests and task reports go through: rpc in a worker, a fake in
  // unit tests of the loop.
  wire::rpc_channel* task_rpc = nullptr;
  std::unique_ptr<remote_ps> ps;
  std::unique_ptr<node_ring_context> ring_context;  // before the ring, which refers to it
  std::unique_ptr<collective::mixed_ring_session> ring;
  std::unique_ptr<strategy> strat;
  std::unique_ptr<worker_context> ctx;
  std::optional<held_task> task;
  // The task leased ahead while `task` trains (from its second half on), so that a task boundary
  // costs no round trip to the dispenser.
  std::optional<held_task> next;
  // Task reports not acknowledged yet, oldest first: sent one at a time, resent until the
  // dispenser (a restarted master too) acknowledges them. Their tasks count as held meanwhile.
  std::vector<outbound> unsent_reports;
  // Correlation ids of the lease request and the report on their way (task_rpc->send); 0: none.
  std::uint64_t lease_request = 0, report_request = 0;
  bool exhausted = false;  // the dispenser said: nothing left for anyone
  bool done = false;       // the training loop is over
  clock::time_point next_lease, next_report;
  // Lease renewal (TaskRenew): the lease time the dispenser grants (TaskLease.leaseMs; 0 until the
  // first lease) and when the held leases are renewed next (every third of it).
  std::chrono::milliseconds lease_ms{0};
  clock::time_point next_renew;
  // Progress since the last report.
  std::uint64_t win_samples = 0, win_steps = 0, dropped = 0, steps_total = 0;
  double win_loss = 0;
  clock::time_point last_report;
  // [train] max_samples_per_s: the earliest time the next step may start (the steps so far at
  // that rate); the epoch of the clock until the first paced step.
  clock::time_point pace_until;
  // Unix ms of the first trained minibatch (benchmarks: time to first step); 0 until then.
  std::uint64_t first_step_wall_ms = 0;
  bool first_step_sent = false;
  bool first_lease_logged = false;
  // TROUPE_STEP_LOG=<dir>: one wall-clock timestamp (us) per trained step into
  // <dir>/<node>#<incarnation>.steps (recovery benchmark). Off: one null check per step.
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> step_log{nullptr, &std::fclose};
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
// The task's rows in a shuffled order, the same for the same task id and attempt.
void shuffle_rows(held_task& h);
// The minibatch at the held task's cursor; nullopt without a task (worker_batches.cpp).
std::optional<nn::batch> current_batch(worker_state& st);
// The minibatch the worker offers after the current one, for the strategy to prepare (async_ps pulls
// its rows meanwhile): the rest of the task, else the first one of the task leased ahead once its
// records are in; nullopt otherwise.
std::optional<nn::batch> batch_after(worker_state& st);
// Evaluates the model on the test set and answers the master.
void evaluate(worker_state& st, const message& request);
// Opens the TROUPE_STEP_LOG file when that variable is set.
void open_step_log(worker_state& st);
// Opens the data, builds the trainer backend the job names, the services and the strategy; throws
// on failure (the supervisor restarts the actor, and gives up past its intensity limit).
void setup_worker(worker_state& st, node_runtime* rt, data_paths data);

}  // namespace troupe::actors
