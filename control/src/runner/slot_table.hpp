// The runner's node slots: one per node of the job (the master, PS shards, workers), each holding
// its current incarnation and, while it runs, the launcher's handle. The table launches, relaunches
// (after a backoff that grows with the slot's recent deaths), fences and scales nodes through the
// cluster::launcher it is bound to, and keeps the counts the rest of the runner reads.
//
// Contract:
// - Threads: none of its own; one thread (the runner's loop) calls every method. Exit reports reach
//   it through the runner's event queue, never from the launcher's thread.
// - Time: the clock given at construction (deaths, backoffs); tests pass a manual_clock.
// - A slot whose node exits is relaunched only while it is wanted (not scaled away, not shutting
//   down): at once after its first death in death_window, then after backoff_base doubled per
//   further death, at most backoff_cap (a crash loop still reaches max_deaths within the window).
//   A fenced slot is not relaunched until its exit report comes (it keeps its handle until then).
// - Worker indices are never reused: a scaled-up worker gets the next one (its own name), so the
//   master never mistakes it for a departed worker coming back.
// - Errors (a launch the launcher refuses) are returned, never thrown; the table stays consistent.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "troupe/cluster/bootstrap.hpp"
#include "troupe/cluster/launcher.hpp"
#include "troupe/cluster/membership.hpp"
#include "troupe/core/clock.hpp"
#include "troupe/core/error.hpp"

namespace troupe::control {

struct node_slot {
  node_id id;  // current (or last) incarnation
  cluster::node_role role = cluster::node_role::worker;
  std::size_t index = 0;
  std::optional<cluster::node_handle> handle;  // while running
  bool wanted = true;                          // relaunch when it dies
  // The incarnation of the master whose membership listed this incarnation alive (unset: not
  // joined yet, or not since its launch); its absence from that master's view is a death.
  std::optional<std::uint64_t> seen_by_master;
  // This incarnation joined: listed in the master's membership (the master: it answered a status
  // request).
  bool joined = false;
  // Ends in a row before it joined, with nothing of troupe's in its output (start_failure.hpp).
  std::size_t start_failures = 0;
  // The master incarnation that had joined (answered a status request) when this incarnation was
  // launched; unset: none had. A node's "could not join" end counts only when that master stayed up
  // (a node launched while the master was down or restarting waited for it, not for a bad network).
  std::optional<std::uint64_t> master_up_at_launch;
  bool fenced = false;        // SIGKILLed after the master declared it dead; its exit report follows
  bool spare_launch = false;  // its process was launched as spare (its class until it is relaunched)
  // Launched as one of the job's own workers, now beyond the target after a scale down (spare mode):
  // SIGTERMed, and relaunched as spare when its exit report comes (no death, no backoff).
  bool demoting = false;
  std::uint64_t start_time = 0;  // of the running process (/proc/<pid>/stat), for nodes.json
  std::size_t place = 0;         // a worker's slot (`troupe node --slot`): the lowest free at launch
  // Where its next launch goes (troupe scale --host): set for a worker a scale adds, cleared once it
  // has launched (a relaunch goes where the launcher puts it: the host may be full by then).
  std::string host;
  std::string ended;                                     // how its last process ended, once it has
  std::deque<troupe::clock::time_point> deaths;          // recent, for the give-up rule and the backoff
  std::optional<troupe::clock::time_point> relaunch_at;  // dead and wanted: when it is relaunched
};

struct slot_policy {
  std::uint32_t min_workers = 0, max_workers = 0;
  // [cluster] spare_partition: the job keeps max_workers workers; the `target` wanted ones of
  // lowest index are its own, the rest are spare (launched with node_spec::spare).
  bool spare_mode = false;
  // A node that dies more than this often within death_window is broken, not unlucky.
  std::size_t max_deaths = 10;
  troupe::clock::duration death_window = std::chrono::seconds(60);
  troupe::clock::duration backoff_base = std::chrono::milliseconds(100);
  troupe::clock::duration backoff_cap = std::chrono::seconds(1);
};

// What the table asks its owner when it starts a node.
struct slot_hooks {
  // The launch spec of `slot` (`spare`: into the spare partition); an error refuses the launch.
  std::function<expected<cluster::node_spec>(const node_slot& slot, bool spare)> spec_of;
  // After each launch, the slot holding its handle (logs, the master's watch); may be empty.
  std::function<void(node_slot& slot)> launched;
};

// What an exit report meant for its slot.
struct exit_verdict {
  enum class kind {
    stale,     // not the slot's current process (an older handle, an unknown node): ignored
    recorded,  // the job is ending: recorded, nothing else
    left,      // a node that was leaving (scaled away)
    demoted,   // a worker leaving to come back as spare (spare mode): due to relaunch now
    died,      // a wanted node: the owner decides (died(), or fails the job)
  };
  kind what = kind::stale;
  node_slot* slot = nullptr;
};

// A wanted node's death, counted.
struct death_verdict {
  bool give_up = false;    // more than max_deaths deaths within death_window: not relaunched
  std::size_t deaths = 0;  // within the window
  troupe::clock::time_point relaunch_at;
};

struct scale_result {
  std::uint32_t from = 0, to = 0;
  std::vector<std::string> launched, leaving;
  std::vector<std::string> demoted;  // spare mode: running own workers now beyond the target (SIGTERMed)
  std::string deferred;              // a launch the cluster manager's outage put off (its error)
  std::string error;                 // a launch that failed otherwise: the job cannot go on
};

struct relaunch_failure {
  std::string name;
  error why;
};

class slot_table {
 public:
  slot_table(troupe::clock& clk, slot_policy p) : clock_(clk), policy_(p) {}
  slot_table(const slot_table&) = delete;
  slot_table& operator=(const slot_table&) = delete;

