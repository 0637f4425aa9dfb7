// An rpc_channel whose calls go straight to a record_server in the same process (tests of the
// record fetcher and the served data feed): no sockets; replies wait for poll(). Thread-safe (the
// fetcher's thread calls it).
#pragma once

#include <algorithm>
#include <map>
#include <mutex>

#include "master/record_server.hpp"
#include "troupe/wire/rpc.hpp"

namespace troupe::actors::testing {

// Calls go straight to a record_server; the first `silent` calls get no answer, and with `corrupt`
// a byte of every record reply is flipped on the way.
class server_channel final : public wire::rpc_channel {
 public:
  server_channel(const record_server& s, node_id self) : server_(s), self_(std::move(self)) {}
  expected<message> call(request req, std::chrono::milliseconds) override {
    std::lock_guard lk(mu);
    return answer(req);
  }
  // Answered at once; the reply waits for poll().
  expected<std::uint64_t> send(request req, std::chrono::milliseconds) override {
    std::lock_guard lk(mu);
    replies_.emplace(++last_id_, answer(req));
    most_in_flight = std::max(most_in_flight, replies_.size());
    return last_id_;
  }
  // Every reply is there from send() on: nothing to wait for.
  void wait(std::uint64_t, std::chrono::milliseconds) override {}
  std::optional<expected<message>> poll(std::uint64_t id) override {
    std::lock_guard lk(mu);
    auto it = replies_.find(id);
    if (it == replies_.end())
      return expected<message>(make_unexpected(core_errc::invalid_argument, "no such request"));
    auto r = std::move(it->second);
    replies_.erase(it);
    return r;
  }
  expected<std::vector<message>> call_all(std::vector<request>&, std::chrono::milliseconds) override {
    return make_unexpected(core_errc::invalid_argument, "not used");
  }
  std::mutex mu;
  int calls = 0, silent = 0;
  bool corrupt = false;
  bool records_silent = false;     // no answer to any request for records (manifests are answered)
  std::size_t most_in_flight = 0;  // sent and not yet polled

 private:
  expected<message> answer(request& req) {
    ++calls;
    bool for_records = req.out.body().getRecordRequest().getRecordCount() > 0;
    if (silent > 0 || (records_silent && for_records)) {
      silent = std::max(0, silent - 1);
      return make_unexpected(core_errc::io_error, "no reply within 10 ms from master");
    }
    req.out.envelope().setFrom("records-rpc");
    auto m = loopback_message(req.out, self_);
    if (!m) return m.err();
    auto reply = server_.answer(*m);
    if (corrupt && reply.body().getRecordReply().isRecords()) {
      auto d = reply.body().getRecordReply().getRecords();
      if (d.size() > 5) d[5] ^= 0x40;
    }
    return loopback_message(reply, node_id{"master", 1});
  }
  std::map<std::uint64_t, expected<message>> replies_;
  std::uint64_t last_id_ = 0;
  const record_server& server_;
  node_id self_;
};

}  // namespace troupe::actors::testing
