#include "slot_table.hpp"

#include <algorithm>
#include <csignal>
#include <set>
#include <utility>

#include <spdlog/spdlog.h>

#include "troupe/cluster/errc.hpp"

namespace troupe::control {

void slot_table::bind(cluster::launcher& l, slot_hooks h) {
  launcher_ = &l;
  hooks_ = std::move(h);
}

void slot_table::resume_after(const cluster::nodes_file& old) {
  for (const auto& n : old.nodes) {
    auto& inc = resumed_incarnations_[n.id.name];
    inc = std::max(inc, n.id.incarnation + 1);
    if (n.role == cluster::node_role::worker) {
      auto dash = n.id.name.rfind('-');
      auto index = dash == std::string::npos ? 0 : std::strtoull(n.id.name.c_str() + dash + 1, nullptr, 10);
      next_worker_index_ = std::max<std::size_t>(next_worker_index_, index + 1);
    }
  }
}

std::uint64_t slot_table::first_incarnation(const std::string& name) const {
  auto it = resumed_incarnations_.find(name);
  return it == resumed_incarnations_.end() ? 0 : it->second;
}

expected<void> slot_table::start(cluster::node_role role, std::size_t index) {
  auto name = cluster::node_name(role, index);
  auto& slot = fresh(name);
  slot.id = {name, first_incarnation(name)};
  slot.role = role;
  slot.index = index;
  return launch(slot);
}

expected<void> slot_table::launch(node_slot& slot) {
  const bool spare = slot.role == cluster::node_role::worker && spare_slot(slot);
  auto ns = hooks_.spec_of(slot, spare);
  if (!ns) return ns.err();
  auto h = launcher_->launch(*ns);
  if (!h) return h.err();
  slot.handle = *h;
  slot.spare_launch = spare;
  slot.demoting = false;
  slot.host.clear();
  slot.seen_by_master.reset();
  slot.joined = false;
  slot.fenced = false;
  slot.ended.clear();
  slot.relaunch_at.reset();
  if (hooks_.launched) hooks_.launched(slot);
  return {};
}

exit_verdict slot_table::on_exit(const cluster::node_handle& h, const cluster::exit_status& s, bool ending) {
  auto it = slots_.find(h.id.name);
  if (it == slots_.end() || !it->second.handle || it->second.handle->serial != h.serial) return {};
  auto& slot = it->second;
  slot.handle.reset();
  slot.ended = slot.fenced ? "fenced: " + s.to_string() : s.to_string();
  if (ending) return {exit_verdict::kind::recorded, &slot};
  if (std::exchange(slot.demoting, false) && slot.wanted) {
    slot.id.incarnation += 1;
    slot.relaunch_at = clock_.now();
    return {exit_verdict::kind::demoted, &slot};
  }
  return {slot.wanted ? exit_verdict::kind::died : exit_verdict::kind::left, &slot};
}

troupe::clock::duration slot_table::backoff(std::size_t deaths) const {
  if (deaths <= 1) return troupe::clock::duration::zero();
  auto d = policy_.backoff_base;
  for (std::size_t i = 2; i < deaths && d < policy_.backoff_cap; ++i) d *= 2;
  return std::min(d, policy_.backoff_cap);
}

death_verdict slot_table::died(node_slot& slot, const cluster::exit_status& s) {
  auto now = clock_.now();
  // A preempted node did nothing wrong: it comes back when the cluster has room again.
  if (s.state != "PREEMPTED") slot.deaths.push_back(now);
  while (!slot.deaths.empty() && now - slot.deaths.front() > policy_.death_window) slot.deaths.pop_front();
  death_verdict v;
  v.deaths = slot.deaths.size();
  if (v.deaths > policy_.max_deaths) {
    v.give_up = true;
    return v;
  }
  v.relaunch_at = now + backoff(v.deaths);
  slot.relaunch_at = v.relaunch_at;
  slot.id.incarnation += 1;
  restarts_ += 1;
  return v;
}

void slot_table::retry_later(node_slot& slot, troupe::clock::duration delay) {
  slot.relaunch_at = clock_.now() + delay;
  slot.id.incarnation += 1;
  restarts_ += 1;
}

std::vector<relaunch_failure> slot_table::relaunch_due() {
  std::vector<relaunch_failure> failed;
  const auto now = clock_.now();
  for (auto& [name, slot] : slots_) {
    if (!slot.relaunch_at || *slot.relaunch_at > now) continue;
    slot.relaunch_at.reset();
    if (!slot.wanted || slot.handle) continue;
    if (auto r = launch(slot); !r) {
      // The cluster manager does not answer (the exit came just before it went): not the node's
      // failure, nor the job's; tried again each second until it answers.
      if (launcher_->outage())
        slot.relaunch_at = now + std::chrono::seconds(1);
      else
        failed.push_back({name, r.err()});
    }
  }
  return failed;
}

std::optional<troupe::clock::time_point> slot_table::next_relaunch() const {
  std::optional<troupe::clock::time_point> next;
  for (const auto& [name, slot] : slots_)
    if (slot.relaunch_at && slot.wanted && (!next || *slot.relaunch_at < *next)) next = slot.relaunch_at;
  return next;
}

std::vector<node_slot*> slot_table::declared_dead(const std::vector<cluster::member>& members,
                                                  std::uint64_t master_incarnation) {
  std::vector<node_slot*> dead;
  // Members the runner never launched (`troupe node` by hand): their names are taken, and the workers
  // among them hold worker slots.
  hand_workers_ = 0;
  for (const auto& m : members)
    if (!slots_.count(m.id.name)) {
      foreign_.insert(m.id.name);
      hand_workers_ += m.role == cluster::node_role::worker && m.state != cluster::member_state::leaving;
    }
  for (auto& [name, slot] : slots_) {
    if (slot.role == cluster::node_role::master || !slot.handle || !slot.wanted || slot.fenced) continue;
    auto m = std::find_if(members.begin(), members.end(),
                          [&](const cluster::member& x) { return x.id.name == name; });
    if (m != members.end() && m->id == slot.id) {
      slot.joined = true;
      if (m->state == cluster::member_state::alive) slot.seen_by_master = master_incarnation;
      // Leaving of its own accord (a preemption's SIGTERM): its disappearance is no death.
      if (m->state == cluster::member_state::leaving) slot.seen_by_master.reset();
      continue;
    }
    // One whose end the launcher has already seen (its exit report is on its way) needs no fence:
    // a preempted Slurm worker was fenced ("no such node") and counted as a restart.
    if (launcher_)
      if (auto ended = launcher_->poll(*slot.handle); ended && ended->has_value()) continue;
    if (slot.seen_by_master == master_incarnation) dead.push_back(&slot);
  }
  return dead;
}

std::vector<std::pair<std::string, std::string>> slot_table::waiting() const {
  std::vector<std::pair<std::string, std::string>> out;
  if (!launcher_) return out;
  for (const auto& [name, slot] : slots_)
    if (slot.handle && slot.wanted && !slot.joined)
      if (auto why = launcher_->waiting_why(*slot.handle); !why.empty()) out.emplace_back(name, why);
  return out;
}

expected<void> slot_table::fence(node_slot& slot) {
  if (!slot.handle)
    return make_unexpected(core_errc::invalid_argument, slot.id.to_string() + " is not running");
  if (auto r = launcher_->fence(*slot.handle); !r) return r;
  slot.fenced = true;
  return {};
}

std::uint32_t slot_table::max_launched() const {
  return std::max(policy_.min_workers, policy_.max_workers - std::min(hand_workers_, policy_.max_workers));
}

void slot_table::retire_no_slot(node_slot& slot) {
  slot.wanted = false;
  slot.relaunch_at.reset();
  if (target_ > policy_.min_workers) --target_;
}

void slot_table::set_target(std::uint32_t workers, const std::string& host) {
  target_ = std::clamp(workers, policy_.min_workers, max_launched());
  if (!host.empty()) grow_host_ = host;
}

scale_result slot_table::scale_to(std::uint32_t workers, const std::string& host) {
  scale_result r;
  r.from = target_;
  set_target(workers, host);
  r.to = target_;
  if (r.to > r.from)
    spdlog::info("scale: {} -> {} workers{}", r.from, r.to,
                 grow_host_.empty() ? "" : ", new ones on " + grow_host_);
  else if (r.to < r.from)
    spdlog::info("scale: {} -> {} workers{}", r.from, r.to,
                 host.empty() ? "" : ", those on " + host + " first");
  grow(r);
  if (r.error.empty()) shrink(r, host);
  if (r.error.empty()) demote(r);
  return r;
}

// New workers get new indices, never a departed worker's name (the master would refuse its
// incarnation 0 as stale, and a relaunch would count as a restart).
void slot_table::grow(scale_result& r) {
  // For this scale's workers only, whether they launch or not: a later scale (or refill) goes anywhere
  // (an unmet --host carried over to the next scale without one).
  const std::string host = std::exchange(grow_host_, {});
  while (running_workers() < workers_kept()) {
    std::size_t i = next_worker_index_++;
    auto name = cluster::node_name(cluster::node_role::worker, i);
    // Nor a name a node started by hand holds: the runner's worker-3 beside a hand-started worker-3
    // never joined, its connection to the master refused as a duplicate ~50 times a second.
    if (foreign_.count(name)) continue;
    auto place = free_place();
    auto& slot = fresh(name);
    slot.id = {name, first_incarnation(name)};
    slot.index = i;
    slot.place = place;
    slot.host = host;
    if (auto l = launch(slot); !l) {
      slots_.erase(name);
      next_worker_index_ = i;  // its name was never used: the next worker takes it
      return launch_failed(name, l.err(), host, r);
    }
    r.launched.push_back(name);
  }
}

void slot_table::launch_failed(const std::string& name, const error& e, const std::string& host,
                               scale_result& r) {
  if (launcher_->outage()) {  // submitted again when the controller answers
    spdlog::warn("cannot launch {} while the cluster manager does not answer: {}", name, e.to_string());
    r.deferred = e.to_string();
    grow_host_ = host;  // the host asked for still holds once the controller answers
    return;
  }
  // Every slot of the hosts taken: the job goes on with the workers it has, as an elastic job
  // does, when they are at least min_workers (it failed, at its start or on a `troupe scale` past
  // the hosts' slots). The target follows, so that nothing retries the launch in a loop.
  if (e == cluster::cluster_errc::insufficient_resources &&
      running_workers() >= std::max<std::uint32_t>(policy_.min_workers, 1)) {
    target_ = running_workers();
    spdlog::warn("cannot launch {}: {}: the job goes on with {} worker(s) (job.min_workers = {})", name,
                 e.to_string(), target_, policy_.min_workers);
    return;
  }
  r.error = "cannot launch " + name + ": " + e.to_string();
}

// The workers on `host` first (troupe scale --host: a shrink drains that host), then the highest
// indices leave (SIGTERM: the node stops, its task goes back to TODO). By index, not by the map's
// order of names, where worker-9 comes after worker-15.
void slot_table::shrink(scale_result& r, const std::string& host) {
  std::vector<std::pair<bool, node_slot*>> wanted;  // (on `host`, slot)
  for (auto& [name, s] : slots_)
    if (s.role == cluster::node_role::worker && s.wanted)
      wanted.emplace_back(!host.empty() && s.handle && launcher_->host_of(*s.handle) == host, &s);
  std::sort(wanted.begin(), wanted.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first : a.second->index > b.second->index;
  });
  for (auto it = wanted.begin(); it != wanted.end() && running_workers() > workers_kept(); ++it) {
    auto& slot = *it->second;
    slot.wanted = false;
    slot.relaunch_at.reset();
    if (slot.handle) (void)launcher_->signal(*slot.handle, SIGTERM);
    spdlog::info("scale: {} leaves", slot.id.to_string());
    r.leaving.push_back(slot.id.name);
  }
}

