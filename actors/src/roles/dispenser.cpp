// The dispenser: hands out task leases from the task journal, takes reports, and moves the tasks
// of dead holders and expired leases back to TODO. One per job, on the master node; the journal's
// single writer (LMDB allows one), so it runs detached.
#include <caf/all.hpp>

#include <set>
#include <spdlog/spdlog.h>

#include "../caf_types.hpp"
#include "../rpc.hpp"
#include "roles.hpp"
#include "troupe/core/clock.hpp"
#include "troupe/storage/record_store.hpp"
#include "troupe/storage/task_journal.hpp"

namespace troupe::actors {

namespace {

struct dispenser_state {
  node_runtime* rt = nullptr;
  std::optional<storage::task_journal> journal;
  std::uint64_t requeued = 0;
  std::uint32_t data_epoch = 0;
  static inline const char* name = "dispenser";
};
using dispenser_actor = caf::stateful_actor<dispenser_state>;

void send_lease(dispenser_state& st, const message& req) {
  const auto& job = st.rt->spec().job;
  std::string holder = req.from_node().to_string();
  std::int64_t deadline = clock::system().wall_ms() + job.lease_timeout.count();
  // A worker names the tasks it holds and keeps (the one it trains, one leased ahead, finished
  // ones whose report is on its way); any other lease of it was lost on its side (a restarted
  // worker actor, a reply that never arrived) and goes back to TODO now.
  std::vector<std::uint64_t> keep;
  for (auto id : req.body().getTaskRequest().getHolding()) keep.push_back(id);
  if (auto n = st.journal->requeue_holder_except(holder, keep); n && *n > 0) {
    st.requeued += *n;
    spdlog::info("dispenser: {} asked for a task while holding {} it no longer knows of: back to TODO", holder, *n);
  }
  outbound o = reply_to(req);
  auto lease = o.body().initTaskLease();
  lease.setLeaseMs(static_cast<std::uint64_t>(job.lease_timeout.count()));
  auto t = st.journal->lease(holder, deadline);
  if (!t) throw std::runtime_error(t.err().to_string());  // the journal is broken: restart
  if (*t) {
    auto b = lease.initTask();
    b.setId((*t)->id);
    b.setFirstRecord((*t)->first);
    b.setRecordCount((*t)->count);
    b.setAttempt((*t)->attempt);
    st.data_epoch = (*t)->epoch;
  } else {
    auto c = st.journal->counts();
    if (!c) throw std::runtime_error(c.err().to_string());
    if (c->todo == 0 && c->doing == 0) lease.setFinished();
    else lease.setNone();
  }
  if (auto s = send_reply(st.rt->net(), req, std::move(o), "dispenser"); !s)
    spdlog::warn("dispenser: lease reply to {}: {}", holder, s.err().to_string());
}

void take_report(dispenser_state& st, const message& m) {
  auto r = m.body().getTaskReport();
  std::string holder = m.from_node().to_string();
  std::string refused;
  if (r.which() == schema::TaskReport::DONE) {
    auto c = st.journal->complete(r.getTaskId(), holder, r.getAttempt());
    if (!c) refused = c.err().to_string();
  } else {
    auto f = st.journal->fail(r.getTaskId(), holder, r.getAttempt(), r.getFailed().cStr());
    if (!f) refused = f.err().to_string();
    else if (*f == storage::task_state::failed)
      spdlog::error("dispenser: task {} quarantined after repeated failures; last error: {}", r.getTaskId(),
                    r.getFailed().cStr());
  }
  if (!refused.empty()) spdlog::warn("dispenser: report of task {} by {} refused: {}", r.getTaskId(), holder, refused);
  outbound o = reply_to(m);
  o.body().initTaskReportAck().setError(refused);
  (void)send_reply(st.rt->net(), m, std::move(o), "dispenser");
}

// A worker still works on these leases: each one it still holds runs for another lease timeout.
// A lease it no longer holds (re-queued, handed to someone else) is left alone: its report will be
// refused as stale.
void renew_leases(dispenser_state& st, const message& m) {
  std::string holder = m.from_node().to_string();
  std::int64_t deadline = clock::system().wall_ms() + st.rt->spec().job.lease_timeout.count();
  for (auto l : m.body().getTaskRenew().getLeases())
    if (auto r = st.journal->renew(l.getTaskId(), holder, l.getAttempt(), deadline); !r)
      spdlog::debug("dispenser: renewal of task {} by {}: {}", l.getTaskId(), holder, r.err().to_string());
}

void open_journal(dispenser_state& st, const data_paths& data) {
  auto store = storage::record_store::open(data.train_dir);
  if (!store) throw std::runtime_error(store.err().to_string());
  const auto& spec = st.rt->spec();
  storage::journal_options o;
  o.dataset = data.train_dir;
  o.record_count = store->count();
  o.records_per_task = spec.job.records_per_task;
  o.epochs = static_cast<std::uint32_t>(spec.nn.train.epochs);
  o.shuffle_seed = spec.nn.train.seed;
  o.shuffle = spec.nn.train.shuffle;
  o.max_failures = spec.job.max_task_failures;
  auto j = storage::task_journal::open_or_create(st.rt->who().job_dir + "/journal", o);
  if (!j) throw std::runtime_error(j.err().to_string());
  st.journal.emplace(std::move(*j));
  auto c = st.journal->counts();
  if (c)
    spdlog::info("dispenser: journal has {} tasks: {} todo, {} doing, {} done, {} failed", c->total(), c->todo,
                 c->doing, c->done, c->failed);
}

caf::behavior dispenser(dispenser_actor* self, node_runtime* rt, data_paths data) {
  self->state.rt = rt;
  open_journal(self->state, data);
  self->send(self, tick_atom::value);
  return {
      [=](const message& m) {
        using B = schema::Envelope::Body;
        guarded("dispenser", [&] {
          if (m.kind() == B::TASK_REQUEST) send_lease(self->state, m);
          else if (m.kind() == B::TASK_REPORT) take_report(self->state, m);
          else if (m.kind() == B::TASK_RENEW) renew_leases(self->state, m);
        });
      },
      [=](requeue_atom, const std::string& holder) {
        auto n = self->state.journal->requeue_holder(holder);
        if (n && *n > 0) {
          self->state.requeued += *n;
          spdlog::info("dispenser: {} task(s) of {} back to TODO", *n, holder);
        }
      },
      [=](requeue_atom, const std::vector<std::string>& alive_holders) {
        auto doing = self->state.journal->list(storage::task_state::doing);
        if (!doing) return;
        std::set<std::string> gone;
        for (const auto& t : *doing)
          if (std::find(alive_holders.begin(), alive_holders.end(), t.holder) == alive_holders.end()) gone.insert(t.holder);
        for (const auto& h : gone) {
          auto n = self->state.journal->requeue_holder(h);
          if (n && *n > 0) {
            self->state.requeued += *n;
            spdlog::info("dispenser: {} task(s) of {} (not a member) back to TODO", *n, h);
          }
        }
      },
      [=](tick_atom) {
        auto n = self->state.journal->requeue_expired(clock::system().wall_ms());
        if (n && *n > 0) {
          self->state.requeued += *n;
          spdlog::info("dispenser: {} expired lease(s) back to TODO", *n);
        }
        self->delayed_send(self, std::chrono::milliseconds(250), tick_atom::value);
      },
      [=](counts_atom) -> caf::result<task_counts> {
        auto c = self->state.journal->counts();
        if (!c) return caf::make_error(caf::sec::runtime_error);
        task_counts out{c->todo, c->doing, c->done, c->failed, self->state.requeued, self->state.data_epoch,
                        self->state.journal->options().epochs};
        return out;
      },
  };
}

}  // namespace

caf::actor spawn_dispenser(caf::actor_system& sys, node_runtime* rt, data_paths data) {
  return sys.spawn<caf::detached>(dispenser, rt, std::move(data));
}

}  // namespace troupe::actors
