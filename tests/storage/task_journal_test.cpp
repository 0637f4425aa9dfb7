#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <set>
#include <thread>

#include "journal_ops.hpp"
#include "task_journal_codec.hpp"
#include "test_dir.hpp"
#include "troupe/core/clock.hpp"
#include "troupe/storage/task_journal.hpp"

namespace troupe::storage {
namespace {

using namespace testing;

journal_options opts(std::uint32_t epochs = 2) {
  journal_options o;
  o.dataset = "ds";
  o.record_count = 1005;
  o.records_per_task = 100;
  o.epochs = epochs;
  o.shuffle_seed = 42;
  o.max_failures = 3;
  return o;
}

TEST(TaskJournal, CreatesShuffledTasksCoveringEveryRecordPerEpoch) {
  temp_dir d;
  auto j = task_journal::open_or_create(d.str(), opts());
  ASSERT_TRUE(j) << j.err().to_string();
  EXPECT_EQ(j->tasks_per_epoch(), 11u);
  auto c = j->counts();
  ASSERT_TRUE(c);
  EXPECT_EQ(c->todo, 22u);
  auto all = j->list(task_state::todo);
  ASSERT_TRUE(all);
  std::vector<std::uint64_t> order[2];
  for (std::uint32_t e = 0; e < 2; ++e) {
    std::uint64_t covered = 0;
    std::set<std::uint64_t> firsts;
    for (auto& t : *all)
      if (t.epoch == e) {
        covered += t.count;
        firsts.insert(t.first);
        order[e].push_back(t.first);
      }
    EXPECT_EQ(covered, 1005u);
    EXPECT_EQ(firsts.size(), 11u);
  }
  EXPECT_NE(order[0], order[1]) << "each epoch has its own order";
  std::vector<std::uint64_t> sorted = order[0];
  std::sort(sorted.begin(), sorted.end());
  EXPECT_NE(order[0], sorted) << "shuffled";
}

TEST(TaskJournal, SameSeedSameOrder) {
  temp_dir a, b;
  auto ja = task_journal::open_or_create(a.str(), opts());
  auto jb = task_journal::open_or_create(b.str(), opts());
  ASSERT_TRUE(ja && jb);
  auto la = ja->list(task_state::todo), lb = jb->list(task_state::todo);
  ASSERT_TRUE(la && lb);
  for (std::size_t i = 0; i < la->size(); ++i) EXPECT_EQ((*la)[i].first, (*lb)[i].first);
}

TEST(TaskJournal, LeaseCompleteAndEpochOrder) {
  temp_dir d;
  auto j = task_journal::open_or_create(d.str(), opts());
  ASSERT_TRUE(j);
  std::vector<task> leased;
  for (int i = 0; i < 11; ++i) {
    auto t = lease(*j, "w1", 1000);
    ASSERT_TRUE(t && *t);
    EXPECT_EQ((*t)->epoch, 0u);
    EXPECT_EQ((*t)->attempt, 1u);
    leased.push_back(**t);
  }
  // Epoch 0 has no todo left: epoch 1 starts while epoch 0 tasks are still doing.
  auto next = lease(*j, "w2", 1000);
  ASSERT_TRUE(next && *next);
  EXPECT_EQ((*next)->epoch, 1u);
  for (auto& t : leased) ASSERT_TRUE(complete(*j, t.id, "w1", t.attempt));
  auto c = j->counts();
  ASSERT_TRUE(c);
  EXPECT_EQ(c->done, 11u);
  EXPECT_EQ(c->doing, 1u);
  EXPECT_EQ(c->todo, 10u);
}

TEST(TaskJournal, RequeuedTaskGoesOutBeforeTheNextEpoch) {
  temp_dir d;
  auto j = task_journal::open_or_create(d.str(), opts());
  ASSERT_TRUE(j);
  std::optional<task> first;
  for (int i = 0; i < 11; ++i) {
    auto t = lease(*j, i == 0 ? "dies" : "w", 1000);
    ASSERT_TRUE(t && *t);
    if (i == 0) first = **t;
  }
  auto n = j->requeue_holder("dies");
  ASSERT_TRUE(n);
  EXPECT_EQ(*n, 1u);
  auto again = lease(*j, "w", 1000);
  ASSERT_TRUE(again && *again);
  EXPECT_EQ((*again)->id, first->id);
  EXPECT_EQ((*again)->attempt, 2u);
}

// A dead holder's task goes back with the rows a surviving model holds (the master's surviving_rows):
// those of its own lease only, fewer than all and more than it came with; the next holder starts
// after them, in the same order; its other leases go back whole.
TEST(TaskJournal, ADeadHoldersTaskKeepsTheRowsThatOutlivedIt) {
  temp_dir d;
  auto j = task_journal::open_or_create(d.str(), opts(1));
  ASSERT_TRUE(j);
  auto a = lease(*j, "dies", 1000), b = lease(*j, "dies", 1000);
  ASSERT_TRUE(a && *a && b && *b);
  const task t = **a;
  bool kept = true;
  // Another attempt's rows, or all of them: nothing kept.
  ASSERT_TRUE(j->requeue_holder("dies", held_rows{t.id, t.attempt + 1, 10, 5}, &kept));
  EXPECT_FALSE(kept);
  EXPECT_EQ(get(*j, t.id)->trained, 0u);
  for (std::uint64_t rows : {t.count, std::uint64_t{40}}) {
    auto again = lease(*j, "dies", 1000);
    ASSERT_TRUE(again && *again && (*again)->id == t.id);
    ASSERT_TRUE(lease(*j, "dies", 1000));  // b again, so that both go back
    auto n = j->requeue_holder("dies", held_rows{t.id, (*again)->attempt, rows, 17}, &kept);
    ASSERT_TRUE(n);
    EXPECT_EQ(*n, 2u);
    EXPECT_EQ(kept, rows < t.count) << rows;
  }
  auto back = get(*j, t.id);
  EXPECT_EQ(back->state, task_state::todo);
  EXPECT_EQ(back->trained, 40u);
  EXPECT_EQ(back->step, 17u);
  EXPECT_EQ(get(*j, (*b)->id)->trained, 0u) << "its other lease goes back whole";
  auto next = lease(*j, "w", 1000);
  ASSERT_TRUE(next && *next && (*next)->id == t.id);
  EXPECT_EQ((*next)->trained, 40u);
  EXPECT_EQ((*next)->order_attempt, back->order_attempt) << "the order its rows were trained in";
  EXPECT_EQ(j->counts()->requeued, 6u);
}

// A lease request that keeps nothing: every task its holder still holds goes back to todo (and, the
// lowest todo id, out again to it), another holder's lease is untouched.
TEST(TaskJournal, LeaseKeepingNothingRequeuesEverythingItsHolderHolds) {
  temp_dir d;
  auto j = task_journal::open_or_create(d.str(), opts(1));
  ASSERT_TRUE(j);
  auto a = lease(*j, "w", 1000), b = lease(*j, "w", 1000);
  auto other = lease(*j, "v", 1000);
  ASSERT_TRUE(a && *a && b && *b && other && *other);
  EXPECT_TRUE(complete(*j, (*a)->id, "w", (*a)->attempt));
  auto r = lease(*j, lease_request{"w", 2000, {}});
  ASSERT_TRUE(r) << r.err().to_string();
  EXPECT_EQ(r->requeued, 1u);
  ASSERT_TRUE(r->leased);
  EXPECT_EQ(r->leased->id, (*b)->id) << "the requeued task is the lowest todo id";
  EXPECT_EQ(r->leased->attempt, 2u);
  EXPECT_EQ(get(*j, (*a)->id)->state, task_state::done);
  EXPECT_EQ(get(*j, (*other)->id)->state, task_state::doing);  // another holder's lease is untouched
  EXPECT_EQ(*held_by(*j, "w"), std::vector<std::uint64_t>{(*b)->id});
  EXPECT_EQ(j->counts()->requeued, 1u);
}

// The leases of every holder not named alive go back to todo in one write, counted per holder.
TEST(TaskJournal, RequeueHoldersExceptTheAliveOnesInOneWrite) {
  temp_dir d;
  auto j = task_journal::open_or_create(d.str(), opts(1));
  ASSERT_TRUE(j);
  auto a = lease(*j, "w", 1000), b = lease(*j, "w", 1000), c = lease(*j, "v", 1000), e = lease(*j, "u", 1000);
  ASSERT_TRUE(a && *a && b && *b && c && *c && e && *e);
  auto before = j->write_transactions();
  auto moved = j->requeue_holders_except({"u"});
  ASSERT_TRUE(moved) << moved.err().to_string();
  EXPECT_EQ(j->write_transactions() - before, 1u);
  using held = std::pair<std::string, std::uint64_t>;
  EXPECT_EQ(*moved, (std::vector<held>{{"v", 1}, {"w", 2}}));
  EXPECT_EQ(get(*j, (*a)->id)->state, task_state::todo);
  EXPECT_EQ(get(*j, (*e)->id)->state, task_state::doing);
  EXPECT_EQ(j->counts()->requeued, 3u);
  auto all = j->requeue_holders_except({});  // the job ended: every lease
  ASSERT_TRUE(all);
  EXPECT_EQ(*all, (std::vector<held>{{"u", 1}}));
  before = j->write_transactions();
  EXPECT_TRUE(j->requeue_holders_except({})->empty());
  EXPECT_EQ(j->write_transactions(), before) << "nothing held: nothing written";
}

// A lease request that names the tasks its holder keeps: the others go back to todo and the next
// task is leased, in one write transaction (one commit), the requeued one first.
TEST(TaskJournal, LeaseWithKeepIsOneWriteTransaction) {
  temp_dir d;
  auto j = task_journal::open_or_create(d.str(), opts(1));
  ASSERT_TRUE(j);
  auto a = lease(*j, "w", 1000), b = lease(*j, "w", 1000), lost = lease(*j, "w", 1000);
  auto other = lease(*j, "v", 1000);
  ASSERT_TRUE(a && *a && b && *b && lost && *lost && other && *other);
  auto before = j->write_transactions();
  auto r = lease(*j, lease_request{"w", 2000, {(*a)->id, (*b)->id}});
  ASSERT_TRUE(r) << r.err().to_string();
  EXPECT_EQ(j->write_transactions() - before, 1u);
  EXPECT_EQ(r->requeued, 1u);
  ASSERT_TRUE(r->leased);
  EXPECT_EQ(r->leased->id, (*lost)->id) << "the requeued task is the lowest todo id";
  EXPECT_EQ(r->leased->attempt, 2u);
  EXPECT_EQ(r->leased->deadline_ms, 2000);
  EXPECT_EQ(get(*j, (*other)->id)->state, task_state::doing);
  EXPECT_EQ(j->counts()->requeued, 1u);
  auto held = held_by(*j, "w");
  ASSERT_TRUE(held);
  EXPECT_EQ(held->size(), 3u);
}

TEST(TaskJournal, LeaseBatchGrantsInOrderInOneTransaction) {
  temp_dir d;
  auto j = task_journal::open_or_create(d.str(), opts(1));
  ASSERT_TRUE(j);
  std::vector<lease_request> rs;
  for (int i = 0; i < 13; ++i) {
    std::string holder = "w";  // appended: "w" + to_string(i) trips GCC 12's -Wrestrict
    holder += std::to_string(i % 5);
    rs.push_back({holder, 1000 + i, {}});
  }
  auto before = j->write_transactions();
  auto out = lease_batch(*j, rs);
  ASSERT_TRUE(out) << out.err().to_string();
  EXPECT_EQ(j->write_transactions() - before, 1u);
  ASSERT_EQ(out->size(), 13u);
  // Requests run in order: each keeps nothing, so a holder's lease from earlier in the batch goes
  // back to todo and (the lowest todo id) out again to the same holder.
  for (int i = 0; i < 13; ++i) {
    ASSERT_TRUE((*out)[i].leased) << i;
    EXPECT_EQ((*out)[i].leased->id, static_cast<std::uint64_t>(i % 5)) << i;
    EXPECT_EQ((*out)[i].requeued, i < 5 ? 0u : 1u) << i;
  }
  EXPECT_EQ(j->counts()->doing, 5u) << "one task per holder: each request re-queued the holder's last";
  for (auto h : {"w0", "w1", "w2", "w3", "w4"}) EXPECT_EQ(held_by(*j, h)->size(), 1u);
}

// Reports and leases of one batch in one write transaction; a refused report (stale, unknown task)
// is refused alone and the rest commits.
TEST(TaskJournal, ApplyCommitsReportsThenLeasesAndRefusesBadReportsAlone) {
  temp_dir d;
  auto j = task_journal::open_or_create(d.str(), opts(1));
  ASSERT_TRUE(j);
  auto a = **lease(*j, "w", 1000), b = **lease(*j, "v", 1000);
  journal_batch jb;
  jb.reports.push_back({a.id, "w", a.attempt, false, {}});
  jb.reports.push_back({b.id, "w", b.attempt, false, {}});  // not w's lease
  jb.reports.push_back({999, "v", 1, false, {}});           // no such task
  jb.reports.push_back({b.id, "v", b.attempt, true, "disk read"});
  jb.leases.push_back({"w", 2000, {}});
  auto before = j->write_transactions();
  auto out = j->apply(jb);
  ASSERT_TRUE(out) << out.err().to_string();
  EXPECT_EQ(j->write_transactions() - before, 1u);
  ASSERT_EQ(out->reports.size(), 4u);
  ASSERT_TRUE(out->reports[0]);
  EXPECT_EQ(*out->reports[0], task_state::done);
  ASSERT_FALSE(out->reports[1]);
  EXPECT_TRUE(out->reports[1].err() == storage_errc::stale_lease) << out->reports[1].err().to_string();
  ASSERT_FALSE(out->reports[2]);
  EXPECT_TRUE(out->reports[2].err() == storage_errc::not_found) << out->reports[2].err().to_string();
  ASSERT_TRUE(out->reports[3]);
  EXPECT_EQ(*out->reports[3], task_state::todo);
  ASSERT_EQ(out->leases.size(), 1u);
  ASSERT_TRUE(out->leases[0].leased);
  EXPECT_EQ(out->leases[0].leased->id, b.id) << "the failed task went back first: lowest todo id";
  EXPECT_EQ(get(*j, b.id)->last_error, "disk read");
  auto c = j->counts();
  EXPECT_EQ(c->done, 1u);
  EXPECT_EQ(c->doing, 1u);
  EXPECT_EQ(c->records_done, a.count);
}

TEST(TaskJournal, HolderIndexFollowsEveryTransitionAndReopen) {
  temp_dir d;
  {
    auto j = task_journal::open_or_create(d.str(), opts(1));
    ASSERT_TRUE(j);
    std::vector<task> t;
    for (int i = 0; i < 5; ++i) t.push_back(**lease(*j, i < 4 ? "w" : "v", 1000));
    ASSERT_TRUE(j->renew(t[0].id, "w", t[0].attempt, 5000));
    ASSERT_TRUE(complete(*j, t[1].id, "w", t[1].attempt));
    ASSERT_TRUE(fail(*j, t[2].id, "w", t[2].attempt, "boom"));
    EXPECT_EQ(*j->requeue_expired(1000), 2u);  // t[3] (w) and t[4] (v); t[0] was renewed
    EXPECT_EQ(*held_by(*j, "w"), std::vector<std::uint64_t>{t[0].id});
    EXPECT_TRUE(held_by(*j, "v")->empty());
    // A lease that keeps nothing requeues what the index lists for its holder: nothing of v's.
    auto again = lease(*j, lease_request{"v", 1000, {}});
    ASSERT_TRUE(again && again->leased);
    EXPECT_EQ(again->requeued, 0u);
  }
  auto j = task_journal::open_or_create(d.str(), opts(1));
  ASSERT_TRUE(j);
  EXPECT_EQ(held_by(*j, "w")->size(), 1u);
  EXPECT_EQ(held_by(*j, "v")->size(), 1u);
  // requeue_holder reads the index: one lease each, as the tasks say.
  EXPECT_EQ(*j->requeue_holder("w"), 1u);
  EXPECT_TRUE(held_by(*j, "w")->empty());
  EXPECT_EQ(j->counts()->doing, 1u);
  EXPECT_EQ(*j->requeue_holder("v"), 1u);
  EXPECT_EQ(j->counts()->doing, 0u);
}

// A journal written before the holder index: open() reads it and refuses leases with a clear
// error; open_or_create builds the index from the DOING tasks.
TEST(TaskJournal, JournalWithoutHolderIndexIsIndexedByOpenOrCreate) {
  temp_dir d;
  std::uint64_t held = 0;
  {
    auto j = task_journal::open_or_create(d.str(), opts(1));
    ASSERT_TRUE(j);
    held = (**lease(*j, "w", 1000)).id;
    ASSERT_TRUE(lease(*j, "w", 1000) && lease(*j, "v", 1000));
    ASSERT_TRUE(complete(*j, held, "w", 1));
    held = (*held_by(*j, "w"))[0];
    auto env = lmdb_env::open(d.str());
    ASSERT_TRUE(env);
    auto idx = (*env)->open_db("by_holder"), meta = (*env)->open_db("journal_meta");
    ASSERT_TRUE(idx && meta);
    ASSERT_TRUE((*env)->write([&](write_txn& w) -> expected<void> {
      if (auto c = w.clear(*idx); !c) return c;
      auto r = w.del(*meta, "holder_index");
      if (!r) return r.err();
      return {};
    }));
  }
  {
    auto j = task_journal::open(d.str());
    ASSERT_TRUE(j) << j.err().to_string();
    EXPECT_EQ(j->counts()->doing, 2u);
    auto l = lease(*j, "x", 1000);
    ASSERT_FALSE(l);
    EXPECT_NE(l.err().to_string().find("holder index"), std::string::npos) << l.err().to_string();
  }
  auto j = task_journal::open_or_create(d.str(), opts(1));
  ASSERT_TRUE(j) << j.err().to_string();
  EXPECT_EQ(*held_by(*j, "w"), std::vector<std::uint64_t>{held});
  EXPECT_EQ(held_by(*j, "v")->size(), 1u);
  // The built index (what requeue_holder reads) has both holders' leases.
  EXPECT_EQ(*j->requeue_holder("v"), 1u);
  EXPECT_EQ(j->counts()->doing, 1u);
  EXPECT_EQ(*j->requeue_holder("w"), 1u);
  EXPECT_EQ(j->counts()->doing, 0u);
}

TEST(TaskJournal, AHolderNameTheIndexCannotKeyIsRefused) {
  temp_dir d;
  auto j = task_journal::open_or_create(d.str(), opts(1));
  ASSERT_TRUE(j);
  auto l = lease(*j, std::string(600, 'w'), 1000);
  ASSERT_FALSE(l);
  EXPECT_NE(l.err().to_string().find("holder name"), std::string::npos) << l.err().to_string();
  EXPECT_EQ(j->counts()->todo, 11u);
}

TEST(TaskJournal, StaleCompletionIsRejected) {
  temp_dir d;
  auto j = task_journal::open_or_create(d.str(), opts(1));
  ASSERT_TRUE(j);
  auto t = lease(*j, "slow", 100);
  ASSERT_TRUE(t && *t);
  ASSERT_TRUE(j->requeue_expired(100));
  auto t2 = lease(*j, "fast", 500);
  ASSERT_TRUE(t2 && *t2);
  ASSERT_EQ((*t2)->id, (*t)->id);
  auto stale = complete(*j, (*t)->id, "slow", (*t)->attempt);
  ASSERT_FALSE(stale);
  EXPECT_EQ(stale.err(), storage_errc::stale_lease);
  EXPECT_NE(stale.err().to_string().find("'fast'"), std::string::npos) << stale.err().to_string();
  // Same holder, old attempt: also stale.
  auto t3 = lease(*j, "x", 500);
  ASSERT_TRUE(j->requeue_holder("x"));
  auto t4 = lease(*j, "x", 500);
  ASSERT_TRUE(t3 && *t3 && t4 && *t4);
  EXPECT_FALSE(complete(*j, (*t3)->id, "x", (*t3)->attempt));
  EXPECT_TRUE(complete(*j, (*t4)->id, "x", (*t4)->attempt));
  const auto before = j->counts();
  ASSERT_TRUE(before);
  EXPECT_TRUE(complete(*j, (*t2)->id, "fast", (*t2)->attempt));
  // The same lease's DONE again (its acknowledgement was lost): acknowledged, counted once.
  EXPECT_TRUE(complete(*j, (*t2)->id, "fast", (*t2)->attempt)) << "the same report twice";
  EXPECT_EQ(j->counts()->records_done, before->records_done + (*t2)->count);
  EXPECT_EQ(j->counts()->done, before->done + 1);
  // Another holder's or an older attempt's report of a done task is still stale.
  EXPECT_FALSE(complete(*j, (*t2)->id, "slow", (*t2)->attempt));
  EXPECT_FALSE(complete(*j, (*t2)->id, "fast", (*t2)->attempt - 1));
  // A FAILED report of a done task changes nothing either.
  EXPECT_FALSE(fail(*j, (*t2)->id, "fast", (*t2)->attempt, "late"));
}

TEST(TaskJournal, RepeatedFailureQuarantinesWithTheLastError) {
  temp_dir d;
  auto j = task_journal::open_or_create(d.str(), opts(1));
  ASSERT_TRUE(j);
  std::uint64_t id = 0;
  for (int i = 1; i <= 3; ++i) {
    auto t = lease(*j, "w", 1000);
    ASSERT_TRUE(t && *t);
    if (i == 1) id = (*t)->id;
    ASSERT_EQ((*t)->id, id) << "a failed task goes back to the front";
    auto s = fail(*j, id, "w", (*t)->attempt, "bad record " + std::to_string(i));
    ASSERT_TRUE(s);
    EXPECT_EQ(*s, i < 3 ? task_state::todo : task_state::failed);
  }
  auto failed = j->list(task_state::failed);
  ASSERT_TRUE(failed);
  ASSERT_EQ(failed->size(), 1u);
  EXPECT_EQ((*failed)[0].last_error, "bad record 3");
  EXPECT_EQ((*failed)[0].failures, 3u);
  auto t = lease(*j, "w", 1000);
  ASSERT_TRUE(t && *t);
  EXPECT_NE((*t)->id, id);
}

// A resumed job's journal (runner::reopen_tasks): quarantined tasks back to TODO with their failures
// reset, DONE ones back to TODO when what they taught was lost; the leases counter is untouched, and
// a state that cannot be reopened is refused.
TEST(TaskJournal, ReopeningDoneAndFailedTasksPutsThemBackToTodo) {
  temp_dir d;
  auto j = task_journal::open_or_create(d.str(), opts(1));
  ASSERT_TRUE(j);
  auto bad = lease(*j, "w", 1000);
  ASSERT_TRUE(bad && *bad);
  const auto bad_id = (*bad)->id;
  for (std::uint32_t attempt = (*bad)->attempt;;) {
    auto s = fail(*j, bad_id, "w", attempt, "boom");
    ASSERT_TRUE(s);
    if (*s == task_state::failed) break;
    auto again = lease(*j, "w", 1000);
    ASSERT_TRUE(again && *again && (*again)->id == bad_id);
    attempt = (*again)->attempt;
  }
  for (int k = 0; k < 2; ++k) {
    auto t = lease(*j, "w", 1000);
    ASSERT_TRUE(t && *t);
    ASSERT_TRUE(complete(*j, (*t)->id, "w", (*t)->attempt));
  }
  const auto before = j->counts();
  ASSERT_TRUE(before);
  EXPECT_EQ(before->failed, 1u);
  EXPECT_EQ(before->done, 2u);
  auto f = j->reopen(task_state::failed);
  ASSERT_TRUE(f);
  EXPECT_EQ(*f, 1u);
  auto t = get(*j, bad_id);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->state, task_state::todo);
  EXPECT_EQ(t->failures, 0u) << "its attempts anew";
  EXPECT_GT(before->records_done, 0u);
  auto dn = j->reopen(task_state::done);
  ASSERT_TRUE(dn);
  EXPECT_EQ(*dn, 2u);
  auto after = j->counts();
  ASSERT_TRUE(after);
  EXPECT_EQ(after->todo, before->total());
  EXPECT_EQ(after->requeued, before->requeued) << "reopened tasks are not leases given back";
  EXPECT_EQ(after->records_done, 0u) << "records of DONE tasks: none is DONE any more";
  EXPECT_FALSE(j->reopen(task_state::doing));
  // The reopened task is leased again (the lowest id first) and can fail three more times.
  auto again = lease(*j, "w", 1000);
  ASSERT_TRUE(again && *again);
  auto once = fail(*j, (*again)->id, "w", (*again)->attempt, "x");
  ASSERT_TRUE(once);
  EXPECT_EQ(*once, task_state::todo);
}

// A holder that leaves hands its task back with the rows of its order it trained: the task goes back
// to TODO keeping them (a requeue), the next lease says where its order's training stands, a second
// holder's hand-back adds to them in the same order, a lease the holder's departure re-queued first
// keeps them all the same, a stale one changes nothing, all rows trained is done, and a resumed job
// whose model lost them forgets them.
TEST(TaskJournal, AHolderThatLeavesHandsBackTheRowsItTrained) {
  temp_dir d;
  auto j = task_journal::open_or_create(d.str(), opts(1));
  ASSERT_TRUE(j);
  auto hand_back = [&](const task& t, const std::string& holder, std::uint64_t rows) {
    report_request r{t.id, holder, t.attempt, false, {}};
    r.left = true;
    r.trained = rows;
    return report(*j, r);
  };
  auto t = lease(*j, "a", 1000);
  ASSERT_TRUE(t && *t);
  const task first = **t;
  auto s = hand_back(first, "a", 40);
  ASSERT_TRUE(s) << s.err().to_string();
  EXPECT_EQ(*s, task_state::todo);
  EXPECT_EQ(j->counts()->requeued, 1u);
  auto again = lease(*j, "b", 1000);
  ASSERT_TRUE(again && *again);
  ASSERT_EQ((*again)->id, first.id) << "a handed-back task goes out first";
  EXPECT_EQ((*again)->trained, 40u);
  EXPECT_EQ((*again)->order_attempt, first.attempt) << "the order of the lease that trained them";
  EXPECT_NE((*again)->attempt, first.attempt);
  // The first holder's late report is stale; the second's hand-back adds to the same order's rows.
  EXPECT_FALSE(hand_back(first, "a", 90));
  ASSERT_TRUE(hand_back(**again, "b", 70));
  auto kept = get(*j, first.id);
  ASSERT_TRUE(kept);
  EXPECT_EQ(kept->trained, 70u);
  EXPECT_EQ(kept->order_attempt, first.attempt);
  // Re-queued by its holder's departure before the hand-back came: the rows are kept all the same.
  auto third = lease(*j, "c", 1000);
  ASSERT_TRUE(third && *third);
  ASSERT_TRUE(j->requeue_holder("c"));
  ASSERT_TRUE(hand_back(**third, "c", 80));
  EXPECT_EQ(get(*j, first.id)->trained, 80u);
  EXPECT_EQ(get(*j, first.id)->state, task_state::todo);
  // All of its rows trained: done, its records counted.
  auto fourth = lease(*j, "d", 1000);
  ASSERT_TRUE(fourth && *fourth);
  const auto done_before = j->counts()->records_done;
  ASSERT_TRUE(hand_back(**fourth, "d", first.count));
  EXPECT_EQ(get(*j, first.id)->state, task_state::done);
  EXPECT_EQ(j->counts()->records_done, done_before + first.count);
  // A resumed ring job without a checkpoint: done tasks reopened, handed-back rows forgotten, those of
  // a task leased again when the runner died too (the master re-queues it with them).
  auto other = lease(*j, "e", 1000);
  ASSERT_TRUE(other && *other);
  ASSERT_TRUE(hand_back(**other, "e", 10));
  auto held = lease(*j, "f", 1000);
  ASSERT_TRUE(held && *held);
  ASSERT_EQ((*held)->id, (*other)->id);
  auto another = lease(*j, "g", 1000);
  ASSERT_TRUE(another && *another);
  ASSERT_TRUE(hand_back(**another, "g", 20));
  auto forgot = j->forget_trained();
  ASSERT_TRUE(forgot);
  EXPECT_EQ(*forgot, 2u);
  EXPECT_EQ(get(*j, (*other)->id)->trained, 0u) << "a leased one (DOING)";
  EXPECT_EQ(get(*j, (*other)->id)->state, task_state::doing);
  EXPECT_EQ(get(*j, (*another)->id)->trained, 0u);
  ASSERT_TRUE(j->reopen(task_state::done));
  EXPECT_EQ(get(*j, first.id)->trained, 0u) << "a reopened done task is trained whole";
}

// A task whose step failed partway keeps the rows its holder trained before that step (their steps are
// in the model), so the retry starts at the failing step in the same order; a failure report of no
// rows (a worker without such steps, one before this field) keeps the rows kept before; never all
// rows (a failed task is not done); quarantined with them, forgotten with the others' on a resume
// that lost the model.
TEST(TaskJournal, ATaskThatFailsPartwayKeepsTheRowsTrainedBeforeItsFailingStep) {
  temp_dir d;
  auto j = task_journal::open_or_create(d.str(), opts(1));
  ASSERT_TRUE(j);
  auto fail = [&](const task& t, const std::string& holder, std::uint64_t rows) {
    report_request r{t.id, holder, t.attempt, true, "a step failed"};
    r.trained = rows;
    return report(*j, r);
  };
  auto t = lease(*j, "a", 1000);
  ASSERT_TRUE(t && *t);
  const task first = **t;
  auto s = fail(first, "a", 30);
  ASSERT_TRUE(s) << s.err().to_string();
  EXPECT_EQ(*s, task_state::todo);
  auto again = lease(*j, "b", 1000);
  ASSERT_TRUE(again && *again);
  ASSERT_EQ((*again)->id, first.id);
  EXPECT_EQ((*again)->trained, 30u);
  EXPECT_EQ((*again)->order_attempt, first.attempt) << "the order of the lease that trained them";
  ASSERT_TRUE(fail(**again, "b", 0));
  EXPECT_EQ(get(*j, first.id)->trained, 30u) << "no rows reported: those kept before stay";
  auto third = lease(*j, "c", 1000);
  ASSERT_TRUE(third && *third);
  s = fail(**third, "c", first.count);
  ASSERT_TRUE(s);
  EXPECT_EQ(*s, task_state::failed) << "quarantined at max_failures (3)";
  EXPECT_EQ(get(*j, first.id)->trained, first.count - 1) << "never all of them: not done";
  EXPECT_EQ(j->counts()->records_done, 0u);
  auto forgot = j->forget_trained();
  ASSERT_TRUE(forgot);
  EXPECT_EQ(*forgot, 1u);
  EXPECT_EQ(get(*j, first.id)->trained, 0u) << "a quarantined task's too";
}

// A task with no rows trained is written in version 1, which builds from before the hand-back read (they
// took every version 2 value for a damaged journal); one with rows trained in version 2. Both read back.
TEST(TaskJournal, ATaskWithNoRowsTrainedIsWrittenInVersion1) {
  namespace jd = troupe::storage::journal_detail;
  task t;
  t.id = 7;
  t.count = 100;
  t.attempt = 3;
  t.order_attempt = 3;
  t.state = task_state::doing;
  t.holder = "w";
  auto v1 = jd::encode(t);
  EXPECT_EQ(static_cast<int>(v1[0]), 1);
  auto back = jd::decode(v1, "t");
  ASSERT_TRUE(back) << back.err().to_string();
  EXPECT_EQ(back->order_attempt, 3u) << "its lease's own order";
  EXPECT_EQ(back->trained, 0u);
  t.trained = 40;
  t.order_attempt = 2;
  auto v2 = jd::encode(t);
  EXPECT_EQ(static_cast<int>(v2[0]), 2);
  EXPECT_EQ(v2.size(), v1.size() + 12);
  back = jd::decode(v2, "t");
  ASSERT_TRUE(back) << back.err().to_string();
  EXPECT_EQ(back->order_attempt, 2u);
  EXPECT_EQ(back->trained, 40u);
  EXPECT_FALSE(jd::decode(v2.substr(0, v2.size() - 1), "t")) << "a truncated value";
  // With the step that applied its rows: version 3 (a task without one stays in version 2 or 1).
  t.step = 1234;
  auto v3 = jd::encode(t);
  EXPECT_EQ(static_cast<int>(v3[0]), 3);
  EXPECT_EQ(v3.size(), v2.size() + 8);
  back = jd::decode(v3, "t");
  ASSERT_TRUE(back) << back.err().to_string();
  EXPECT_EQ(back->step, 1234u);
  EXPECT_EQ(back->trained, 40u);
  EXPECT_FALSE(jd::decode(v3.substr(0, v3.size() - 1), "t")) << "a truncated value";
}

// A resumed ring job whose latest checkpoint holds the replicas' steps up to S lost what was applied
// after S: the DONE tasks reported at a later step go back to todo whole, the rows kept of a task
// handed back or failed at a later step are forgotten; tasks at or before S, and those of an unknown
// step (0: another strategy, an older worker), stay as they are.
TEST(TaskJournal, AResumeFromACheckpointReopensWhatWasAppliedAfterItsStep) {
  temp_dir d;
  auto j = task_journal::open_or_create(d.str(), opts(1));
  ASSERT_TRUE(j);
  auto leased = [&](const std::string& holder) {
    auto t = lease(*j, holder, 1000);
    EXPECT_TRUE(t && *t);
    return **t;
  };
  auto send = [&](const task& t, const std::string& holder, std::uint64_t step, bool left = false,
                  bool failed = false, std::uint64_t rows = 0) {
    report_request r{t.id, holder, t.attempt, failed, failed ? "a step failed" : ""};
    r.left = left;
    r.trained = rows;
    r.step = step;
    auto s = report(*j, r);
    EXPECT_TRUE(s) << s.err().to_string();
  };
  const task early = leased("a"), at = leased("a"), late = leased("a"), unknown = leased("a");
  const task left_late = leased("b"), failed_early = leased("b"), left_early = leased("b");
  send(early, "a", 40);
  send(at, "a", 50);
  send(late, "a", 51);
  send(unknown, "a", 0);
  send(left_late, "b", 60, true, false, 30);
  send(failed_early, "b", 20, false, true, 10);
  send(left_early, "b", 30, true, false, 10);
  EXPECT_EQ(get(*j, late.id)->step, 51u);
  EXPECT_EQ(get(*j, left_late.id)->step, 60u);
  // A later holder keeps more of left_early's rows, at a later step; one that kept fewer changes nothing.
  const task again = leased("c");
  ASSERT_EQ(again.id, left_late.id);
  send(again, "c", 70, true, false, 20);
  EXPECT_EQ(get(*j, left_late.id)->trained, 30u);
  EXPECT_EQ(get(*j, left_late.id)->step, 60u) << "no rows kept past those before: their step stays";
  const auto done_before = j->counts()->done;
  const auto records_before = j->counts()->records_done;

  auto r = j->reopen_after(50);
  ASSERT_TRUE(r) << r.err().to_string();
  EXPECT_EQ(r->done, 1u);
  EXPECT_EQ(r->trained, 1u);
  EXPECT_EQ(get(*j, late.id)->state, task_state::todo);
  EXPECT_EQ(get(*j, late.id)->step, 0u);
  EXPECT_EQ(get(*j, left_late.id)->trained, 0u) << "its rows were applied after the checkpoint";
  for (const auto& t : {early, at, unknown}) EXPECT_EQ(get(*j, t.id)->state, task_state::done) << t.id;
  EXPECT_EQ(get(*j, failed_early.id)->trained, 10u);
  EXPECT_EQ(get(*j, left_early.id)->trained, 10u);
  EXPECT_EQ(j->counts()->done, done_before - 1);
  EXPECT_EQ(j->counts()->records_done, records_before - late.count) << "only the reopened task's records";
  // Nothing after the next checkpoint: nothing changes.
  r = j->reopen_after(1000);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->done + r->trained, 0u);
}

