// The runner's parts on a manual clock: the slot table (launch, relaunch after a backoff, fence,
// scale) over a fake launcher, the master watch, the job outcome (result.json) and the event queue
// its threads push into.
#include <gtest/gtest.h>

#include <set>

#include <csignal>
#include <map>
#include <mutex>
#include <thread>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "job_outcome.hpp"
#include "master_watch.hpp"
#include "runner.hpp"
#include "runner_events.hpp"
#include "slot_table.hpp"
#include "troupe/cluster/errc.hpp"
#include "troupe/cluster/start_failure.hpp"

namespace troupe::control {
namespace {

using namespace std::chrono_literals;

// Launches nothing: records what it was asked, hands out handles; a node "exits" when the test
// says so (through the table's on_exit, as the runner's loop would pass the report on).
class fake_launcher final : public cluster::launcher {
 public:
  expected<cluster::node_handle> launch(const cluster::node_spec& spec) override {
    if (refuse) return make_unexpected(cluster::cluster_errc::launch_failed, "refused");
    if (slots > 0 && running_.size() >= slots)
      return make_unexpected(cluster::cluster_errc::insufficient_resources, "every slot is taken");
    launched.push_back(spec);
    // Runs where the spec asks (as the local launcher with cluster.hosts; "": here).
    cluster::node_handle h{++serial_, spec.id, 1000 + static_cast<int>(serial_), spec.host};
    running_[h.serial] = h;
    return h;
  }
  expected<void> signal(const cluster::node_handle& h, int sig) override {
    signals.emplace_back(h.id.name, sig);
    return {};
  }
  expected<void> fence(const cluster::node_handle& h) override {
    fenced.push_back(h.id.name);
    return {};
  }
  expected<std::optional<cluster::exit_status>> poll(const cluster::node_handle& h) const override {
    if (ended.count(h.id.name)) return std::optional<cluster::exit_status>(cluster::exit_status{});
    return std::optional<cluster::exit_status>();
  }
  expected<cluster::exit_status> wait(const cluster::node_handle&, std::chrono::milliseconds) override {
    return cluster::exit_status{};
  }
  void kill_all() noexcept override { running_.clear(); }
  std::vector<cluster::node_handle> running() const override {
    std::vector<cluster::node_handle> out;
    for (const auto& [s, h] : running_) out.push_back(h);
    return out;
  }
  cluster::resources capacity() const override { return {}; }
  cluster::resources reserved() const override { return {}; }
  std::string waiting_why(const cluster::node_handle& h) const override {
    auto it = queued.find(h.id.name);
    return it == queued.end() ? std::string() : it->second;
  }
  std::optional<outage_info> outage() const override { return down; }

  // The running handle of `name` (the latest launched).
  cluster::node_handle handle_of(const std::string& name) const {
    cluster::node_handle last;
    for (const auto& [s, h] : running_)
      if (h.id.name == name) last = h;
    return last;
  }
  std::size_t launches_of(const std::string& name) const {
    std::size_t n = 0;
    for (const auto& s : launched)
      if (s.id.name == name) ++n;
    return n;
  }

  std::vector<cluster::node_spec> launched;
  std::vector<std::pair<std::string, int>> signals;
  std::vector<std::string> fenced;
  std::set<std::string> ended;  // reaped: poll() has their status, their exit report is on its way
  std::map<std::string, std::string> queued;  // name -> why it waits (waiting_why)
  bool refuse = false;
  std::optional<outage_info> down;  // the cluster manager does not answer (launch refuses meanwhile)
  std::size_t slots = 0;            // > 0: launches past this many running nodes find no room

 private:
  std::uint64_t serial_ = 0;
  std::map<std::uint64_t, cluster::node_handle> running_;
};

cluster::exit_status crashed() {
  cluster::exit_status s;
  s.code = 1;
  return s;
}

// Incarnation 0 of each name, alive: a master's membership as the runner reads it.
std::vector<cluster::member> alive_members(std::initializer_list<const char*> names) {
  std::vector<cluster::member> members;
  for (const char* n : names) {
    cluster::member m;
    m.id = {n, 0};
    m.role = std::string_view(n) == "master"            ? cluster::node_role::master
             : std::string_view(n).rfind("ps-", 0) == 0 ? cluster::node_role::ps
                                                        : cluster::node_role::worker;
    m.state = cluster::member_state::alive;
    members.push_back(m);
  }
  return members;
}

struct slots_fixture : ::testing::Test {
  slot_policy policy() {
    slot_policy p;
    p.min_workers = 1;
    p.max_workers = 6;
    return p;
  }
  void SetUp() override {
    slot_hooks hooks;
    hooks.spec_of = [](const node_slot& slot, bool spare) -> expected<cluster::node_spec> {
      cluster::node_spec ns;
      ns.id = slot.id;
      ns.argv = {"troupe", "node", "--slot", std::to_string(slot.place)};
      ns.spare = spare;
      ns.host = slot.host;  // as runner::spec_of
      return ns;
    };
    hooks.launched = [this](node_slot& slot) { launched_hook.push_back(slot.id.to_string()); };
    table.bind(launcher, std::move(hooks));
  }
  // The exit report of `name`'s running process, as the loop hands it on.
  exit_verdict exit(const std::string& name, cluster::exit_status s = crashed()) {
    auto h = launcher.handle_of(name);
    return table.on_exit(h, s, false);
  }