  void set_policy(const slot_policy& p) { policy_ = p; }
  // The launcher every launch, signal and fence goes through; before the first launch.
  void bind(cluster::launcher& l, slot_hooks h);

  // A resumed job: incarnations continue after the dead runner's, worker indices after its highest.
  void resume_after(const cluster::nodes_file& old);
  std::uint64_t first_incarnation(const std::string& name) const;

  // Adds the slot of a node (master, PS shard) and launches it.
  expected<void> start(cluster::node_role role, std::size_t index);
  expected<void> launch(node_slot& slot);

  // Records an exit report: the slot's handle is gone and `ended` says how (see exit_verdict).
  exit_verdict on_exit(const cluster::node_handle& h, const cluster::exit_status& s, bool ending);
  // Counts the death of a wanted node (a preemption is no death) and, unless it gives up, schedules
  // its next incarnation (a restart) after the backoff.
  death_verdict died(node_slot& slot, const cluster::exit_status& s);
  // An end that was not the node's doing (it could not reach the master from a host cut off): no
  // death counted (the give-up rule), its next incarnation launched after `delay`.
  void retry_later(node_slot& slot, troupe::clock::duration delay);
  // Launches the slots whose backoff has passed; the launches that failed.
  std::vector<relaunch_failure> relaunch_due();
  // The earliest scheduled relaunch, if any (the loop wakes for it).
  std::optional<troupe::clock::time_point> next_relaunch() const;

  // The master's membership (from incarnation `master` of it): marks the slots it lists as joined
  // and seen, and returns the running ones it listed alive before and lists no more: declared dead.
  // Members that are no slot of the table (started by hand) keep their names from new workers.
  std::vector<node_slot*> declared_dead(const std::vector<cluster::member>& members,
                                        std::uint64_t master_incarnation);
  // Wanted nodes launched and not joined that wait in the launcher's queue, by name, and why
  // (launcher::waiting_why: Slurm's "PENDING (Resources)").
  std::vector<std::pair<std::string, std::string>> waiting() const;
  // Fences the slot's process through the launcher; it is relaunched when its exit report comes.
  expected<void> fence(node_slot& slot);

  // Clamps to [min_workers, max_workers], then grows (new indices) or shrinks (the highest indices
  // leave: SIGTERM) the wanted workers to what the job keeps. With a host, the workers it adds are
  // launched there (node_slot::host), and the workers that leave are those running there first
  // (launcher::host_of: a drain), then the highest indices. In spare mode the job keeps
  // max_workers, and a scale down demotes the running own workers now beyond the target (by index:
  // a host chooses none of them): SIGTERM, then relaunched as spare, so the CPUs they held go to
  // whoever wants them (a spare worker promoted by a scale up keeps running as spare until it is
  // relaunched).
  scale_result scale_to(std::uint32_t workers, const std::string& host = "");
  // A worker the master refused for want of a slot (cluster::exit_no_worker_slot): not relaunched,
  // and the target goes down by one (to no less than min_workers).
  void retire_no_slot(node_slot& slot);
  // Workers of the master's membership the runner did not launch (`troupe node` by hand), alive or
  // starting, as of the last declared_dead(): they hold worker slots up to max_workers.
  std::uint32_t hand_workers() const { return hand_workers_; }
  // The most workers the runner launches: max_workers less the hand workers (min_workers at least).
  std::uint32_t max_launched() const;
  // Sets the target alone (clamped); the next scale_to() acts on it (and puts the workers it adds on
  // `host`, the last one named, unless it names its own).
  void set_target(std::uint32_t workers, const std::string& host = "");
  // The job ends: no slot is wanted any more, none relaunched; running nodes get `sig` (0: none).
  // `which`: the workers alone, or the other roles alone (the runner stops the workers first: each
  // hands its task back to the master, its pushes to the PS shards, before those stop), or all.
  enum class roles { all, workers, others };
  void stop_all(int sig, roles which = roles::all);

  std::uint32_t target() const { return target_; }
  std::uint32_t running_workers() const;   // wanted workers (running, starting or due to relaunch)
  std::uint32_t launched_workers() const;  // wanted workers with a handle (running or queued)
  std::uint32_t workers_kept() const;      // target, or max_workers in spare mode
  std::uint64_t restarts() const { return restarts_; }
  node_slot* find(const std::string& name);
  const std::map<std::string, node_slot>& slots() const { return slots_; }

 private:
  node_slot& fresh(const std::string& name);
  bool spare_slot(const node_slot& slot) const;
  std::size_t free_place() const;
  troupe::clock::duration backoff(std::size_t deaths) const;
  void grow(scale_result& r);
  // A grow's launch of `name` (on `host`, "" for anywhere) refused with `e`: deferred through an
  // outage, the target lowered where the hosts are full, else the scale's error.
  void launch_failed(const std::string& name, const error& e, const std::string& host, scale_result& r);
  void shrink(scale_result& r, const std::string& host);
  void demote(scale_result& r);

  troupe::clock& clock_;
  slot_policy policy_;
  cluster::launcher* launcher_ = nullptr;
  slot_hooks hooks_;
  std::map<std::string, node_slot> slots_;
  std::uint32_t target_ = 0;
  std::uint64_t restarts_ = 0;
  std::size_t next_worker_index_ = 0;
  std::string grow_host_;  // where the next grow's workers go (empty: where the launcher puts them)
  std::map<std::string, std::uint64_t> resumed_incarnations_;
  std::set<std::string> foreign_;  // names of members the runner did not launch (troupe node by hand)
  std::uint32_t hand_workers_ = 0;
};

}  // namespace troupe::control