TEST(TaskJournal, ExpiredLeasesGoBackToTodo) {
  temp_dir d;
  manual_clock clk;
  auto j = task_journal::open_or_create(d.str(), opts(1));
  ASSERT_TRUE(j);
  auto a = lease(*j, "a", clk.wall_ms() + 1000);
  auto b = lease(*j, "b", clk.wall_ms() + 5000);
  ASSERT_TRUE(a && *a && b && *b);
  clk.advance(std::chrono::seconds(2));
  auto n = j->requeue_expired(clk.wall_ms());
  ASSERT_TRUE(n);
  EXPECT_EQ(*n, 1u);
  ASSERT_TRUE(j->renew((*b)->id, "b", (*b)->attempt, clk.wall_ms() + 10000));
  clk.advance(std::chrono::seconds(5));
  n = j->requeue_expired(clk.wall_ms());
  ASSERT_TRUE(n);
  EXPECT_EQ(*n, 0u) << "renewed";
  auto doing = j->list(task_state::doing);
  ASSERT_TRUE(doing);
  ASSERT_EQ(doing->size(), 1u);
  EXPECT_EQ((*doing)[0].holder, "b");
}

TEST(TaskJournal, RenewalOfALeaseNoLongerHeldIsRefusedAndChangesNothing) {
  temp_dir d;
  manual_clock clk;
  auto j = task_journal::open_or_create(d.str(), opts(1));
  ASSERT_TRUE(j);
  auto a = lease(*j, "a", clk.wall_ms() + 1000);
  ASSERT_TRUE(a && *a);
  const auto id = (*a)->id;
  EXPECT_FALSE(j->renew(id, "b", (*a)->attempt, clk.wall_ms() + 60000)) << "another holder";
  EXPECT_FALSE(j->renew(id, "a", (*a)->attempt + 1, clk.wall_ms() + 60000)) << "another attempt";
  auto t = get(*j, id);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->deadline_ms, clk.wall_ms() + 1000);
  // Renewed by its holder, the lease outlives its first deadline; once it expires and is handed
  // out again, the old holder's renewal is refused.
  ASSERT_TRUE(j->renew(id, "a", (*a)->attempt, clk.wall_ms() + 3000));
  clk.advance(std::chrono::seconds(2));
  auto n = j->requeue_expired(clk.wall_ms());
  ASSERT_TRUE(n);
  EXPECT_EQ(*n, 0u);
  clk.advance(std::chrono::seconds(2));
  n = j->requeue_expired(clk.wall_ms());
  ASSERT_TRUE(n);
  EXPECT_EQ(*n, 1u);
  auto again = lease(*j, "c", clk.wall_ms() + 1000);
  ASSERT_TRUE(again && *again);
  EXPECT_EQ((*again)->id, id);
  EXPECT_FALSE(j->renew(id, "a", (*a)->attempt, clk.wall_ms() + 60000));
  t = get(*j, id);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->holder, "c");
  EXPECT_EQ(t->deadline_ms, clk.wall_ms() + 1000);
}

