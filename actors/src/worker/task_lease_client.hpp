// The worker's side of the task protocol, the mirror of task_dispenser (dispenser.hpp): it asks
// the dispenser for task leases (ahead of need: the worker asks for its next task once the current
// one is half trained), renews every lease the worker holds each third of the lease time, and sends
// the worker's task reports one at a time, each resent until the dispenser (a restarted master too)
// acknowledges it.
//
// Contract:
// - Nothing blocks but wait_for_lease(): requests and reports go out through `rpc`
//   (wire::rpc_channel::send, polled on later passes), renewals one-way through the node's send().
// - Every deadline (asking again, resending, renewing) reads node.clock(): unit tests drive it
//   with a fake channel, a fake node and a manual clock (tests/actors/task_lease_client_test.cpp).
// - The worker says which leases it holds (the task it trains and the one leased ahead) at each
//   call that needs them. A task it reported (done or failed) it holds no more; the client counts
//   it as held (names it in lease requests, renews it) until the report is acknowledged.
// - Errors are not thrown: a request that cannot be sent or times out is asked again (10 ms for a
//   lease, 100 ms for a report), a refused report (a stale lease) counts as acknowledged.
// - Single-threaded: the worker's training thread owns it, but for the renewals during a step
//   (step_begins .. step_ends), which a thread of the client's sends (below).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "node_context.hpp"
#include "troupe/core/clock.hpp"
#include "troupe/wire/rpc.hpp"

namespace troupe::actors {

class task_lease_client {
 public:
  using time_point = troupe::clock::time_point;
  // A lease: which task (and attempt) and its records [first, first + count).
  struct lease {
    std::uint64_t id = 0;
    std::uint32_t attempt = 0;
    std::uint64_t first = 0, count = 0;
    std::uint32_t epoch = 0;  // the data epoch of the task
    // The attempt whose order the rows train in (the lease's own unless a holder left partway), and
    // the rows of it a holder that left trained already: the task starts after them.
    std::uint64_t trained = 0;
    std::uint32_t order_attempt = 0;
    // The replica step that applied the last of the `trained` rows (Task.trainedStep; 0: not known).
    std::uint64_t trained_step = 0;
  };
  // The dispenser's answer to a lease request.
  struct answer {
    enum class kind { task, none, finished } what = kind::none;
    lease task;  // for kind::task
  };

  // `node` (its send and clock) and `rpc` outlive the client. Requests go to (master, dispenser).
  task_lease_client(node_context& node, wire::rpc_channel& rpc);
  ~task_lease_client();
  task_lease_client(const task_lease_client&) = delete;
  task_lease_client& operator=(const task_lease_client&) = delete;