// Spare mode: an own worker's process holds its CPU in the worker partition, where other jobs' own
// workers cannot preempt it; beyond the target it leaves and comes back as spare (on_exit).
void slot_table::demote(scale_result& r) {
  if (!policy_.spare_mode) return;
  for (auto& [name, slot] : slots_) {
    if (slot.role != cluster::node_role::worker || !slot.wanted || !slot.handle || slot.spare_launch ||
        slot.demoting || slot.fenced || !spare_slot(slot))
      continue;
    slot.demoting = true;
    (void)launcher_->signal(*slot.handle, SIGTERM);
    spdlog::info("scale: {} is beyond the target: back as spare", slot.id.to_string());
    r.demoted.push_back(name);
  }
}

void slot_table::stop_all(int sig, roles which) {
  for (auto& [name, slot] : slots_) {
    const bool worker = slot.role == cluster::node_role::worker;
    if ((which == roles::workers && !worker) || (which == roles::others && worker)) continue;
    slot.wanted = false;
    slot.relaunch_at.reset();
    if (slot.handle && sig != 0) (void)launcher_->signal(*slot.handle, sig);
  }
}

std::uint32_t slot_table::running_workers() const {
  std::uint32_t n = 0;
  for (const auto& [name, s] : slots_)
    if (s.role == cluster::node_role::worker && s.wanted) ++n;
  return n;
}