TEST(TaskJournal, ReopenListsDoingWithLeases) {
  temp_dir d;
  std::vector<task> held;
  {
    auto j = task_journal::open_or_create(d.str(), opts());
    ASSERT_TRUE(j);
    for (int i = 0; i < 3; ++i) {
      auto t = lease(*j, "w" + std::to_string(i), 1000 + i);
      ASSERT_TRUE(t && *t);
      held.push_back(**t);
    }
    ASSERT_TRUE(complete(*j, held[1].id, "w1", 1));
  }
  auto j = task_journal::open(d.str());
  ASSERT_TRUE(j) << j.err().to_string();
  EXPECT_EQ(j->options().dataset, "ds");
  auto doing = j->list(task_state::doing);
  ASSERT_TRUE(doing);
  ASSERT_EQ(doing->size(), 2u);
  EXPECT_EQ((*doing)[0].id, held[0].id);
  EXPECT_EQ((*doing)[0].holder, "w0");
  EXPECT_EQ((*doing)[0].deadline_ms, 1000);
  EXPECT_EQ((*doing)[1].holder, "w2");
  auto c = j->counts();
  ASSERT_TRUE(c);
  EXPECT_EQ(c->done, 1u);
  EXPECT_EQ(c->total(), 22u);
  EXPECT_TRUE(complete(*j, held[2].id, "w2", 1)) << "a lease survives the restart";
}