  manual_clock clock;
  fake_launcher launcher;
  slot_table table{clock, policy()};
  std::vector<std::string> launched_hook;
};

TEST_F(slots_fixture, a_dead_node_is_relaunched_at_once_then_after_a_growing_backoff) {
  ASSERT_TRUE(table.start(cluster::node_role::ps, 0));
  EXPECT_EQ(launcher.launches_of("ps-0"), 1u);

  // The first death in the window: relaunched at once, with the next incarnation.
  auto v = exit("ps-0");
  ASSERT_EQ(v.what, exit_verdict::kind::died);
  auto d = table.died(*v.slot, crashed());
  EXPECT_FALSE(d.give_up);
  EXPECT_EQ(d.relaunch_at, clock.now());
  EXPECT_TRUE(table.relaunch_due().empty());
  EXPECT_EQ(launcher.launches_of("ps-0"), 2u);
  EXPECT_EQ(table.find("ps-0")->id.incarnation, 1u);
  EXPECT_EQ(table.restarts(), 1u);

  // The second: 100 ms later, not before.
  v = exit("ps-0");
  d = table.died(*v.slot, crashed());
  EXPECT_EQ(d.relaunch_at, clock.now() + 100ms);
  EXPECT_EQ(table.next_relaunch(), clock.now() + 100ms);
  clock.advance(99ms);
  table.relaunch_due();
  EXPECT_EQ(launcher.launches_of("ps-0"), 2u);
  EXPECT_FALSE(table.find("ps-0")->handle);
  clock.advance(1ms);
  table.relaunch_due();
  EXPECT_EQ(launcher.launches_of("ps-0"), 3u);
  EXPECT_TRUE(table.find("ps-0")->handle);
  EXPECT_FALSE(table.next_relaunch());

  // The third: 200 ms.
  v = exit("ps-0");
  d = table.died(*v.slot, crashed());
  EXPECT_EQ(d.relaunch_at, clock.now() + 200ms);
  EXPECT_EQ(launched_hook.size(), 3u);  // the hook sees every launch
}

TEST_F(slots_fixture, the_backoff_stops_at_its_cap_and_a_crash_loop_gives_up) {
  ASSERT_TRUE(table.start(cluster::node_role::master, 0));
  death_verdict d;
  for (int i = 0; i < 11; ++i) {
    auto v = exit("master");
    ASSERT_EQ(v.what, exit_verdict::kind::died);
    d = table.died(*v.slot, crashed());
    if (d.give_up) break;
    EXPECT_LE(d.relaunch_at - clock.now(), troupe::clock::duration(1s));
    clock.advance(d.relaunch_at - clock.now());
    EXPECT_TRUE(table.relaunch_due().empty());
  }
  // 11 deaths within the minute: the give-up rule, not another relaunch.
  EXPECT_TRUE(d.give_up);
  EXPECT_EQ(d.deaths, 11u);
  EXPECT_EQ(launcher.launches_of("master"), 11u);
  EXPECT_FALSE(table.next_relaunch());
}

TEST_F(slots_fixture, deaths_older_than_the_window_do_not_count_and_preemption_is_no_death) {
  ASSERT_TRUE(table.start(cluster::node_role::ps, 0));
  auto v = exit("ps-0");
  table.died(*v.slot, crashed());
  table.relaunch_due();
  clock.advance(61s);
  v = exit("ps-0");
  auto d = table.died(*v.slot, crashed());
  EXPECT_EQ(d.deaths, 1u);
  EXPECT_EQ(d.relaunch_at, clock.now());  // first in the window again: at once
  table.relaunch_due();
  cluster::exit_status preempted;
  preempted.signal = SIGTERM;
  preempted.state = "PREEMPTED";
  v = exit("ps-0", preempted);
  d = table.died(*v.slot, preempted);
  EXPECT_EQ(d.deaths, 1u);
}

// A worker that could not reach the master from a cut-off host is tried again later without a death
// counted: twelve such ends in a minute do not give up (the crash-loop rule failed the job).
TEST_F(slots_fixture, a_retry_later_is_no_death_and_waits_its_delay) {
  ASSERT_TRUE(table.start(cluster::node_role::ps, 0));
  for (int i = 0; i < 12; ++i) {
    auto v = exit("ps-0");
    ASSERT_EQ(v.what, exit_verdict::kind::died);
    table.retry_later(*v.slot, 2s);
    EXPECT_EQ(table.next_relaunch(), clock.now() + 2s);
    clock.advance(1999ms);
    table.relaunch_due();
    EXPECT_FALSE(table.find("ps-0")->handle) << "launched before its delay";
    clock.advance(1ms);
    EXPECT_TRUE(table.relaunch_due().empty());
    EXPECT_TRUE(table.find("ps-0")->handle);
  }
  EXPECT_EQ(table.find("ps-0")->id.incarnation, 12u);
  EXPECT_TRUE(table.find("ps-0")->deaths.empty());
  auto v = exit("ps-0");
  EXPECT_EQ(table.died(*v.slot, crashed()).deaths, 1u) << "a crash after them is the first death";
}

TEST_F(slots_fixture, a_fenced_slot_is_not_relaunched_before_its_exit_report) {
  table.scale_to(2);
  auto members = alive_members({"master", "worker-0", "worker-1"});
  // Listed alive by master incarnation 0: joined and seen; nobody is dead.
  EXPECT_TRUE(table.declared_dead(members, 0).empty());
  EXPECT_TRUE(table.find("worker-1")->joined);
  // worker-1 gone from that master's view: declared dead, fenced.
  members.pop_back();
  auto dead = table.declared_dead(members, 0);
  ASSERT_EQ(dead.size(), 1u);
  EXPECT_EQ(dead[0]->id.name, "worker-1");
  ASSERT_TRUE(table.fence(*dead[0]));
  EXPECT_EQ(launcher.fenced, std::vector<std::string>{"worker-1"});
  // Fenced, it keeps its handle: not declared again, not relaunched, not replaced by a scale.
  EXPECT_TRUE(table.declared_dead(members, 0).empty());
  clock.advance(10s);
  table.relaunch_due();
  table.scale_to(2);
  EXPECT_EQ(launcher.launched.size(), 2u);
  // Its exit report comes: then it is relaunched, and says how it ended.
  auto v = exit("worker-1");
  ASSERT_EQ(v.what, exit_verdict::kind::died);
  EXPECT_EQ(v.slot->ended, "fenced: " + crashed().to_string());
  table.died(*v.slot, crashed());
  table.relaunch_due();
  EXPECT_EQ(launcher.launches_of("worker-1"), 2u);
  EXPECT_FALSE(table.find("worker-1")->fenced);
}

// A worker that left of its own accord (listed leaving: a preemption's SIGTERM) and one whose end
// the launcher has already seen are not declared dead when they leave the view: a preempted Slurm
// worker was fenced ("no such node") and counted as a restart.
TEST_F(slots_fixture, a_worker_leaving_by_itself_or_already_ended_is_not_declared_dead) {
  table.scale_to(3);
  auto members = alive_members({"master", "worker-0", "worker-1", "worker-2"});
  EXPECT_TRUE(table.declared_dead(members, 0).empty());
  members[1].state = cluster::member_state::leaving;  // worker-0, preempted
  EXPECT_TRUE(table.declared_dead(members, 0).empty());
  members.erase(members.begin() + 1);
  EXPECT_TRUE(table.declared_dead(members, 0).empty()) << "worker-0 left; it did not die";
  launcher.ended.insert("worker-1");  // its process is gone, the exit report not handled yet
  members.erase(members.begin() + 1);
  EXPECT_TRUE(table.declared_dead(members, 0).empty());
  members.pop_back();  // worker-2 vanishes while its process runs: that is a death
  auto dead = table.declared_dead(members, 0);
  ASSERT_EQ(dead.size(), 1u);
  EXPECT_EQ(dead[0]->id.name, "worker-2");
}

TEST_F(slots_fixture, scaling_launches_new_indices_and_stops_the_highest) {
  auto up = table.scale_to(3);
  EXPECT_EQ(up.from, 0u);
  EXPECT_EQ(up.to, 3u);
  EXPECT_EQ(up.launched, (std::vector<std::string>{"worker-0", "worker-1", "worker-2"}));
  EXPECT_EQ(table.running_workers(), 3u);

  auto down = table.scale_to(1);
  EXPECT_EQ(down.leaving, (std::vector<std::string>{"worker-2", "worker-1"}));
  EXPECT_EQ(launcher.signals,
            (std::vector<std::pair<std::string, int>>{{"worker-2", SIGTERM}, {"worker-1", SIGTERM}}));
  EXPECT_EQ(table.running_workers(), 1u);
  EXPECT_EQ(table.launched_workers(), 1u);

  // A leaving worker's exit is no death: not relaunched.
  auto v = exit("worker-2");
  EXPECT_EQ(v.what, exit_verdict::kind::left);
  table.relaunch_due();
  EXPECT_EQ(launcher.launches_of("worker-2"), 1u);

  // Up again: a new index (never a departed worker's name), in the lowest free place (worker-1
  // still holds place 1 until it exits).
  auto again = table.scale_to(2);
  EXPECT_EQ(again.launched, std::vector<std::string>{"worker-3"});
  EXPECT_EQ(table.find("worker-3")->place, 2u);
  EXPECT_EQ(launcher.launched.back().argv.back(), "2");
}

// What waits in the cluster manager's queue: launched, wanted and not joined nodes the launcher says
// wait, with its reason; once joined, none.
TEST_F(slots_fixture, nodes_waiting_in_the_queue_are_listed_with_the_reason) {
  table.scale_to(2);
  launcher.queued["worker-1"] = "PENDING (ReqNodeNotAvail, UnavailableNodes:h3)";
  auto w = table.waiting();
  ASSERT_EQ(w.size(), 1u);
  EXPECT_EQ(w[0], (std::pair<std::string, std::string>{"worker-1",
                                                       "PENDING (ReqNodeNotAvail, UnavailableNodes:h3)"}));
  auto members = alive_members({"master", "worker-0", "worker-1"});
  EXPECT_TRUE(table.declared_dead(members, 0).empty());
  EXPECT_TRUE(table.waiting().empty()) << "joined: no longer waiting, whatever the launcher's last poll said";
}

// A worker started by hand (`troupe node --index 3`) is a member the table never launched: a scale
// up skips its name (the runner's own worker-3 beside it never joined, refused as a duplicate).
TEST_F(slots_fixture, a_scale_up_skips_the_names_of_workers_started_by_hand) {
  table.scale_to(2);
  auto members = alive_members({"master", "worker-0", "worker-1", "worker-2", "worker-3"});
  EXPECT_TRUE(table.declared_dead(members, 0).empty()) << "a hand-started worker is no slot to fence";
  auto up = table.scale_to(4);
  EXPECT_EQ(up.launched, (std::vector<std::string>{"worker-4", "worker-5"}));
  EXPECT_EQ(table.find("worker-2"), nullptr);
}

// Workers started by hand hold worker slots up to max_workers: the table launches no more than
// max_workers less them (the master refused the rest, relaunched until the job failed), and a launched
// worker the master refused for want of a slot anyway (a hand node joined after the scale) is retired,
// not relaunched: one worker fewer.
TEST_F(slots_fixture, workers_started_by_hand_hold_slots_up_to_max_workers) {
  table.scale_to(2);
  auto members = alive_members({"master", "worker-0", "worker-1", "worker-7", "worker-8"});
  EXPECT_TRUE(table.declared_dead(members, 0).empty());
  EXPECT_EQ(table.hand_workers(), 2u);
  EXPECT_EQ(table.max_launched(), 4u);  // max_workers 6 less 2
  auto up = table.scale_to(6);
  EXPECT_EQ(table.target(), 4u);
  EXPECT_EQ(up.launched, (std::vector<std::string>{"worker-2", "worker-3"}));
  cluster::exit_status refused;
  refused.code = cluster::exit_no_worker_slot;
  auto v = exit("worker-3", refused);
  ASSERT_EQ(v.what, exit_verdict::kind::died);
  table.retire_no_slot(*v.slot);
  EXPECT_EQ(table.target(), 3u);
  EXPECT_EQ(table.running_workers(), 3u);
  clock.advance(std::chrono::minutes(1));
  table.relaunch_due();
  EXPECT_EQ(launcher.launches_of("worker-3"), 1u) << "not relaunched into the same refusal";
  // The hand workers gone, the runner may launch up to max_workers again.
  EXPECT_TRUE(table.declared_dead(alive_members({"master", "worker-0", "worker-1", "worker-2"}), 0).empty());
  EXPECT_EQ(table.max_launched(), 6u);
}

// By index, not by name: the slots are kept by name, where "worker-9" sorts after "worker-15" (a
// job of 16 shrunk to 13 had lost worker-9, -8 and -7, its spare-mode own workers among them).
TEST_F(slots_fixture, a_shrink_past_ten_workers_stops_the_highest_indices) {
  auto p = policy();
  p.max_workers = 16;
  table.set_policy(p);
  table.scale_to(16);
  auto down = table.scale_to(9);
  EXPECT_EQ(down.leaving, (std::vector<std::string>{"worker-15", "worker-14", "worker-13", "worker-12",
                                                    "worker-11", "worker-10", "worker-9"}));
  for (std::size_t i = 0; i < 16; ++i)
    EXPECT_EQ(table.find("worker-" + std::to_string(i))->wanted, i < 9) << i;
  table.scale_to(12);  // worker-16..18
  EXPECT_EQ(table.scale_to(10).leaving, (std::vector<std::string>{"worker-18", "worker-17"}));
}

TEST_F(slots_fixture, a_scale_with_a_host_places_the_workers_it_adds_there_and_only_their_first_launch) {
  table.scale_to(2);
  table.scale_to(4, "h2");
  ASSERT_EQ(launcher.launched.size(), 4u);
  EXPECT_EQ(launcher.launched[0].host, "");
  EXPECT_EQ(launcher.launched[1].host, "");
  EXPECT_EQ(launcher.launched[2].id.name, "worker-2");
  EXPECT_EQ(launcher.launched[2].host, "h2");
  EXPECT_EQ(launcher.launched[3].host, "h2");
  // Its relaunch goes where the launcher puts it (the host may be full by then).
  auto v = exit("worker-3");
  ASSERT_EQ(v.what, exit_verdict::kind::died);
  table.died(*v.slot, crashed());
  EXPECT_TRUE(table.relaunch_due().empty());
  ASSERT_EQ(launcher.launches_of("worker-3"), 2u);
  EXPECT_EQ(launcher.launched.back().host, "");
  // A later scale without a host places nothing; a target set before the workers launch keeps its
  // host for the scale that launches them.
  table.scale_to(5);
  EXPECT_EQ(launcher.launched.back().host, "");
  table.set_target(6, "h3");
  table.scale_to(table.target());
  EXPECT_EQ(launcher.launched.back().id.name, "worker-5");
  EXPECT_EQ(launcher.launched.back().host, "h3");
  table.scale_to(6);
  table.scale_to(1);
  table.scale_to(2);  // a refill after a shrink: anywhere
  EXPECT_EQ(launcher.launched.back().host, "");
}

// troupe scale --host on a shrink drains that host: the workers running there leave first (by
// launcher::host_of), then the highest indices; a host none runs on changes nothing of the order.
TEST_F(slots_fixture, a_shrink_with_a_host_stops_the_workers_running_there_first) {
  table.scale_to(2, "h1");  // worker-0 and worker-1 on h1
  table.scale_to(4, "h2");  // worker-2 and worker-3 on h2
  EXPECT_EQ(table.scale_to(3, "h1").leaving, std::vector<std::string>{"worker-1"});
  EXPECT_EQ(table.scale_to(1, "h1").leaving, (std::vector<std::string>{"worker-0", "worker-3"}));
  EXPECT_TRUE(table.find("worker-2")->wanted);
  EXPECT_EQ(launcher.signals, (std::vector<std::pair<std::string, int>>{
                                  {"worker-1", SIGTERM}, {"worker-0", SIGTERM}, {"worker-3", SIGTERM}}));
  table.scale_to(3);  // worker-4 and worker-5, where the launcher puts them
  EXPECT_EQ(table.scale_to(2, "h9").leaving, std::vector<std::string>{"worker-5"});
}

TEST_F(slots_fixture, scale_clamps_to_the_job_bounds_and_a_refused_launch_is_an_error) {
  EXPECT_EQ(table.scale_to(0).to, 1u);
  EXPECT_EQ(table.scale_to(50).to, 6u);
  EXPECT_EQ(table.running_workers(), 6u);
  launcher.refuse = true;
  table.scale_to(1);
  auto r = table.scale_to(3);
  EXPECT_NE(r.error.find("cannot launch worker-6"), std::string::npos) << r.error;
  EXPECT_FALSE(table.find("worker-6"));
}

// A node whose relaunch comes due while the cluster manager does not answer (its exit reported just
// before slurmctld went down): not the job's failure ("cannot relaunch ps-0" failed it), tried each
// second until the manager answers.
TEST_F(slots_fixture, a_relaunch_due_while_the_cluster_manager_does_not_answer_waits_for_it) {
  ASSERT_TRUE(table.start(cluster::node_role::ps, 0));
  auto v = exit("ps-0");
  ASSERT_EQ(v.what, exit_verdict::kind::died);
  table.died(*v.slot, crashed());
  launcher.refuse = true;
  launcher.down = cluster::launcher::outage_info{"squeue: Unable to contact slurm controller", clock.now()};
  EXPECT_TRUE(table.relaunch_due().empty()) << "an outage failed the job";
  EXPECT_EQ(table.next_relaunch(), clock.now() + 1s);
  clock.advance(1s);
  EXPECT_TRUE(table.relaunch_due().empty());
  EXPECT_EQ(launcher.launches_of("ps-0"), 1u);
  launcher.refuse = false;
  launcher.down.reset();
  clock.advance(1s);
  EXPECT_TRUE(table.relaunch_due().empty());
  EXPECT_EQ(launcher.launches_of("ps-0"), 2u);
  EXPECT_TRUE(table.find("ps-0")->handle);
  // Refused with the manager answering: the job's failure, as before.
  v = exit("ps-0");
  table.died(*v.slot, crashed());
  launcher.refuse = true;
  clock.advance(10s);
  EXPECT_EQ(table.relaunch_due().size(), 1u);
}

// The hosts' slots full (cluster.hosts), at the start or on a `troupe scale` past them: the job goes
// on with the workers it has while they are at least min_workers, its target following (it failed);
// with fewer, the launch is the error it was.
TEST_F(slots_fixture, a_grow_past_the_hosts_slots_keeps_the_workers_that_fit) {
  launcher.slots = 3;
  auto r = table.scale_to(5);
  EXPECT_TRUE(r.error.empty()) << r.error;
  EXPECT_EQ(table.running_workers(), 3u);
  EXPECT_EQ(table.target(), 3u);
  EXPECT_FALSE(table.find("worker-3"));
  r = table.scale_to(6);
  EXPECT_TRUE(r.error.empty()) << r.error;
  EXPECT_EQ(table.target(), 3u);
  // A host asked for by a scale that could not launch is not the next scale's (it carried over), and
  // the names it could not use are the next ones' (worker-4 -> worker-7 ...).
  table.scale_to(4, "h3");
  launcher.slots = 4;
  table.scale_to(4);
  EXPECT_EQ(launcher.launched.back().id.name, "worker-3");
  EXPECT_EQ(launcher.launched.back().host, "") << "an unmet --host carried over";
  launcher.slots = 0;
  launcher.refuse = true;  // another failure: still the job's error
  EXPECT_FALSE(table.scale_to(5).error.empty());
}

TEST_F(slots_fixture, without_room_for_min_workers_a_full_host_is_an_error) {
  slot_policy p = policy();
  p.min_workers = 2;
  slot_table t{clock, p};
  slot_hooks hooks;
  hooks.spec_of = [](const node_slot& slot, bool) -> expected<cluster::node_spec> {
    cluster::node_spec ns;
    ns.id = slot.id;
    return ns;
  };
  t.bind(launcher, std::move(hooks));
  launcher.slots = 1;
  auto r = t.scale_to(3);
  EXPECT_NE(r.error.find("insufficient resources"), std::string::npos) << r.error;
}

TEST_F(slots_fixture, a_stale_exit_report_is_ignored_and_stop_all_relaunches_nothing) {
  table.scale_to(1);
  auto old = launcher.handle_of("worker-0");
  auto v = exit("worker-0");
  table.died(*v.slot, crashed());
  table.relaunch_due();
  // The report of the process before the relaunch: not the slot's.
  EXPECT_EQ(table.on_exit(old, crashed(), false).what, exit_verdict::kind::stale);
  EXPECT_TRUE(table.find("worker-0")->handle);

  v = exit("worker-0");
  table.died(*v.slot, crashed());  // second death: due in 100 ms
  table.stop_all(SIGTERM);
  clock.advance(1s);
  table.relaunch_due();
  EXPECT_EQ(launcher.launches_of("worker-0"), 2u);
  EXPECT_FALSE(table.next_relaunch());
}

TEST_F(slots_fixture, spare_mode_keeps_max_workers_and_launches_beyond_the_target_as_spare) {
  auto p = policy();
  p.max_workers = 3;
  p.spare_mode = true;
  table.set_policy(p);
  table.scale_to(1);
  ASSERT_EQ(launcher.launched.size(), 3u);
  EXPECT_FALSE(launcher.launched[0].spare);
  EXPECT_TRUE(launcher.launched[1].spare);
  EXPECT_TRUE(launcher.launched[2].spare);
}

// Before, a scale down in spare mode changed nothing running: the own workers beyond the new target
// kept their CPUs in the worker partition (where no other job's own worker can preempt them) until
// something relaunched them. Now they leave and come back as spare, no death and no backoff.
TEST_F(slots_fixture, a_scale_down_in_spare_mode_relaunches_the_own_workers_beyond_it_as_spare) {
  auto p = policy();
  p.max_workers = 4;
  p.spare_mode = true;
  table.set_policy(p);
  table.scale_to(3);  // worker-0..2 own, worker-3 spare
  ASSERT_EQ(launcher.launched.size(), 4u);
  auto down = table.scale_to(1);
  EXPECT_TRUE(down.leaving.empty()) << "the job keeps max_workers";
  EXPECT_EQ(down.demoted, (std::vector<std::string>{"worker-1", "worker-2"}));
  EXPECT_EQ(launcher.signals,
            (std::vector<std::pair<std::string, int>>{{"worker-1", SIGTERM}, {"worker-2", SIGTERM}}));
  EXPECT_TRUE(table.scale_to(1).demoted.empty()) << "demoted once";
  EXPECT_EQ(table.running_workers(), 4u);

  auto v = exit("worker-1");
  ASSERT_EQ(v.what, exit_verdict::kind::demoted);
  EXPECT_EQ(v.slot->id.incarnation, 1u);
  EXPECT_TRUE(table.relaunch_due().empty());
  ASSERT_EQ(launcher.launched.size(), 5u);
  EXPECT_EQ(launcher.launched.back().id.to_string(), "worker-1#1");
  EXPECT_TRUE(launcher.launched.back().spare);
  EXPECT_EQ(table.restarts(), 0u) << "a demotion is no restart";
  EXPECT_TRUE(table.find("worker-1")->deaths.empty());

  // Scaled up again before worker-2's exit: it comes back as one of the job's own.
  table.scale_to(3);
  ASSERT_EQ(exit("worker-2").what, exit_verdict::kind::demoted);
  table.relaunch_due();
  EXPECT_EQ(launcher.launched.back().id.to_string(), "worker-2#1");
  EXPECT_FALSE(launcher.launched.back().spare);
  // worker-1 runs as spare though it is within the target now: not relaunched for that.
  EXPECT_TRUE(table.scale_to(3).demoted.empty());
  EXPECT_EQ(launcher.launches_of("worker-1"), 2u);
}

TEST_F(slots_fixture, a_resumed_job_continues_incarnations_and_worker_indices) {
  cluster::nodes_file old;
  cluster::node_record m, w;
  m.id = {"master", 2};
  m.role = cluster::node_role::master;
  w.id = {"worker-4", 0};
  w.role = cluster::node_role::worker;
  old.nodes = {m, w};
  table.resume_after(old);
  ASSERT_TRUE(table.start(cluster::node_role::master, 0));
  EXPECT_EQ(table.find("master")->id.incarnation, 3u);
  table.scale_to(1);
  EXPECT_EQ(launcher.launched.back().id.name, "worker-5");
}

TEST(master_watch, polls_once_per_interval) {
  manual_clock clock;
  master_watch w(clock, {});
  EXPECT_FALSE(w.next_poll());
  EXPECT_TRUE(w.poll_due());
  EXPECT_FALSE(w.poll_due());
  EXPECT_EQ(w.next_poll(), clock.now() + 250ms);
  clock.advance(249ms);
  EXPECT_FALSE(w.poll_due());
  EXPECT_TRUE(w.poll_due(true));  // forced
  clock.advance(250ms);
  EXPECT_TRUE(w.poll_due());
}

TEST(master_watch, a_master_is_hung_after_its_limit_and_not_before) {
  manual_clock clock;
  watch_limits l;
  l.hang_limit = 3s;
  master_watch w(clock, l);
  w.launched();
  clock.advance(29s);
  EXPECT_FALSE(w.hung());  // never answered: 30 s to come up
  clock.advance(1s);
  ASSERT_TRUE(w.hung());
  EXPECT_EQ(*w.hung(), troupe::clock::duration(30s));

  w.launched();
  wire::job_status s;
  s.samples_per_sec = 42;
  w.answered(s);
  clock.advance(1499ms);
  w.refresh();
  EXPECT_FALSE(w.quiet());
  EXPECT_FALSE(w.hung());
  clock.advance(2ms);
  w.refresh();
  EXPECT_TRUE(w.quiet());  // stale numbers
  EXPECT_FALSE(w.hung());
  clock.advance(1499ms);
  EXPECT_TRUE(w.hung());
  w.answered(s);  // it answers again
  w.refresh();
  EXPECT_FALSE(w.quiet());
  EXPECT_FALSE(w.hung());
}

TEST(master_watch, answers_with_the_masters_status_and_the_runners_fields) {
  manual_clock clock;
  master_watch w(clock, {});
  w.launched();
  EXPECT_FALSE(w.status().valid);
  wire::job_status s;
  s.epoch = 7;
  s.samples_per_sec = 42;
  s.tasks.done = 5;
  w.answered(s);
  runner_fields f;
  f.job_id = "j-1";
  f.workers_target = 3;
  f.restarts = 2;
  f.finished = true;
  f.result_json = "{}";
  w.publish(f);
  auto a = w.answer();
  EXPECT_EQ(a.epoch, 7u);
  EXPECT_EQ(a.tasks.done, 5u);
  EXPECT_EQ(a.job_id, "j-1");
  EXPECT_EQ(a.workers_target, 3u);
  EXPECT_EQ(a.restarts, 2u);
  EXPECT_TRUE(a.finished);
  EXPECT_EQ(a.samples_per_sec, 42);
  clock.advance(2s);
  w.refresh();
  EXPECT_EQ(w.answer().samples_per_sec, 0);  // quiet: the last pace is stale
  w.forget_status();
  EXPECT_FALSE(w.status().valid);
}

outcome_facts facts() {
  outcome_facts f;
  f.job_id = "job-1";
  f.strategy = "allreduce";
  f.model_type = "mlp";
  f.restarts = 3;
  return f;
}

TEST(job_outcome, a_finished_job_keeps_the_masters_metrics_and_adds_the_runners) {
  manual_clock clock(1'000'000);
  job_outcome o(clock);
  o.start();
  clock.advance(4s);
  EXPECT_TRUE(o.master_finished(R"({"samples_trained": 900, "first_step_wall_ms": 1000500})", true));
  EXPECT_FALSE(o.master_finished(R"({"samples_trained": 1})", false));  // the first word wins
  clock.advance(1s);
  o.nodes_stopped();
  clock.advance(7s);  // writing the model is timed apart
  o.model_written(R"({"model": "/jobs/job-1/model"})", 7.0);
  auto f = facts();
  f.resumed = true;
  f.true_auc = 0.9;
  auto j = nlohmann::json::parse(o.final_json(0, f));
  EXPECT_EQ(j["samples_trained"], 900);
  EXPECT_EQ(j["job"], "job-1");
  EXPECT_EQ(j["ok"], true);
  EXPECT_EQ(j["status"], "finished");
  EXPECT_EQ(j["reason"], "every task done");
  EXPECT_EQ(j["exit_code"], 0);
  EXPECT_DOUBLE_EQ(j["wall_seconds"].get<double>(), 5.0);
  EXPECT_EQ(j["node_restarts"], 3);
  EXPECT_EQ(j["runner_start_wall_ms"], 1'000'000);
  EXPECT_DOUBLE_EQ(j["first_step_seconds"].get<double>(), 0.5);
  EXPECT_EQ(j["resumed"], true);
  EXPECT_DOUBLE_EQ(j["true_auc"].get<double>(), 0.9);
  EXPECT_EQ(j["model_dir"], "/jobs/job-1/model");
  EXPECT_DOUBLE_EQ(j["model_seconds"].get<double>(), 7.0);
  EXPECT_FALSE(j.contains("strategy"));  // the master's result says what it trained
}

// After --resume the job's first minibatch may predate this runner: no (negative) seconds then.
TEST(job_outcome, a_first_step_under_an_earlier_runner_has_no_seconds) {
  manual_clock clock(1'000'000);
  job_outcome o(clock);
  o.start();
  clock.advance(4s);
  EXPECT_TRUE(o.master_finished(R"({"samples_trained": 900, "first_step_wall_ms": 988000})", true));
  o.nodes_stopped();
  auto f = facts();
  f.resumed = true;
  auto j = nlohmann::json::parse(o.final_json(0, f));
  EXPECT_EQ(j["first_step_wall_ms"], 988000);
  EXPECT_FALSE(j.contains("first_step_seconds")) << j.dump();
}

TEST(job_outcome, without_a_result_it_reports_the_last_counts_and_the_failure) {
  manual_clock clock;
  job_outcome o(clock);
  o.start();
  wire::job_status s;
  s.tasks.done = 4;
  s.tasks.failed = 1;
  s.tasks.requeued = 2;
  s.samples_total = 400;
  auto f = facts();
  f.status = s;
  o.fail("worker-0 died 11 times in a minute");
  o.fail("a later failure");  // the first one is the reason
  o.model_failed("no model");
  auto j = nlohmann::json::parse(o.final_json(1, f));
  EXPECT_EQ(j["status"], "failed");
  EXPECT_EQ(j["reason"], "worker-0 died 11 times in a minute");
  EXPECT_EQ(j["ok"], false);
  EXPECT_EQ(j["strategy"], "allreduce");
  EXPECT_EQ(j["model"], "mlp");
  EXPECT_EQ(j["tasks_done"], 4);
  EXPECT_EQ(j["tasks_failed"], 1);
  EXPECT_EQ(j["tasks_requeued"], 2);
  EXPECT_EQ(j["samples_trained"], 400);
  EXPECT_EQ(j["model_error"], "no model");
  EXPECT_FALSE(j.contains("resumed"));
}

TEST(job_outcome, a_failed_master_result_gives_its_error_or_the_quarantine) {
  manual_clock clock;
  int asked = 0;
  auto f = facts();
  f.quarantine_reason = [&] { return ++asked, std::string("2 task(s) quarantined"); };
  job_outcome with_error(clock);
  with_error.master_finished(R"({"error": "evaluation failed"})", false);
  EXPECT_EQ(nlohmann::json::parse(with_error.final_json(1, f))["reason"], "evaluation failed");
  EXPECT_EQ(asked, 0);  // read only when needed
  job_outcome quarantined(clock);
  quarantined.master_finished(R"({"tasks_failed": 2})", false);
  EXPECT_EQ(nlohmann::json::parse(quarantined.final_json(1, f))["reason"], "2 task(s) quarantined");
  EXPECT_EQ(asked, 1);
}

TEST(job_outcome, a_stop_and_an_interruption_keep_their_first_reason) {
  manual_clock clock;
  job_outcome o(clock);
  o.stop_requested("troupe stop");
  o.stop_requested("another");
  EXPECT_EQ(o.stop_reason(), "troupe stop");
  o.end("stopped", "stopped on request (troupe stop)");
  o.end("interrupted", "interrupted by SIGINT");
  auto j = nlohmann::json::parse(o.final_json(3, facts()));
  EXPECT_EQ(j["status"], "stopped");
  EXPECT_EQ(j["reason"], "stopped on request (troupe stop)");
  EXPECT_EQ(j["exit_code"], 3);
}

TEST(event_queue, events_from_several_threads_are_all_drained_in_push_order) {
  manual_clock clock;
  event_queue q(clock);
  constexpr std::uint32_t threads = 4, each = 500;
  std::vector<std::thread> producers;
  for (std::uint32_t t = 0; t < threads; ++t)
    producers.emplace_back([&, t] {
      for (std::uint32_t i = 0; i < each; ++i) q.push(scale_event{t, i, {}});
    });
  std::vector<runner_event> got;
  while (got.size() < threads * each) {
    (void)q.wait_until(clock.now() + 1h, 20ms);  // returns on a push
    for (auto& e : q.drain()) got.push_back(std::move(e));
  }
  for (auto& p : producers) p.join();
  EXPECT_TRUE(q.empty());
  ASSERT_EQ(got.size(), threads * each);
  // Each producer's events come out in the order it pushed them.
  std::vector<std::uint32_t> next(threads, 0);
  for (const auto& e : got) {
    const auto& s = std::get<scale_event>(e);
    EXPECT_EQ(s.requested, next[s.workers]);
    next[s.workers] = s.requested + 1;
  }
  EXPECT_EQ(next, std::vector<std::uint32_t>(threads, each));
}

TEST(event_queue, a_wait_ends_on_a_push_or_at_the_deadline_on_the_clock) {
  manual_clock clock;
  event_queue q(clock);
  EXPECT_FALSE(q.wait_until(clock.now(), 1ms));  // the deadline has come: no wait
  std::thread pusher([&] { q.push(stop_event{"troupe stop"}); });
  EXPECT_TRUE(q.wait_until(clock.now() + 1h, 20ms));
  pusher.join();
  auto events = q.drain();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(std::get<stop_event>(events[0]).reason, "troupe stop");
  // A manual clock moved past the deadline ends the wait (seen within a nap).
  const auto deadline = clock.now() + 1h;
  std::thread mover([&] { clock.advance(2h); });
  EXPECT_FALSE(q.wait_until(deadline, 1ms));
  mover.join();
}

}  // namespace
}  // namespace troupe::control

// The /metrics address nodes.json records: a host meaning every interface is left for the master's
// host (the runner puts it in front of ":<port>"), as no host is; a named host is kept.
TEST(runner_parts, a_metrics_host_of_every_interface_is_recorded_as_the_masters) {
  for (const std::string host : {"0.0.0.0", "::", "", "10.1.2.3"}) {
    auto doc = troupe::config_doc::from_string("");
    ASSERT_TRUE(doc);
    troupe::job::job_spec spec;
    spec.cluster.launcher = "slurm";  // a pinned port is not probed on this machine
    spec.cluster.metrics_port = 9100;
    spec.cluster.metrics_host = host;
    auto a = troupe::control::pin_metrics_address(*doc, spec);
    ASSERT_TRUE(a) << a.err().to_string();
    EXPECT_EQ(*a, (host == "10.1.2.3" ? host : std::string()) + ":9100") << host;
  }
}
