#include "dispatcher.hpp"

namespace troupe::serve {

const char* to_string(replica_phase p) {
  switch (p) {
    case replica_phase::loading:
      return "loading";
    case replica_phase::ready:
      return "ready";
    case replica_phase::draining:
      return "draining";
    case replica_phase::stopping:
      return "stopping";
  }
  return "?";
}

void dispatcher::add(const std::string& node, std::uint64_t incarnation, std::uint32_t generation,
                     std::size_t slot) {
  replica_info r;
  r.node = node;
  r.incarnation = incarnation;
  r.generation = generation;
  r.slot = slot;
  replicas_[node] = std::move(r);
}

bool dispatcher::set_ready(const std::string& node, std::uint64_t incarnation, const std::string& version,
                           const std::string& placement, int pid) {
  auto it = replicas_.find(node);
  if (it == replicas_.end() || it->second.incarnation != incarnation ||
      it->second.phase != replica_phase::loading)
    return false;
  it->second.phase = replica_phase::ready;
  it->second.version = version;
  it->second.placement = placement;
  it->second.pid = pid;
  return true;
}

const replica_info* dispatcher::find(const std::string& node) const {
  auto it = replicas_.find(node);
  return it == replicas_.end() ? nullptr : &it->second;
}

const replica_info* dispatcher::pick(std::uint32_t generation) {
  // In map order starting after the replica picked last: equally loaded replicas take turns.
  std::vector<replica_info*> order;
  order.reserve(replicas_.size());
  for (auto& [name, r] : replicas_) order.push_back(&r);
  replica_info* best = nullptr;
  std::size_t best_at = 0;
  for (std::size_t k = 0; k < order.size(); ++k) {
    std::size_t at = (turn_ + k) % order.size();
    replica_info* r = order[at];
    if (r->generation != generation || r->phase != replica_phase::ready || r->inflight >= pipeline_) continue;
    if (!best || r->inflight < best->inflight) {
      best = r;
      best_at = at;
    }
  }
  if (best) turn_ = best_at + 1;
  return best;
}

const batch& dispatcher::start(const std::string& node, std::vector<request_ptr> requests,
                               clock::time_point now) {
  auto& r = replicas_.at(node);
  ++r.inflight;
  batch b;
  b.id = next_batch_++;
  b.node = node;
  b.incarnation = r.incarnation;
  b.generation = r.generation;
  for (const auto& q : requests) b.rows += q->rows;
  b.requests = std::move(requests);
  b.sent = now;
  return flight_.emplace(b.id, std::move(b)).first->second;
}

std::optional<batch> dispatcher::finish(std::uint64_t batch_id) {
  auto it = flight_.find(batch_id);
  if (it == flight_.end()) return std::nullopt;
  batch b = std::move(it->second);
  flight_.erase(it);
  if (auto r = replicas_.find(b.node); r != replicas_.end() && r->second.inflight > 0) --r->second.inflight;
  return b;
}

std::vector<batch> dispatcher::remove(const std::string& node, std::optional<std::uint64_t> incarnation) {
  std::vector<batch> out;
  auto it = replicas_.find(node);
  if (it == replicas_.end() || (incarnation && it->second.incarnation != *incarnation)) return out;
  replicas_.erase(it);
  for (auto f = flight_.begin(); f != flight_.end();) {
    if (f->second.node == node) {
      out.push_back(std::move(f->second));
      f = flight_.erase(f);
    } else {
      ++f;
    }
  }
  return out;
}

std::vector<batch> dispatcher::overdue(clock::time_point now) {
  std::vector<batch> out;
  for (auto f = flight_.begin(); f != flight_.end();) {
    if (now - f->second.sent >= timeout_) {
      out.push_back(std::move(f->second));
      f = flight_.erase(f);
    } else {
      ++f;
    }
  }
  return out;
}

std::optional<clock::time_point> dispatcher::next_overdue() const {
  std::optional<clock::time_point> t;
  for (const auto& [id, b] : flight_)
    if (!t || b.sent + timeout_ < *t) t = b.sent + timeout_;
  return t;
}

std::vector<batch> dispatcher::abandon() {
  std::vector<batch> out;
  for (auto& [id, b] : flight_) out.push_back(std::move(b));
  flight_.clear();
  for (auto& [name, r] : replicas_) r.inflight = 0;
  return out;
}

void dispatcher::drain(std::uint32_t generation) {
  for (auto& [name, r] : replicas_)
    if (r.generation == generation && (r.phase == replica_phase::ready || r.phase == replica_phase::loading))
      r.phase = replica_phase::draining;
}

std::vector<std::string> dispatcher::drained() {
  std::vector<std::string> out;
  for (auto& [name, r] : replicas_) {
    if (r.phase == replica_phase::draining && r.inflight == 0) {
      r.phase = replica_phase::stopping;
      out.push_back(name);
    }
  }
  return out;
}

std::size_t dispatcher::count(std::uint32_t generation, replica_phase phase) const {
  std::size_t n = 0;
  for (const auto& [name, r] : replicas_) n += r.generation == generation && r.phase == phase;
  return n;
}

}  // namespace troupe::serve
