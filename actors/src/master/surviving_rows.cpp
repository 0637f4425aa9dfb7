#include "surviving_rows.hpp"

#include <algorithm>

namespace troupe::actors {

void surviving_rows::note(const std::string& holder, const std::optional<rows>& r,
                          std::uint64_t replica_step) {
  auto& w = by_holder_[holder];
  if (replica_step > 0) w.replica_step = replica_step;
  if (!r) {
    w.recent.clear();  // no task trained now: an older report's rows are no lease of it any more
    return;
  }
  if (!w.recent.empty() &&
      (w.recent.back().held.id != r->held.id || w.recent.back().held.attempt != r->held.attempt))
    w.recent.clear();  // another task: the rows of the one before went with its report
  w.recent.push_back(*r);
  if (w.recent.size() > kept_reports) w.recent.pop_front();
}

void surviving_rows::note(const std::string& holder, schema::WorkerProgress::Reader p) {
  std::optional<rows> r;
  if (p.hasTask()) {
    auto t = p.getTask();
    r = rows{{t.getTaskId(), t.getAttempt(), t.getTrained(), t.getStep()}, t.getOnShards()};
  }
  note(holder, r, p.getReplicaStep());
}

std::uint64_t surviving_rows::furthest_step() const {
  std::uint64_t step = 0;
  for (const auto& [name, w] : by_holder_) step = std::max(step, w.replica_step);
  return step;
}

std::optional<storage::held_rows> surviving_rows::held(const worker& w, std::uint64_t others) {
  for (auto r = w.recent.rbegin(); r != w.recent.rend(); ++r)
    if (r->on_shards || (r->held.step > 0 && r->held.step <= others)) return r->held;
  return std::nullopt;
}

std::optional<surviving_rows::decision> surviving_rows::gone(const std::string& holder,
                                                             troupe::clock::time_point now,
                                                             troupe::clock::duration wait) {
  worker w;
  if (auto it = by_holder_.find(holder); it != by_holder_.end()) {
    w = std::move(it->second);
    by_holder_.erase(it);
  }
  const std::uint64_t others = furthest_step();
  const auto latest = held(w, others);
  // A survivor that has a step (it is in the ring, or was) reaches the dead worker's latest rows
  // unless they died with it: worth its next report, not whole tasks trained twice.
  const bool later = !w.recent.empty() && !w.recent.back().on_shards && w.recent.back().held.step > 0 &&
                     (!latest || latest->trained < w.recent.back().held.trained) && others > 0;
  if (!later) return decision{holder, latest};
  deferred_[holder] = {std::move(w), now + wait};
  return std::nullopt;
}

std::vector<surviving_rows::decision> surviving_rows::settle(troupe::clock::time_point now) {
  std::vector<decision> out;
  if (deferred_.empty()) return out;  // every tick: no walk over the workers
  const std::uint64_t others = furthest_step();
  for (auto it = deferred_.begin(); it != deferred_.end();) {
    const auto& w = it->second.w;
    if (w.recent.back().held.step <= others || now >= it->second.until) {
      out.push_back({it->first, held(w, others)});
      it = deferred_.erase(it);
    } else {
      ++it;
    }
  }
  return out;
}

std::vector<surviving_rows::decision> surviving_rows::restored(std::uint64_t step) {
  const auto lost = [step](const rows& r) { return !r.on_shards && r.held.step > step; };
  for (auto& [holder, w] : by_holder_) {
    w.replica_step = std::min(w.replica_step, step);
    std::erase_if(w.recent, lost);
  }
  std::vector<decision> out;
  for (auto& [holder, d] : deferred_) out.push_back({holder, held(d.w, step)});
  deferred_.clear();
  return out;
}

std::vector<std::string> surviving_rows::deferred() const {
  std::vector<std::string> out;
  for (const auto& [holder, d] : deferred_) out.push_back(holder);
  return out;
}

}  // namespace troupe::actors
