// The dispenser actor: one per job, on the master node; the task journal's single writer (LMDB
// allows one), so it runs detached. Its behaviour is task_dispenser (dispenser.hpp).
#include "dispenser.hpp"

#include <spdlog/spdlog.h>
#include <caf/all.hpp>

#include <algorithm>

#include "caf_types.hpp"
#include "troupe/job/job_check.hpp"
#include "troupe/storage/disk_fault.hpp"
#include "troupe/storage/record_store.hpp"
#include "troupe/wire/messages.hpp"

namespace troupe::actors {

task_dispenser::task_dispenser(node_context& node, const data_paths& data)
    : node_(node), timeline_(node.who().job_dir) {
  auto store = storage::record_store::open(data.train_dir);
  if (!store) throw std::runtime_error(store.err().to_string());
  const auto o = job::journal_options_of(node_.spec(), data.train_dir, store->count());
  auto j = storage::task_journal::open_or_create(node_.who().job_dir + "/journal", o);
  if (!j) throw std::runtime_error(j.err().to_string());
  journal_.emplace(std::move(*j));
  auto c = journal_->counts();
  if (c)
    spdlog::info("dispenser: journal has {} tasks: {} todo, {} doing, {} done, {} failed", c->total(),
                 c->todo, c->doing, c->done, c->failed);
}

void task_dispenser::on_message(const message& m) {
  using B = schema::Envelope::Body;
  if (m.kind() == B::TASK_REQUEST || m.kind() == B::TASK_REPORT)
    on_messages({m});
  else if (m.kind() == B::TASK_RENEW)
    renew_leases(m);
}

std::uint64_t task_dispenser::count_requeued(expected<std::uint64_t> n) {
  if (!n) {
    disk_trouble(n.err());  // the requeue is retried: next request, tick or reconciliation
    return 0;
  }
  return *n;  // not proof that the disk is back: a requeue of nothing writes no page
}

bool task_dispenser::disk_trouble(const error& e) {
  if (!storage::is_disk_fault(e)) return false;
  if (auto text = e.to_string(); text != fault_) {
    spdlog::error("dispenser: task journal: {}: no task is handed out until it can be written again", text);
    fault_ = text;
  }
  return true;
}

void task_dispenser::disk_ok() {
  if (fault_.empty()) return;
  spdlog::info("dispenser: the task journal is writable again: handing out tasks");
  fault_.clear();
}

void task_dispenser::set_external_fault(const std::string& fault) {
  external_fault_ = fault;
}

namespace {
// A worker's report as the journal takes it; none for an outcome this master cannot read (a newer
// peer's), which is not a task done.
std::optional<storage::report_request> report_of(schema::TaskReport::Reader r, const std::string& holder) {
  storage::report_request rr{r.getTaskId(), holder, r.getAttempt(), false, {}};
  rr.step = r.getStep();
  switch (r.which()) {
    case schema::TaskReport::DONE:
      return rr;
    case schema::TaskReport::FAILED:
      rr.failed = true;
      rr.error_text = r.getFailed().cStr();
      rr.trained = r.getFailedAfter();
      return rr;
    case schema::TaskReport::LEFT:
      rr.left = true;
      rr.trained = r.getLeft();
      rr.error_text = r.getGivenBack().cStr();  // why a holder that stays gives it back; empty: it leaves
      return rr;
  }
  spdlog::warn("dispenser: dropped {}'s report of task {} of an unknown kind ({})", holder, r.getTaskId(),
               static_cast<int>(r.which()));
  return std::nullopt;
}
}  // namespace

bool task_dispenser::collect(const message& m, std::int64_t deadline, storage::journal_batch& jb) {
  using B = schema::Envelope::Body;
  std::string holder = m.from_node().to_string();
  try {  // a malformed message is dropped alone, not with the batch
    if (m.kind() == B::TASK_REPORT) {
      auto rr = report_of(m.body().getTaskReport(), holder);
      if (!rr) return false;
      jb.reports.push_back(std::move(*rr));
      return true;
    }
    if (departed_.contains(holder)) {  // that incarnation is gone for good
      reply_lease(m, std::nullopt, true);
      return false;
    }
    // A worker names the tasks it holds and keeps (the one it trains, one leased ahead, finished
    // ones whose report is on its way); any other lease of it was lost on its side (a restarted
    // worker actor, a reply that never arrived) and goes back to TODO in the lease's transaction.
    storage::lease_request l{std::move(holder), deadline, {}};
    for (auto id : m.body().getTaskRequest().getHolding()) l.keep.push_back(id);
    jb.leases.push_back(std::move(l));
    return true;
  } catch (const std::exception& e) {
    spdlog::warn("dispenser: dropped a malformed task message from {}: {}", holder, e.what());
    return false;
  }
}

void task_dispenser::on_messages(const std::vector<message>& batch) {
  using B = schema::Envelope::Body;
  std::int64_t deadline = node_.clock().wall_ms() + node_.spec().job.lease_timeout.count();
  storage::journal_batch jb;
  std::vector<const message*> reporters, askers;
  for (const auto& m : batch) {
    if (m.kind() == B::TASK_RENEW) renew_leases(m);
    if (m.kind() != B::TASK_REQUEST && m.kind() != B::TASK_REPORT) continue;
    if (collect(m, deadline, jb)) (m.kind() == B::TASK_REPORT ? reporters : askers).push_back(&m);
  }
  // While a disk fault lasts the workers hear "none" and ask again (a journal fault is probed by
  // each batch, a fault of the master's files is lifted by the master); reports are still taken.
  const bool leasing = external_fault_.empty() && gave_up_.empty();
  if (!leasing) jb.leases.clear();
  if (jb.reports.empty() && jb.leases.empty() && askers.empty()) return;
  expected<storage::batch_outcome> out = storage::batch_outcome{};
  if (!jb.reports.empty() || !jb.leases.empty()) out = journal_->apply(jb);
  const bool disk = !out && disk_trouble(out.err());
  if (!out && !disk) spdlog::error("dispenser: task journal: {}", out.err().to_string());
  if (out && (!jb.reports.empty() || !jb.leases.empty())) disk_ok();
  // A report the journal cannot record for a disk fault is not acknowledged: the worker resends it.
  for (std::size_t i = 0; i < reporters.size() && !disk; ++i)
    ack_report(*reporters[i], jb.reports[i],
               out ? out->reports[i] : expected<storage::task_state>(out.err()));
  // Given up: no task, and "finished" once none is held (reply_lease reads the counts).
  const bool over = out && !gave_up_.empty() && !paused();
  for (std::size_t i = 0; i < askers.size(); ++i) {
    bool granted = out && leasing;
    if (granted && out->leases[i].requeued > 0)
      lease_not_received(jb.leases[i].holder, out->leases[i].requeued);
    bool none = !granted || paused();
    if (!none && out->leases[i].leased)
      last_grant_[jb.leases[i].holder] = {out->leases[i].leased->id, out->leases[i].leased->attempt};
    reply_lease(*askers[i], none ? std::nullopt : out->leases[i].leased, none && !over);
  }
}

// Typically a lease whose reply was lost (the connection closed meanwhile): the worker never trained
// it. In the timeline as any requeue (result.json counted it, the events did not).
void task_dispenser::lease_not_received(const std::string& holder, std::uint64_t requeued) {
  spdlog::info("dispenser: {} asked for a task while holding {} it no longer knows of: back to TODO", holder,
               requeued);
  timeline_.requeue(holder, requeued, "lease not received");
}

void task_dispenser::ack_report(const message& m, const storage::report_request& r,
                                const expected<storage::task_state>& state) {
  if (auto g = last_grant_.find(r.holder); g != last_grant_.end() && g->second.first == r.id)
    last_grant_.erase(g);  // reported: nothing to renew
  std::string refused;
  if (!state) {
    refused = state.err().to_string();
    spdlog::warn("dispenser: report of task {} by {} refused: {}", r.id, r.holder, refused);
  } else if (*state == storage::task_state::failed) {
    spdlog::error("dispenser: task {} quarantined after repeated failures; last error: {}", r.id,
                  r.error_text);
    timeline_.quarantine(r.id, r.error_text);
    last_failure_ = "task " + std::to_string(r.id) + ": " + r.error_text;
    count_quarantine(true);
  } else if (*state == storage::task_state::done) {
    count_quarantine(false);
  } else if (r.left && !r.error_text.empty()) {  // given back by a holder that goes on: its rows lost
    spdlog::info("dispenser: {} gave task {} back: {}", r.holder, r.id, r.error_text);
    timeline_.requeue(r.holder, 1, "task " + std::to_string(r.id) + " given back: " + r.error_text);
  } else if (r.left) {  // handed back by a holder that leaves, its trained rows kept
    spdlog::info("dispenser: {} left holding task {}: {} of its rows trained, the rest back to TODO",
                 r.holder, r.id, r.trained);
    timeline_.requeue(r.holder, 1,
                      "holder left: task " + std::to_string(r.id) + " with " + std::to_string(r.trained) +
                          " rows trained kept");
  } else if (r.failed) {  // back to TODO, to be tried again: in the timeline (it left no trace)
    const std::string kept =
        r.trained > 0 ? " from its failing step, " + std::to_string(r.trained) + " rows trained kept" : "";
    spdlog::warn("dispenser: task {} failed on {} (tried again{}): {}", r.id, r.holder, kept, r.error_text);
    timeline_.requeue(r.holder, 1,
                      "task " + std::to_string(r.id) + " failed (tried again" + kept + "): " + r.error_text);
  }
  outbound o = reply_to(m, outbound::small_words);
  o.body().initTaskReportAck().setError(refused);
  (void)node_.reply(m, std::move(o), "dispenser");
}

void task_dispenser::reply_lease(const message& req, const std::optional<storage::task>& t, bool none) {
  const auto& job = node_.spec().job;
  outbound o = reply_to(req, outbound::small_words);
  auto lease = o.body().initTaskLease();
  lease.setLeaseMs(static_cast<std::uint64_t>(job.lease_timeout.count()));
  if (none) {
    lease.setNone();
  } else if (t) {
    auto b = lease.initTask();
    b.setId(t->id);
    b.setFirstRecord(t->first);
    b.setRecordCount(t->count);
    b.setAttempt(t->attempt);
    b.setEpoch(t->epoch);
    b.setTrained(t->trained);
    b.setOrderAttempt(t->order_attempt);
    b.setTrainedStep(t->trained > 0 ? t->step : 0);
    data_epoch_ = t->epoch;
  } else {
    auto c = journal_->counts();
    if (!c) throw std::runtime_error(c.err().to_string());
    if (c->doing == 0 && (c->todo == 0 || !gave_up_.empty()))
      lease.setFinished();
    else
      lease.setNone();
  }
  if (auto s = node_.reply(req, std::move(o), "dispenser"); !s)
    spdlog::warn("dispenser: lease reply to {}: {}", req.from_node().to_string(), s.err().to_string());
}

// A worker still works on these leases: each one it still holds runs for another lease timeout.
// A lease it no longer holds (re-queued, handed to someone else) is left alone: its report will be
// refused as stale.
// The lease granted to the holder last is renewed with them: its reply may still be on its way, or
// unread by a worker busy in a long step (a user module's 50 s forward), whose renewals (sent by a
// thread of its own during the step) cannot name it; it expired and its rows were trained twice. A
// lease the worker never received is requeued by its next request (it names what it holds).
void task_dispenser::renew_leases(const message& m) {
  std::string holder = m.from_node().to_string();
  std::int64_t deadline = node_.clock().wall_ms() + node_.spec().job.lease_timeout.count();
  auto renew = [&](std::uint64_t id, std::uint32_t attempt) {
    if (auto r = journal_->renew(id, holder, attempt, deadline); !r && !disk_trouble(r.err()))
      spdlog::debug("dispenser: renewal of task {} by {}: {}", id, holder, r.err().to_string());
  };
  const auto last = last_grant_.find(holder);
  bool named_last = last == last_grant_.end();
  for (auto l : m.body().getTaskRenew().getLeases()) {
    renew(l.getTaskId(), l.getAttempt());
    named_last = named_last || (l.getTaskId() == last->second.first && l.getAttempt() == last->second.second);
  }
  if (!named_last) renew(last->second.first, last->second.second);
}

std::optional<wire::task_counts> task_dispenser::counts() const {
  auto c = journal_->counts();
  if (!c) return std::nullopt;
  wire::task_counts out;
  out.todo = c->todo;
  out.doing = c->doing;
  out.done = c->done;
  out.failed = c->failed;
  out.requeued = c->requeued;
  out.data_epoch = data_epoch_;
  out.data_epochs = journal_->options().epochs;
  out.records_done = c->records_done;
  out.fault = fault_;  // the journal's; the master adds the faults it told this dispenser of
  if (c->failed > 0 && last_failure_.empty()) {  // quarantined before this dispenser started
    if (auto failed = journal_->list(storage::task_state::failed); failed && !failed->empty())
      last_failure_ = "task " + std::to_string(failed->back().id) + ": " + failed->back().last_error;
  }
  out.last_failure = last_failure_;
  out.gave_up = gave_up_;
  return out;
}

void task_dispenser::count_quarantine(bool quarantined) {
  if (!quarantined) {
    quarantined_in_a_row_ = 0;
    return;
  }
  const auto limit = node_.spec().job.max_quarantined_in_a_row;
  if (++quarantined_in_a_row_ < limit || limit == 0 || !gave_up_.empty()) return;
  auto c = journal_->counts();
  const std::uint64_t left = c ? c->todo : 0;
  gave_up_ =
      std::to_string(quarantined_in_a_row_) +
      " tasks in a row were quarantined, none done between them (job." +
      "max_quarantined_in_a_row): the job gave up on its " + std::to_string(left) +
      " task(s) left, which stay to do (troupe run --resume trains them, and tries the quarantined ones "
      "again, once the cause is mended); the last, " +
      last_failure_;
  spdlog::error("dispenser: {}", gave_up_);
}

namespace {

// The dispenser's own message: lease the requests collected so far in one commit.
using flush_atom = caf::atom_constant<caf::atom("flush")>;

struct dispenser_state {
  std::optional<task_dispenser> core;
  // TaskRequests and TaskReports waiting for the next batch; whether a flush message is queued.
  std::vector<message> pending;
  bool flush_queued = false;
  static inline const char* name = "dispenser";
};
using dispenser_actor = caf::stateful_actor<dispenser_state>;

// The task messages collected since the last flush, in one journal commit.
void flush(dispenser_actor* self) {
  auto& st = self->state;
  st.flush_queued = false;  // a flush message still in the mailbox finds nothing pending
  if (st.pending.empty()) return;
  auto batch = std::move(st.pending);
  st.pending.clear();
  wire::guarded("dispenser", [&] { st.core->on_messages(batch); });
}

// The rows of a dead holder's task that outlived it, as the master sends them ({task, attempt,
// trained, step}; empty: none).
std::optional<storage::held_rows> held_rows_of(const std::vector<std::uint64_t>& rows) {
  if (rows.size() != 4) return std::nullopt;
  return storage::held_rows{rows[0], static_cast<std::uint32_t>(rows[1]), rows[2], rows[3]};
}

// A task request or report joins the next batch, behind the messages already in the mailbox (the
// flush writes all of them in one commit); any other message is taken at once.
void take(dispenser_actor* self, const message& m) {
  auto& st = self->state;
  using B = schema::Envelope::Body;
  if (m.kind() != B::TASK_REQUEST && m.kind() != B::TASK_REPORT) {
    wire::guarded("dispenser", [&] { st.core->on_message(m); });
    return;
  }
  st.pending.push_back(m);
  if (!st.flush_queued) self->send(self, flush_atom::value);
  st.flush_queued = true;
}

caf::behavior dispenser(dispenser_actor* self, node_context* node, data_paths data) {
  self->state.core.emplace(*node, data);
  self->send(self, tick_atom::value);
  return {
      [=](const message& m) { take(self, m); },
      [=](flush_atom) { flush(self); },
      // Reports and requests that came before a requeue are applied before it, as they arrived.
      [=](requeue_atom, const std::string& holder, const std::vector<std::uint64_t>& rows) {
        flush(self);
        self->state.core->requeue_holder(holder, held_rows_of(rows));
      },
      // {reopened, forgotten}, "" and what went back in words, or {}, why not and "".
      [=](restored_atom, std::uint64_t step) -> caf::message {
        flush(self);
        auto r = self->state.core->ring_restored(step);
        if (!r) return caf::make_message(std::vector<std::uint64_t>{}, r.err().to_string(), std::string());
        return caf::make_message(std::vector<std::uint64_t>{r->done, r->trained}, std::string(), r->said);
      },
      [=](requeue_atom, const std::vector<std::string>& alive_holders) {
        flush(self);
        self->state.core->requeue_absent(alive_holders);
      },
      [=](tick_atom) {
        flush(self);
        self->state.core->requeue_expired();
        self->delayed_send(self, std::chrono::milliseconds(250), tick_atom::value);
      },
      [=](fault_atom, const std::string& fault) { self->state.core->set_external_fault(fault); },
      [=](counts_atom) -> caf::result<wire::task_counts> {
        auto c = self->state.core->counts();
        if (!c) return caf::make_error(caf::sec::runtime_error);
        return *c;
      },
  };
}

}  // namespace

caf::actor spawn_dispenser(caf::actor_system& sys, node_context& node, data_paths data) {
  return sys.spawn<caf::detached>(dispenser, &node, std::move(data));
}

}  // namespace troupe::actors
