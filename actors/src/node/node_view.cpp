#include "node_view.hpp"

namespace troupe::actors {

bool node_view::from_current_master(const wire::membership_msg& msg) const {
  std::lock_guard lk(mu_);
  return msg.master_incarnation >= master_incarnation_;
}

bool node_view::take(const wire::membership_msg& msg, bool listed) {
  {
    std::lock_guard lk(mu_);
    bool newer_master = msg.master_incarnation > master_incarnation_;
    if (!newer_master && msg.view.epoch() <= view_.epoch()) {
      // The view held, sent whole again to this node after it joined again (back from the master's
      // pause, the view unchanged): a member again, nothing else new. Refused as "not newer", it left
      // the node re-joining every 250 ms for the rest of the job.
      if (msg.view.epoch() == view_.epoch() && msg.master_incarnation == master_incarnation_ && listed)
        joined_ = true;
      return false;
    }
    master_incarnation_ = msg.master_incarnation;
    joined_ = listed;
    view_ = msg.view;
    if (!leaving_) ring_epoch_.store(msg.ring_epoch, std::memory_order_release);
  }
  changed_.notify_all();
  return true;
}

std::optional<cluster::membership_view> node_view::expand(const wire::membership_msg& delta) const {
  std::lock_guard lk(mu_);
  if (delta.master_incarnation != master_incarnation_) return std::nullopt;
  auto v = wire::expand_delta(view_, delta);  // refuses a delta whose base is not the view held
  if (!v) return std::nullopt;
  return std::move(*v);
}

void node_view::leave() {
  {
    std::lock_guard lk(mu_);
    if (!leaving_) at_leave_ = view_;
    leaving_ = true;
    ring_epoch_.store(leaving_ring_epoch, std::memory_order_release);
  }
  changed_.notify_all();
}

bool node_view::leaving() const {
  std::lock_guard lk(mu_);
  return leaving_;
}

cluster::membership_view node_view::view_at_leave() const {
  std::lock_guard lk(mu_);
  return leaving_ ? at_leave_ : view_;
}

void node_view::master_down() {
  std::lock_guard lk(mu_);
  joined_ = false;
}

bool node_view::joined() const {
  std::lock_guard lk(mu_);
  return joined_;
}

std::uint64_t node_view::epoch() const {
  std::lock_guard lk(mu_);
  return view_.epoch();
}

std::uint64_t node_view::master_incarnation() const {
  std::lock_guard lk(mu_);
  return master_incarnation_;
}

cluster::membership_view node_view::view() const {
  std::lock_guard lk(mu_);
  return view_;
}

std::pair<cluster::membership_view, std::uint64_t> node_view::view_and_ring_epoch() const {
  std::lock_guard lk(mu_);
  return {view_, ring_epoch_.load(std::memory_order_acquire)};
}

void node_view::wait_ring_change(std::uint64_t seen, troupe::clock::time_point deadline, troupe::clock& clk) {
  std::unique_lock lk(mu_);
  troupe::wait_until(clk, changed_, lk, deadline,
                     [&] { return ring_epoch_.load(std::memory_order_acquire) != seen; });
}

}  // namespace troupe::actors
