#include "ps_window.hpp"

#include <algorithm>

#include "troupe/wire/messages.hpp"

namespace troupe::actors {

namespace {
// The longest wait between two looks at the worker's leave (rpc_client's own nap).
constexpr auto nap = std::chrono::milliseconds(20);

expected<void> push_accepted(const expected<message>& r) {
  if (!r) return r.err();
  auto err = r->body().getPsPushReply().getError();
  if (err.size() > 0) return make_unexpected(core_errc::io_error, r->from_node().name + ": " + err.cStr());
  return {};
}
}  // namespace

expected<ps_window::group> ps_window::send(std::vector<wire::rpc_channel::request>& reqs,
                                           std::chrono::milliseconds timeout) {
  reap();
  group g;
  g.reserve(reqs.size());
  for (auto& r : reqs) {
    auto id = rpc_.send(std::move(r), timeout);
    if (!id) {
      abandon(g);
      return id.err();
    }
    g.push_back(*id);
  }
  return g;
}

expected<message> ps_window::await_one(std::uint64_t id) {
  for (;;) {
    if (auto r = rpc_.poll(id)) return std::move(*r);
    if (stopping_()) {
      abandoned_.push_back(id);
      return make_unexpected(core_errc::io_error, "the worker is leaving: no more waits for the PS shards");
    }
    rpc_.wait(id, nap);
  }
}

expected<std::vector<message>> ps_window::await(const group& g) {
  std::vector<message> out;
  out.reserve(g.size());
  for (std::size_t i = 0; i < g.size(); ++i) {
    auto r = await_one(g[i]);
    if (!r) {
      abandon(group(g.begin() + static_cast<std::ptrdiff_t>(i) + 1, g.end()));
      return r.err();
    }
    out.push_back(std::move(*r));
  }
  return out;
}

expected<bool> ps_window::try_oldest(bool wait) {
  auto& g = pushes_.front();
  while (!g.empty()) {
    std::optional<expected<message>> r;
    if (wait)
      r = await_one(g.front());
    else if (!(r = rpc_.poll(g.front())))
      return false;
    // Resolved either way: answered, failed, or abandoned by await_one.
    g.erase(g.begin());
    if (auto ok = push_accepted(*r); !ok) {
      abandon_window();
      return ok.err();
    }
    if (on_push_reply_) on_push_reply_(**r);
  }
  pushes_.pop_front();
  return true;
}

expected<void> ps_window::collect() {
  reap();
  while (!pushes_.empty()) {
    auto done = try_oldest(false);
    if (!done) return done.err();
    if (!*done) break;
  }
  return {};
}

expected<void> ps_window::add_push(group g) {
  pushes_.push_back(std::move(g));
  if (auto c = collect(); !c) return c;
  while (pushes_.size() > max_pushes_)
    if (auto done = try_oldest(true); !done) return done.err();
  return {};
}

expected<void> ps_window::settle() {
  if (auto c = collect(); !c) return c;
  while (!pushes_.empty())
    if (auto done = try_oldest(true); !done) return done.err();
  return {};
}

void ps_window::abandon(const group& g) {
  abandoned_.insert(abandoned_.end(), g.begin(), g.end());
}

void ps_window::abandon_window() {
  for (const auto& g : pushes_) abandon(g);
  pushes_.clear();
}

void ps_window::reap() {
  std::erase_if(abandoned_, [&](std::uint64_t id) { return rpc_.poll(id).has_value(); });
}

}  // namespace troupe::actors
