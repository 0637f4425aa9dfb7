// Stable names for actors within one node: "master", "dispenser", "ps/3", "worker/7".
//
// CAF's own registry only takes atoms (<= 10 characters) and knows nothing of restarts, so the
// node keeps one name_registry, shared by its supervisors (which put a child under its name at
// every start and take it off when it dies) and by everything that resolves actors by name (the
// transport bridge routing frames to `(node, name)`, actors talking to their peers).
//
// Entries hold weak references (caf::actor_addr): the registry never keeps an actor alive and so
// never makes ~actor_system wait. A registered actor's name is taken off the moment the actor
// terminates (an attached functor), before its supervisor even sees the down_msg, so a lookup
// after a crash returns an invalid handle until the restarted actor is put back.
//
// Thread-safety: every member is safe to call from any thread (scheduler threads, the transport's
// Asio thread). Callbacks run on the thread that made the change, after the lock is released;
// they must be quick and must not block (post a message to an actor instead).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <caf/fwd.hpp>

namespace troupe::supervision {

class name_registry {
 public:
  // Called with the name and its new actor, or with an invalid handle when the name went away.
  using listener = std::function<void(const std::string& name, const caf::actor& now)>;

  // Keeps a listener subscribed while alive; destroying or reset()ting it unsubscribes (after
  // which the listener is never called again, even from a concurrent change).
  class subscription {
   public:
    subscription() = default;
    subscription(subscription&&) noexcept;
    subscription& operator=(subscription&&) noexcept;
    subscription(const subscription&) = delete;
    subscription& operator=(const subscription&) = delete;
    ~subscription();
    void reset() noexcept;
    explicit operator bool() const noexcept { return id_ != 0; }

   private:
    friend class name_registry;
    subscription(std::weak_ptr<void> owner, std::uint64_t id) : owner_(std::move(owner)), id_(id) {}
    std::weak_ptr<void> owner_;
    std::uint64_t id_ = 0;
  };

  name_registry();
  ~name_registry();
  name_registry(const name_registry&) = delete;
  name_registry& operator=(const name_registry&) = delete;

  // Registers `actor` under `name`, replacing any previous holder. Returns the name's new
  // generation (1 for the first registration, +1 each time), so a watcher can tell a restarted
  // actor from the one it knew.
  std::uint64_t put(const std::string& name, const caf::actor& actor);

  // Removes `name` only while it still refers to `expected` (a supervisor taking a dead child off
  // must not remove the replacement another party registered meanwhile). Returns whether it did.
  bool erase_if(const std::string& name, const caf::actor_addr& expected);
  // Removes `name` whoever holds it.
  bool erase(const std::string& name);

  // The live actor under `name`, or an invalid handle (absent, or registered but dead).
  caf::actor get(std::string_view name) const;
  // The name's generation (0: never registered). Survives erase, so a re-registration after a
  // gap is still seen as new.
  std::uint64_t generation(std::string_view name) const;
  // Names currently registered (live or not yet taken off), sorted.
  std::vector<std::string> names() const;
  std::size_t size() const;

  // `fn` on every put/erase of `name`.
  subscription subscribe(const std::string& name, listener fn);
  // `fn` on every put/erase of any name.
  subscription subscribe_all(listener fn);

 private:
  struct impl;
  std::shared_ptr<impl> impl_;
};

}  // namespace troupe::supervision
