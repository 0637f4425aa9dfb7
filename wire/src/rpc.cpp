#include "troupe/wire/rpc.hpp"

#include <spdlog/spdlog.h>

namespace troupe::wire {

expected<void> send_reply(endpoint& net, const message& request, outbound&& answer, const std::string& from) {
  return net.send(request.from_node().name, std::string(request.from()), std::move(answer), from);
}

namespace {
// The longest real nap between two looks at the clock: a manual clock moved past a deadline is
// seen within it (the system clock's deadlines are met to within it too).
constexpr auto nap = std::chrono::milliseconds(20);
}  // namespace

expected<std::unique_ptr<rpc_client>> rpc_client::create(endpoint& net, std::string name, troupe::clock& clk,
                                                         std::stop_token stop) {
  std::unique_ptr<rpc_client> c(new rpc_client(net, std::move(name), clk, std::move(stop)));
  rpc_client* self = c.get();
  if (auto r = net.register_name(c->name_, [self](const message& m) { self->on_reply(m); }); !r)
    return r.err();
  return c;
}

rpc_client::~rpc_client() {
  net_.unregister_name(name_);
}

std::optional<std::uint64_t> rpc_client::incarnation_of(const std::string& node) const {
  for (const auto& p : net_.peers())
    if (p.name == node) return p.incarnation;
  return std::nullopt;
}

void rpc_client::on_reply(const message& m) {
  std::uint64_t id = m.correlation_id();
  std::lock_guard lk(mu_);
  auto it = pending_.find(id);
  if (it == pending_.end()) return;  // late reply of a request that timed out, or not a reply
  it->second = m;
  cv_.notify_all();
}

void rpc_client::wait(std::uint64_t id, std::chrono::milliseconds most) {
  auto ready = [&] {
    auto p = pending_.find(id);
    return p == pending_.end() || p->second.has_value() || stop_.stop_requested();
  };
  const auto deadline = clock_.now() + most;
  std::unique_lock lk(mu_);
  troupe::wait_until(clock_, cv_, lk, deadline, ready, nap);
}

expected<std::uint64_t> rpc_client::start(request& req, std::chrono::milliseconds timeout) {
  std::uint64_t id = ++last_id_;
  req.out.set_correlation_id(id);
  {
    std::lock_guard lk(mu_);
    pending_[id] = std::nullopt;
  }
  if (auto s = net_.send(req.node, req.to, std::move(req.out), name_, timeout); !s) {
    std::lock_guard lk(mu_);
    pending_.erase(id);
    return s.err();
  }
  return id;
}

// Waits (holding `lk` on mu_) until every request in `ids` has its reply; returns "" then, else
// why not: the deadline passed, a node a request went to was replaced or went away (its reply
// will never come, so the call fails at once), or the stop token was requested.
std::string rpc_client::wait_all(std::unique_lock<std::mutex>& lk, const std::vector<request>& reqs,
                                 const std::map<std::string, std::optional<std::uint64_t>>& sent_to,
                                 const std::vector<std::uint64_t>& ids, std::chrono::milliseconds timeout) {
  auto gone = [&](const std::string& node) {
    const auto& sent = sent_to.at(node);
    return sent && incarnation_of(node) != sent;
  };
  auto deadline = clock_.now() + timeout;
  for (;;) {
    bool all = true;
    for (auto id : ids) all = all && pending_[id].has_value();
    if (all) return {};
    if (stop_.stop_requested()) return "stopped (this node is leaving) while waiting for ";
    auto now = clock_.now();
    if (now >= deadline) return "no reply within " + std::to_string(timeout.count()) + " ms from ";
    cv_.wait_for(lk, std::min<troupe::clock::duration>(deadline - now, nap));
    lk.unlock();
    std::string down;
    for (auto& r : reqs)
      if (gone(r.node)) down = r.node;
    lk.lock();
    if (!down.empty()) return down + " went down before replying: ";
  }
}

expected<std::vector<message>> rpc_client::call_all(std::vector<request>& reqs,
                                                    std::chrono::milliseconds timeout) {
  // The incarnations before anything is sent: a node whose connection closes between a send and
  // this look is still seen as gone (looked at after, it read "not connected": never gone, and the
  // call waited out its whole timeout).
  std::map<std::string, std::optional<std::uint64_t>> sent_to;
  for (const auto& r : reqs) sent_to[r.node] = incarnation_of(r.node);
  std::vector<std::uint64_t> ids;
  ids.reserve(reqs.size());
  auto forget = [&] {
    std::lock_guard lk(mu_);
    for (auto id : ids) pending_.erase(id);
  };
  for (auto& r : reqs) {
    auto id = start(r, timeout);
    if (!id) {
      forget();
      return id.err();
    }
    ids.push_back(*id);
  }
  std::unique_lock lk(mu_);
  std::string failed = wait_all(lk, reqs, sent_to, ids, timeout);
  if (!failed.empty()) {
    std::string silent;
    for (std::size_t i = 0; i < reqs.size(); ++i)
      if (!pending_[ids[i]]) silent += (silent.empty() ? "" : ", ") + reqs[i].node + "/" + reqs[i].to;
    for (auto id : ids) pending_.erase(id);
    return make_unexpected(core_errc::io_error, failed + silent);
  }
  std::vector<message> out;
  out.reserve(ids.size());
  for (auto id : ids) {
    out.push_back(std::move(*pending_[id]));
    pending_.erase(id);
  }
  return out;
}

expected<message> rpc_client::call(request req, std::chrono::milliseconds timeout) {
  std::vector<request> v;
  v.push_back(std::move(req));
  auto r = call_all(v, timeout);
  if (!r) return r.err();
  return std::move((*r)[0]);
}

expected<std::uint64_t> rpc_client::send(request req, std::chrono::milliseconds timeout) {
  auto id = start(req, timeout);
  if (!id) return id;
  sent_[*id] = in_flight{req.node, incarnation_of(req.node), clock_.now() + timeout, timeout};
  return id;
}

std::optional<expected<message>> rpc_client::poll(std::uint64_t id) {
  auto it = sent_.find(id);
  if (it == sent_.end())
    return expected<message>(make_unexpected(core_errc::invalid_argument, "no such request"));
  auto done = [&](expected<message> r) -> std::optional<expected<message>> {
    {
      std::lock_guard lk(mu_);
      pending_.erase(id);
    }
    sent_.erase(it);
    return r;
  };
  {
    std::lock_guard lk(mu_);
    auto p = pending_.find(id);
    if (p != pending_.end() && p->second) {
      message m = std::move(*p->second);
      pending_.erase(p);
      sent_.erase(it);
      return expected<message>(std::move(m));
    }
  }
  const auto& f = it->second;
  if (clock_.now() >= f.deadline)
    return done(make_unexpected(
        core_errc::io_error, "no reply within " + std::to_string(f.timeout.count()) + " ms from " + f.node));
  if (f.incarnation && incarnation_of(f.node) != f.incarnation)
    return done(make_unexpected(core_errc::io_error, f.node + " went down before replying"));
  return std::nullopt;
}

}  // namespace troupe::wire
