// A GoogleTest fixture on CAF's deterministic test coordinator: no scheduler threads, virtual
// time. Actors run only when the test calls run(); delayed messages (restart backoff, shutdown
// timeouts) fire only on advance(). Plus small test children and helpers.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/scheduler/test_coordinator.hpp>
#include <caf/send.hpp>

#include "troupe/supervision/caf_errors.hpp"
#include "troupe/supervision/name_registry.hpp"
#include "troupe/supervision/protocol.hpp"
#include "troupe/supervision/supervisor.hpp"

namespace troupe::supervision::test {

using namespace std::chrono_literals;
using event_kind = supervisor_event::kind;

using crash_atom = caf::atom_constant<caf::atom("t_crash")>;  // the child throws
using leave_atom = caf::atom_constant<caf::atom("t_leave")>;  // the child exits normally
using ping_atom = caf::atom_constant<caf::atom("t_ping")>;    // replies with its incarnation

// A child that crashes or leaves on request; with `ignore_exit` it traps exit messages and so
// only dies when killed.
inline caf::behavior test_child(caf::event_based_actor* self, std::uint32_t incarnation, bool ignore_exit) {
  if (ignore_exit) self->set_exit_handler([](caf::exit_msg&) {});
  return {
      [](crash_atom) { throw std::runtime_error("boom"); },
      [self](leave_atom) { self->quit(); },
      [incarnation](ping_atom) { return incarnation; },
  };
}

inline child_spec test_spec(std::string name, restart_type restart = restart_type::permanent,
                            bool ignore_exit = false, std::chrono::milliseconds shutdown = 1000ms) {
  child_spec s;
  s.name = std::move(name);
  s.restart = restart;
  s.shutdown = shutdown;
  s.start = [ignore_exit](spawn_context& ctx) {
    return ctx.system.spawn(test_child, ctx.restarts, ignore_exit);
  };
  return s;
}

// Where a watched actor's down_msg reason lands.
struct down_box {
  std::optional<caf::error> reason;
};

class det_fixture : public ::testing::Test {
 protected:
  det_fixture()
      : sys_(init(cfg_)), sched_(dynamic_cast<caf::scheduler::test_coordinator&>(sys_.scheduler())) {
    // A failing test may leave actors behind; never hang in ~actor_system because of it.
    sys_.await_actors_before_shutdown(false);
  }

  ~det_fixture() override {
    for (auto& s : sups_) caf::anon_send_exit(s, caf::exit_reason::kill);
    for (auto& k : keep_) caf::anon_send_exit(k, caf::exit_reason::kill);
    run();
  }

  static caf::actor_system_config& init(caf::actor_system_config& cfg) {
    cfg.set("scheduler.policy", caf::atom("testing"));
    cfg.set("logger.verbosity", caf::atom("quiet"));
    add_supervision_error_category(cfg);
    return cfg;
  }

  // Immediate restarts, no jitter, a generous intensity: tests narrow what they look at.
  supervisor_config config(strategy s = strategy::one_for_one, std::string name = "sup") {
    supervisor_config c;
    c.name = std::move(name);
    c.strat = s;
    c.max_restarts = 100;
    c.window = 10s;
    c.backoff.base = 0ms;
    c.backoff.max = 0ms;
    c.backoff.jitter = 0.0;
    c.backoff_reset_after = 1h;
    c.seed = 42;
    auto log = events_;
    c.on_event = [log](const supervisor_event& e) { log->push_back(e); };
    return c;
  }

  caf::actor start(supervisor_config c, std::vector<child_spec> specs) {
    auto sup = spawn_supervisor(sys_, names_, std::move(c), std::move(specs));
    sups_.push_back(sup);
    run();
    return sup;
  }

  void run() { sched_.run(); }
  void advance(caf::timespan d) {
    sched_.advance_time(d);
    run();
  }

  // Sends `msg` to the child currently registered as `name`, then runs.
  template <class Atom>
  void tell(const std::string& name, Atom msg) {
    auto a = names_.get(name);
    ASSERT_TRUE(a) << "no actor named " << name;
    caf::anon_send(a, msg);
    run();
  }

  std::shared_ptr<down_box> watch(const caf::actor& target) {
    auto box = std::make_shared<down_box>();
    // Held: an actor nobody references is terminated as unreachable.
    keep_.push_back(sys_.spawn([box, target](caf::event_based_actor* self) -> caf::behavior {
      self->monitor(target);
      self->set_down_handler([box, self](caf::down_msg& m) {
        box->reason = m.reason;
        self->quit();
      });
      return {[](int) {}};
    }));
    run();
    return box;
  }

  // A request from a throwaway actor; the result once the scheduler ran dry.
  template <class T, class... Ts>
  caf::expected<T> ask(const caf::actor& dest, Ts... xs) {
    auto out = std::make_shared<std::optional<caf::expected<T>>>();
    sys_.spawn([=](caf::event_based_actor* self) {
      self->request(dest, caf::infinite, xs...)
          .then([=](T& v) { *out = std::move(v); }, [=](caf::error& e) { *out = std::move(e); });
    });
    run();
    if (!*out) return caf::make_error(caf::sec::request_timeout);
    return std::move(**out);
  }

  // Like ask() for a request answered with no value; the error, or none.
  template <class... Ts>
  std::optional<caf::error> ask_void(const caf::actor& dest, Ts... xs) {
    auto out = std::make_shared<std::optional<caf::error>>();
    sys_.spawn([=](caf::event_based_actor* self) {
      self->request(dest, caf::infinite, xs...)
          .then([=]() { *out = caf::error{}; }, [=](caf::error& e) { *out = std::move(e); });
    });
    run();
    return *out;
  }

  // "kind:child" for each event, to compare sequences.
  std::vector<std::string> trace(std::size_t from = 0) const {
    std::vector<std::string> out;
    for (std::size_t i = from; i < events_->size(); ++i)
      out.push_back(std::string(to_string((*events_)[i].what)) + ":" + (*events_)[i].child);
    return out;
  }
  std::vector<supervisor_event> of_kind(event_kind k) const {
    std::vector<supervisor_event> out;
    for (auto& e : *events_)
      if (e.what == k) out.push_back(e);
    return out;
  }
  std::size_t mark() const { return events_->size(); }

  caf::actor_system_config cfg_;
  caf::actor_system sys_;
  caf::scheduler::test_coordinator& sched_;
  name_registry names_;
  std::shared_ptr<std::vector<supervisor_event>> events_ = std::make_shared<std::vector<supervisor_event>>();
  std::vector<caf::actor> sups_;
  std::vector<caf::actor> keep_;
};

}  // namespace troupe::supervision::test
