#include "troupe/supervision/name_registry.hpp"

#include <algorithm>
#include <map>
#include <mutex>

#include <caf/abstract_actor.hpp>
#include <caf/actor.hpp>
#include <caf/actor_addr.hpp>
#include <caf/actor_cast.hpp>

namespace troupe::supervision {
namespace {

// A subscriber. `mu` is held while the listener runs, so reset() returning means the listener is
// not running and never will again. Recursive: a listener may unsubscribe itself.
struct listener_entry {
  std::recursive_mutex mu;
  bool active = true;
  std::string name;  // empty: every name
  name_registry::listener fn;
};

}  // namespace

struct name_registry::impl {
  struct slot {
    caf::actor_addr addr;  // weak: never keeps the actor alive
    std::uint64_t generation = 0;
    bool present = false;
  };

  mutable std::mutex mu;
  std::map<std::string, slot, std::less<>> slots;
  std::map<std::uint64_t, std::shared_ptr<listener_entry>> listeners;
  std::uint64_t next_id = 1;

  std::vector<std::shared_ptr<listener_entry>> listeners_for(const std::string& name) const {
    std::vector<std::shared_ptr<listener_entry>> out;
    for (auto& [id, l] : listeners)
      if (l->name.empty() || l->name == name) out.push_back(l);
    return out;
  }

  static void notify(const std::vector<std::shared_ptr<listener_entry>>& ls, const std::string& name,
                     const caf::actor& now) {
    for (auto& l : ls) {
      std::lock_guard<std::recursive_mutex> g(l->mu);
      if (l->active) l->fn(name, now);
    }
  }

  // erase_if for an actor that terminated; the same notifications.
  bool erase_dead(const std::string& name, const caf::actor_addr& addr) {
    std::vector<std::shared_ptr<listener_entry>> ls;
    {
      std::lock_guard<std::mutex> g(mu);
      auto i = slots.find(name);
      if (i == slots.end() || !i->second.present || i->second.addr != addr) return false;
      i->second.present = false;
      i->second.addr = caf::actor_addr{};
      ls = listeners_for(name);
    }
    notify(ls, name, caf::actor{});
    return true;
  }

  void unsubscribe(std::uint64_t id) {
    std::shared_ptr<listener_entry> l;
    {
      std::lock_guard<std::mutex> g(mu);
      auto i = listeners.find(id);
      if (i == listeners.end()) return;
      l = i->second;
      listeners.erase(i);
    }
    std::lock_guard<std::recursive_mutex> g(l->mu);
    l->active = false;
  }
};

name_registry::subscription::subscription(subscription&& o) noexcept
    : owner_(std::move(o.owner_)), id_(std::exchange(o.id_, 0)) {}

name_registry::subscription& name_registry::subscription::operator=(subscription&& o) noexcept {
  if (this != &o) {
    reset();
    owner_ = std::move(o.owner_);
    id_ = std::exchange(o.id_, 0);
  }
  return *this;
}

name_registry::subscription::~subscription() {
  reset();
}

void name_registry::subscription::reset() noexcept {
  if (id_ == 0) return;
  if (auto owner = owner_.lock()) static_cast<name_registry::impl*>(owner.get())->unsubscribe(id_);
  owner_.reset();
  id_ = 0;
}

name_registry::name_registry() : impl_(std::make_shared<impl>()) {}
name_registry::~name_registry() = default;

std::uint64_t name_registry::put(const std::string& name, const caf::actor& actor) {
  std::vector<std::shared_ptr<listener_entry>> ls;
  std::uint64_t gen;
  {
    std::lock_guard<std::mutex> g(impl_->mu);
    auto& s = impl_->slots[name];
    s.addr = actor.address();
    s.present = true;
    gen = ++s.generation;
    ls = impl_->listeners_for(name);
  }
  impl::notify(ls, name, actor);
  // Take the name off the moment the actor terminates (before any down_msg is handled), unless
  // it was re-registered meanwhile. Runs at once if the actor is already gone.
  if (actor) {
    std::weak_ptr<impl> weak = impl_;
    actor->attach_functor([weak, name, addr = actor.address()](const caf::error&) {
      if (auto self = weak.lock()) self->erase_dead(name, addr);
    });
  }
  return gen;
}

bool name_registry::erase_if(const std::string& name, const caf::actor_addr& expected) {
  return impl_->erase_dead(name, expected);
}

bool name_registry::erase(const std::string& name) {
  std::vector<std::shared_ptr<listener_entry>> ls;
  {
    std::lock_guard<std::mutex> g(impl_->mu);
    auto i = impl_->slots.find(name);
    if (i == impl_->slots.end() || !i->second.present) return false;
    i->second.present = false;
    i->second.addr = caf::actor_addr{};
    ls = impl_->listeners_for(name);
  }
  impl::notify(ls, name, caf::actor{});
  return true;
}

caf::actor name_registry::get(std::string_view name) const {
  caf::actor_addr addr;
  {
    std::lock_guard<std::mutex> g(impl_->mu);
    auto i = impl_->slots.find(name);
    if (i == impl_->slots.end() || !i->second.present) return {};
    addr = i->second.addr;
  }
  // Upgrading a weak reference to an actor that has terminated yields an invalid handle.
  return caf::actor_cast<caf::actor>(addr);
}

std::uint64_t name_registry::generation(std::string_view name) const {
  std::lock_guard<std::mutex> g(impl_->mu);
  auto i = impl_->slots.find(name);
  return i == impl_->slots.end() ? 0 : i->second.generation;
}

std::vector<std::string> name_registry::names() const {
  std::lock_guard<std::mutex> g(impl_->mu);
  std::vector<std::string> out;
  for (auto& [n, s] : impl_->slots)
    if (s.present) out.push_back(n);
  return out;
}

std::size_t name_registry::size() const {
  std::lock_guard<std::mutex> g(impl_->mu);
  return std::count_if(impl_->slots.begin(), impl_->slots.end(), [](auto& kv) { return kv.second.present; });
}

name_registry::subscription name_registry::subscribe(const std::string& name, listener fn) {
  auto l = std::make_shared<listener_entry>();
  l->name = name;
  l->fn = std::move(fn);
  std::lock_guard<std::mutex> g(impl_->mu);
  auto id = impl_->next_id++;
  impl_->listeners.emplace(id, std::move(l));
  return subscription(std::weak_ptr<void>(impl_), id);
}

name_registry::subscription name_registry::subscribe_all(listener fn) {
  return subscribe("", std::move(fn));
}

}  // namespace troupe::supervision