  // Takes the acknowledgement of the report on its way when it has come, then sends the oldest
  // unacknowledged report when it is due (at once after an acknowledgement or a failed send).
  void pump_reports();
  // Takes the dispenser's answer when it has come (returned; nullopt otherwise or when the request
  // failed: asked again in 10 ms); else, when the worker `wants` a lease and none is on its way,
  // asks for one, naming `held` (the worker's leases) and the unacknowledged reports' tasks.
  // After a `none` answer it asks again in 20 ms (100 ms while `held` is not empty).
  std::optional<answer> pump_lease(bool wants, std::span<const lease> held);
  // Every third of the lease time (once a lease was granted) renews `held` and the unacknowledged
  // reports' tasks; a lost renewal is made up by the next one, two more before the lease runs out.
  void pump_renew(std::span<const lease> held);
  // A step runs from step_begins to step_ends. pump_renew runs between steps only: a step longer
  // than the lease time (a user module's long forward, a long wait in the ring) had its tasks
  // re-queued while its worker lived, their rows trained twice. So a thread of the client's renews
  // the leases held as a step began (and the unacknowledged reports' tasks) each third of the lease
  // time the step runs on, for 10 lease times at most: a step hung for good gives its tasks up. It
  // wakes each sixth of the lease time on its own (no wake-up per step) and sends when a step runs
  // and the last renewal, the training thread's or its own, is a third of the lease time old.
  void step_begins(std::span<const lease> held);
  void step_ends() { stepping_.store(false, std::memory_order_release); }
  // Queues the report of task `t`: done (empty `failure`) or failed, with the first `trained` rows
  // of its order trained before the step that failed (their steps outlive the failure; 0: none
  // kept). `step`: the replica step that applied the last of its rows done or kept
  // (TaskReport.step; 0: not known). Sent by pump_reports().
  void report(const lease& t, const std::string& failure, std::uint64_t trained = 0, std::uint64_t step = 0);
  // Queues the hand-back of task `t` by a worker that leaves having trained the first `trained`
  // rows of its order (their steps outlive it, applied up to `step`): the dispenser keeps them and
  // re-queues the rest. `why`: a worker that goes on gives it back (TaskReport.givenBack: its rows
  // were lost), with `trained` 0.
  void hand_back(const lease& t, std::uint64_t trained, std::uint64_t step = 0, const std::string& why = "");
  // Sends the reports not acknowledged yet and waits for their acknowledgements until `deadline`
  // (a leaving worker, before the master re-queues what it holds); true once all are acknowledged.
  bool settle_reports(time_point deadline);

  // The dispenser said that nothing is left for anyone.
  bool exhausted() const { return exhausted_; }
  // A lease request is on its way.
  bool asking() const { return lease_request_ != 0; }
  // Reports not acknowledged yet.
  std::size_t unacknowledged() const { return unsent_.size(); }
  // The earliest of the client's own deadlines still to come (asking for a lease again, resending a
  // report, renewing), or `limit` when that is sooner.
  time_point next_due(time_point limit);
  // Blocks until the answer to the lease request on its way is there or `deadline` has come.
  void wait_for_lease(time_point deadline);

 private:
  time_point now() const { return node_.clock().now(); }
  // The answer in a TaskLease reply; sets the renewal period and the next request's time.
  answer take(const message& reply, std::span<const lease> held);
  void ask(std::span<const lease> held);
  // `held` and the unacknowledged reports' tasks: what a renewal names.
  std::vector<std::pair<std::uint64_t, std::uint32_t>> renewed(std::span<const lease> held);
  void renewed(std::span<const lease> held, std::vector<std::pair<std::uint64_t, std::uint32_t>>& into);
  void send_renewal(const std::vector<std::pair<std::uint64_t, std::uint32_t>>& leases);
  void renew_during_steps();  // the thread's loop

  node_context& node_;
  wire::rpc_channel& rpc_;
  // Task reports not acknowledged yet, oldest first (TaskReport bodies).
  std::vector<outbound> unsent_;
  // Correlation ids of the lease request and the report on their way; 0: none.
  std::uint64_t lease_request_ = 0, report_request_ = 0;
  bool exhausted_ = false;
  bool first_lease_logged_ = false;
  time_point next_lease_{}, next_report_{};
  // The lease time the dispenser grants (TaskLease.leaseMs; 0 until the first lease) and when the
  // held leases are renewed next.
  std::chrono::milliseconds lease_ms_{0};
  time_point next_renew_{};
  // The renewals during steps: the thread, what it renews (under mu_) and the step in progress.
  std::thread step_renewer_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;  // under mu_
  // Written under mu_ by the training thread only (which reads them unlocked).
  std::vector<std::pair<std::uint64_t, std::uint32_t>> step_leases_;
  std::chrono::milliseconds step_lease_ms_{0};
  std::vector<std::pair<std::uint64_t, std::uint32_t>> step_scratch_;  // the training thread's
  std::atomic<bool> stepping_{false};
  // On the clock, as time_since_epoch counts: when the step began, and the last renewal sent.
  std::atomic<std::int64_t> step_began_{0}, last_renewed_{0};
};

}  // namespace troupe::actors
