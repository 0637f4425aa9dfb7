#include "supervisor_actor.hpp"

#include <spdlog/spdlog.h>

#include <caf/actor_system.hpp>
#include <caf/response_promise.hpp>
#include <caf/system_messages.hpp>

#include "troupe/supervision/caf_errors.hpp"

namespace troupe::supervision {
namespace {

std::uint64_t seed_of(std::uint64_t configured) {
  if (configured != 0) return configured;
  std::random_device rd;
  return (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
}

std::int64_t ms_of(duration d) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(d).count();
}

}  // namespace

supervisor_actor::supervisor_actor(caf::actor_config& cfg, name_registry* names, supervisor_config conf,
                                   std::vector<child_spec> specs)
    : caf::event_based_actor(cfg),
      names_(names),
      cfg_(std::move(conf)),
      initial_(std::move(specs)),
      intensity_(cfg_.max_restarts, cfg_.window),
      rng_(seed_of(cfg_.seed)) {}

caf::behavior supervisor_actor::make_behavior() {
  set_down_handler([this](caf::down_msg& m) { handle_down(m); });
  set_exit_handler([this](caf::exit_msg& m) { handle_exit(m); });
  start_initial_children(std::move(initial_));
  return {
      [this](start_child_atom, child_spec& spec) { return handle_start_child(spec); },
      [this](terminate_child_atom, const std::string& name) { return handle_terminate_child(name); },
      [this](which_children_atom) { return handle_which_children(); },
      [this](count_children_atom) { return handle_count_children(); },
      [this](restart_atom, const std::vector<std::string>& names) { handle_restart(names); },
      [this](kill_atom, const std::string& name, std::uint64_t gen) { handle_kill_timer(name, gen); },
  };
}

// Children still up when the supervisor dies abruptly (killed, or a bug threw) must not outlive
// it: nobody would restart or stop them. After an ordered shutdown there are none.
void supervisor_actor::on_exit() {
  for (auto& c : children_)
    if (c.handle) caf::anon_send_exit(c.handle, caf::exit_reason::kill);
  children_.clear();
  stop_jobs_.clear();
}

void supervisor_actor::start_initial_children(std::vector<child_spec> specs) {
  if (auto ok = cfg_.validate(); !ok) {
    begin_shutdown(make_caf_error(supervision_errc::invalid_spec, ok.err().context()));
    return;
  }
  for (auto& spec : specs) {
    caf::error err;
    if (auto ok = validate(spec); !ok)
      err = make_caf_error(supervision_errc::invalid_spec, ok.err().context());
    else if (index_of(spec.name) >= 0)
      err = make_caf_error(supervision_errc::duplicate_name, "child '" + spec.name + "'");
    if (!err) {
      children_.emplace_back().spec = std::move(spec);
      err = spawn_child(children_.size() - 1);
      if (err) children_.pop_back();
    }
    if (err) {
      spdlog::error("supervisor '{}': start failed: {}", cfg_.name, render(err));
      begin_shutdown(
          make_caf_error(supervision_errc::start_failed, "supervisor '" + cfg_.name + "': " + render(err)));
      return;
    }
  }
}

caf::result<caf::actor> supervisor_actor::handle_start_child(child_spec& spec) {
  if (shutting_down_)
    return make_caf_error(supervision_errc::shutting_down, "supervisor '" + cfg_.name + "'");
  if (auto ok = validate(spec); !ok)
    return make_caf_error(supervision_errc::invalid_spec, ok.err().context());
  if (index_of(spec.name) >= 0 || names_->get(spec.name))
    return make_caf_error(supervision_errc::duplicate_name, "child '" + spec.name + "'");
  children_.emplace_back().spec = std::move(spec);
  if (auto err = spawn_child(children_.size() - 1)) {
    children_.pop_back();
    return err;
  }
  return children_.back().handle;
}

caf::response_promise supervisor_actor::handle_terminate_child(const std::string& name) {
  auto rp = make_response_promise();
  if (index_of(name) < 0) {
    rp.deliver(make_caf_error(supervision_errc::unknown_child, "child '" + name + "'"));
    return rp;
  }
  enqueue_stop({name}, after_stop::remove, [rp]() mutable { rp.deliver(caf::unit); });
  return rp;
}

std::vector<child_info> supervisor_actor::handle_which_children() const {
  std::vector<child_info> out;
  out.reserve(children_.size());
  for (auto& c : children_) out.push_back({c.spec.name, c.handle, c.spec.restart, c.status, c.restarts});
  return out;
}

child_counts supervisor_actor::handle_count_children() const {
  child_counts n;
  n.specs = children_.size();
  for (auto& c : children_) {
    n.active += c.status == child_status::running ? 1 : 0;
    n.restarting += c.status == child_status::restarting ? 1 : 0;
  }
  return n;
}

void supervisor_actor::handle_down(const caf::down_msg& msg) {
  auto i = index_of(msg.source);
  if (i < 0) return;  // not (or no longer) one of ours
  auto idx = static_cast<std::size_t>(i);
  auto name = children_[idx].spec.name;
  emit(supervisor_event::kind::child_exited, name, render(msg.reason), duration::zero(),
       children_[idx].restarts);
  names_->erase_if(name, msg.source);
  children_[idx].handle = caf::actor{};
  if (children_[idx].status == child_status::stopping) {
    if (stopping_ == name) {
      stopping_.clear();
      apply_after(idx, stop_jobs_.front().then);
      pump_stops();
    }
    return;
  }
  handle_failure(idx, msg.reason);
}

void supervisor_actor::handle_exit(const caf::exit_msg& msg) {
  // A normal exit_msg only says a linked actor finished; anything else asks us to stop.
  if (!msg.reason) return;
  begin_shutdown(msg.reason);
}

void supervisor_actor::handle_restart(const std::vector<std::string>& names) {
  if (shutting_down_) return;
  for (auto& name : names) {
    auto i = index_of(name);
    if (i < 0 || children_[i].status != child_status::restarting) continue;  // done by another timer
    ++children_[i].restarts;
    if (auto err = spawn_child(static_cast<std::size_t>(i))) {
      // Counts as a failure of the child: the strategy stops what this loop already started.
      handle_failure(static_cast<std::size_t>(i), err);
      return;
    }
  }
}

void supervisor_actor::handle_kill_timer(const std::string& name, std::uint64_t generation) {
  auto i = index_of(name);
  if (i < 0) return;
  auto& c = children_[i];
  if (c.status != child_status::stopping || c.generation != generation || !c.handle) return;
  spdlog::warn("supervisor '{}': child '{}' did not stop within {} ms, killing it", cfg_.name, name,
               c.spec.shutdown.count());
  emit(supervisor_event::kind::child_killed, name, "shutdown timeout");
  send_exit(c.handle, caf::exit_reason::kill);
}

std::ptrdiff_t supervisor_actor::index_of(std::string_view name) const {
  for (std::size_t i = 0; i < children_.size(); ++i)
    if (children_[i].spec.name == name) return static_cast<std::ptrdiff_t>(i);
  return -1;
}

std::ptrdiff_t supervisor_actor::index_of(const caf::actor_addr& addr) const {
  for (std::size_t i = 0; i < children_.size(); ++i)
    if (children_[i].handle && children_[i].handle.address() == addr) return static_cast<std::ptrdiff_t>(i);
  return -1;
}

caf::error supervisor_actor::spawn_child(std::size_t idx) {
  auto& c = children_[idx];
  auto me = caf::actor_cast<caf::actor>(this);
  spawn_context ctx{home_system(), *names_, c.spec.name, c.restarts, me};
  caf::actor h;
  std::string why;
  try {
    h = c.spec.start(ctx);
    if (!h) why = "factory returned no actor";
  } catch (const std::exception& e) {
    why = std::string("factory threw: ") + e.what();
  } catch (...) {
    why = "factory threw a non-standard exception";
  }
  if (!h) {
    spdlog::warn("supervisor '{}': child '{}' failed to start: {}", cfg_.name, c.spec.name, why);
    emit(supervisor_event::kind::start_failed, c.spec.name, why, duration::zero(), c.restarts);
    return make_caf_error(supervision_errc::start_failed, "child '" + c.spec.name + "': " + why);
  }
  monitor(h);
  c.handle = h;
  c.status = child_status::running;
  ++c.generation;
  c.started_at = clock().now();
  names_->put(c.spec.name, h);
  emit(supervisor_event::kind::child_started, c.spec.name, {}, duration::zero(), c.restarts);
  return {};
}

void supervisor_actor::handle_failure(std::size_t idx, const caf::error& reason) {
  auto& c = children_[idx];
  c.handle = caf::actor{};
  if (shutting_down_) {
    c.status = child_status::stopped;
    return;
  }
  auto type = c.spec.restart;
  if (type == restart_type::temporary || (type == restart_type::transient && is_normal_exit(reason))) {
    remove_child(c.spec.name);
    return;
  }
  auto now = clock().now();
  if (!intensity_.record(now)) {
    c.status = child_status::stopped;
    give_up(c.spec.name, reason);
    return;
  }
  if (now - c.started_at >= cfg_.backoff_reset_after) c.attempt = 0;
  auto delay = cfg_.backoff.delay(c.attempt, rng_);
  ++c.attempt;
  c.status = child_status::restarting;
  spdlog::warn("supervisor '{}': child '{}' stopped ({}), restart in {} ms", cfg_.name, c.spec.name,
               render(reason), ms_of(delay));
  emit(supervisor_event::kind::restart_scheduled, c.spec.name, render(reason), delay, c.restarts + 1);
  restart_by_strategy(idx, delay);
}

// Stops the running members of the failed child's group (reverse start order), then schedules
// the group's restart (start order) after `delay`.
void supervisor_actor::restart_by_strategy(std::size_t idx, duration delay) {
  auto group = restart_group(idx);
  std::vector<std::string> to_stop;
  for (auto it = group.rbegin(); it != group.rend(); ++it)
    if (children_[index_of(*it)].status == child_status::running) to_stop.push_back(*it);
  // A group restart waits for stops already under way (a sibling being stopped for an earlier
  // failure), so the group comes back once, together; one_for_one needs no one else.
  if (to_stop.empty() && (cfg_.strat == strategy::one_for_one || stop_jobs_.empty())) {
    schedule_restart(std::move(group), delay);
    return;
  }
  enqueue_stop(std::move(to_stop), after_stop::restart,
               [this, group, delay]() mutable { schedule_restart(std::move(group), delay); });
}

std::vector<std::string> supervisor_actor::restart_group(std::size_t idx) const {
  std::vector<std::string> out;
  for (std::size_t i = 0; i < children_.size(); ++i) {
    bool in =
        i == idx || cfg_.strat == strategy::one_for_all || (cfg_.strat == strategy::rest_for_one && i > idx);
    if (in) out.push_back(children_[i].spec.name);
  }
  return out;
}

void supervisor_actor::schedule_restart(std::vector<std::string> names, duration delay) {
  if (shutting_down_) return;
  if (delay <= duration::zero())
    send(this, restart_atom::value, std::move(names));
  else
    delayed_send(this, delay, restart_atom::value, std::move(names));
}

void supervisor_actor::give_up(const std::string& child_name, const caf::error& reason) {
  auto why = "supervisor '" + cfg_.name + "': child '" + child_name + "' needed more than " +
             std::to_string(cfg_.max_restarts) + " restarts within " + std::to_string(ms_of(cfg_.window)) +
             " ms; last exit: " + render(reason);
  spdlog::error("{}; giving up", why);
  emit(supervisor_event::kind::gave_up, child_name, why);
  begin_shutdown(make_caf_error(supervision_errc::intensity_exceeded, why));
}

void supervisor_actor::remove_child(const std::string& name) {
  auto i = index_of(name);
  if (i >= 0) children_.erase(children_.begin() + i);
}

void supervisor_actor::emit(supervisor_event::kind what, const std::string& child, std::string reason,
                            duration delay, std::uint32_t restarts) {
  if (!cfg_.on_event) return;
  try {
    cfg_.on_event(supervisor_event{what, cfg_.name, child, std::move(reason), delay, restarts});
  } catch (const std::exception& e) {
    spdlog::error("supervisor '{}': event hook threw: {}", cfg_.name, e.what());
  } catch (...) {
    spdlog::error("supervisor '{}': event hook threw", cfg_.name);
  }
}

std::string supervisor_actor::render(const caf::error& e) const {
  if (!e) return "normal";
  return home_system().render(e);
}

}  // namespace troupe::supervision
