#include "gpu_rendezvous.hpp"

namespace troupe::actors {

namespace {
expected<void> check_text(const char* what, const std::string& s) {
  if (s.size() > wire::gpu_max_text)
    return make_unexpected(core_errc::invalid_argument, std::string("gpu comm post: ") + what +
                                                            " longer than " +
                                                            std::to_string(wire::gpu_max_text) + " bytes");
  return {};
}
wire::gpu_comm_info empty(std::uint64_t epoch) {
  wire::gpu_comm_info s;
  s.ring_epoch = epoch;
  return s;
}
}  // namespace

expected<void> gpu_rendezvous::check_fresh(std::uint64_t ring_epoch) const {
  if (ring_epoch < floor_)
    return make_unexpected(core_errc::out_of_range, "stale ring epoch " + std::to_string(ring_epoch) +
                                                        " (current " + std::to_string(floor_) + ")");
  return {};
}

wire::gpu_comm_info gpu_rendezvous::to_info(std::uint64_t epoch, const entry& e) {
  wire::gpu_comm_info s{epoch, e.ranks, {}, e.unique_id};
  for (const auto& [rank, p] : e.posted) s.posted.push_back(p);
  return s;
}

expected<wire::gpu_comm_info> gpu_rendezvous::add(const wire::gpu_comm_post& p) {
  if (auto f = check_fresh(p.ring_epoch); !f) return f.err();
  if (p.ranks == 0 || p.ranks > wire::gpu_max_ranks)
    return make_unexpected(core_errc::out_of_range, "gpu comm post: ring size " + std::to_string(p.ranks) +
                                                        " outside 1.." + std::to_string(wire::gpu_max_ranks));
  if (p.who.rank >= p.ranks)
    return make_unexpected(core_errc::out_of_range, "gpu comm post: rank " + std::to_string(p.who.rank) +
                                                        " outside a ring of " + std::to_string(p.ranks));
  for (auto [what, s] :
       {std::pair{"node", &p.who.node}, {"host", &p.who.host}, {"device uuid", &p.who.device_uuid}})
    if (auto c = check_text(what, *s); !c) return c.err();
  if (!p.unique_id.empty() && p.who.rank != 0)
    return make_unexpected(core_errc::invalid_argument, "gpu comm post: rank " + std::to_string(p.who.rank) +
                                                            " sent a unique id (only rank 0 does)");
  if (!p.unique_id.empty() && p.unique_id.size() != wire::gpu_unique_id_bytes)
    return make_unexpected(core_errc::invalid_argument,
                           "gpu comm post: unique id of " + std::to_string(p.unique_id.size()) +
                               " bytes (want " + std::to_string(wire::gpu_unique_id_bytes) + ")");
  auto found = epochs_.find(p.ring_epoch);
  if (found != epochs_.end() && found->second.ranks != p.ranks)
    return make_unexpected(core_errc::invalid_argument,
                           "gpu comm post: ring epoch " + std::to_string(p.ring_epoch) + " has " +
                               std::to_string(found->second.ranks) + " ranks, the post says " +
                               std::to_string(p.ranks));
  auto& e = epochs_[p.ring_epoch];
  e.ranks = p.ranks;
  e.posted[p.who.rank] = p.who;
  if (e.unique_id.empty()) e.unique_id = p.unique_id;
  while (epochs_.size() > max_epochs) epochs_.erase(epochs_.begin());
  auto it = epochs_.find(p.ring_epoch);
  if (it == epochs_.end()) return empty(p.ring_epoch);  // older than every kept epoch
  return to_info(p.ring_epoch, it->second);
}

expected<wire::gpu_comm_info> gpu_rendezvous::get(std::uint64_t ring_epoch) const {
  if (auto f = check_fresh(ring_epoch); !f) return f.err();
  auto it = epochs_.find(ring_epoch);
  if (it == epochs_.end()) return empty(ring_epoch);
  return to_info(ring_epoch, it->second);
}

void gpu_rendezvous::forget_before(std::uint64_t ring_epoch) {
  if (ring_epoch <= floor_) return;
  floor_ = ring_epoch;
  epochs_.erase(epochs_.begin(), epochs_.lower_bound(ring_epoch));
}

}  // namespace troupe::actors