std::uint32_t slot_table::launched_workers() const {
  std::uint32_t n = 0;
  for (const auto& [name, s] : slots_)
    if (s.role == cluster::node_role::worker && s.wanted && s.handle) ++n;
  return n;
}

std::uint32_t slot_table::workers_kept() const {
  return policy_.spare_mode ? policy_.max_workers : target_;
}

// A worker's class is decided when it is (re)launched: spare beyond the target's lowest indices.
bool slot_table::spare_slot(const node_slot& slot) const {
  if (!policy_.spare_mode) return false;
  std::uint32_t below = 0;
  for (const auto& [name, s] : slots_)
    if (s.role == cluster::node_role::worker && s.wanted && s.index < slot.index) ++below;
  return below >= target_;
}

// The lowest slot no worker process holds (a leaving one keeps its slot until it has exited).
std::size_t slot_table::free_place() const {
  std::set<std::size_t> used;
  for (const auto& [name, s] : slots_)
    if (s.role == cluster::node_role::worker && (s.wanted || s.handle)) used.insert(s.place);
  std::size_t p = 0;
  while (used.count(p)) ++p;
  return p;
}

// Default-initialised in place (a copy of a braced node_slot draws GCC 12's -Wmaybe-uninitialized).
node_slot& slot_table::fresh(const std::string& name) {
  slots_.erase(name);
  return slots_[name];
}

node_slot* slot_table::find(const std::string& name) {
  auto it = slots_.find(name);
  return it == slots_.end() ? nullptr : &it->second;
}

}  // namespace troupe::control