TEST(TaskJournal, ReopenWithOtherOptionsFails) {
  temp_dir d;
  ASSERT_TRUE(task_journal::open_or_create(d.str(), opts()));
  auto o = opts();
  o.records_per_task = 50;
  auto j = task_journal::open_or_create(d.str(), o);
  ASSERT_FALSE(j);
  EXPECT_NE(j.err().to_string().find("records_per_task"), std::string::npos) << j.err().to_string();
  auto same = task_journal::open_or_create(d.str(), opts());
  ASSERT_TRUE(same);
  auto c = same->counts();
  ASSERT_TRUE(c);
  EXPECT_EQ(c->total(), 22u) << "reopening does not create tasks again";
}

TEST(TaskJournal, MissingJournalAndBadOptions) {
  temp_dir d;
  auto j = task_journal::open(d.sub("none"));
  ASSERT_FALSE(j);
  EXPECT_EQ(j.err(), storage_errc::not_found);
  auto o = opts();
  o.records_per_task = 0;
  auto bad = task_journal::open_or_create(d.str(), o);
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.err(), storage_errc::invalid_argument);
}

TEST(TaskJournal, ConcurrentLeasesNeverHandOutATaskTwice) {
  temp_dir d;
  auto o = opts(3);
  o.records_per_task = 10;
  auto j = task_journal::open_or_create(d.str(), o);
  ASSERT_TRUE(j);
  std::mutex mu;
  std::set<std::uint64_t> seen;
  std::vector<std::thread> threads;
  std::atomic<int> dup{0};
  for (int w = 0; w < 4; ++w)
    threads.emplace_back([&, w] {
      for (;;) {
        std::string worker = "w";  // appended: "w" + to_string(w) trips GCC 12's -Wrestrict
        worker += std::to_string(w);
        auto t = lease(*j, worker, 1000);
        if (!t || !*t) return;
        std::lock_guard l(mu);
        if (!seen.insert((*t)->id).second) ++dup;
      }
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(dup.load(), 0);
  EXPECT_EQ(seen.size(), 3u * 101u);
}

}  // namespace
}  // namespace troupe::storage
