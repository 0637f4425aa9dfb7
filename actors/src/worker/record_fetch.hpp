// A worker's served records (issue 19): on a host without the record store, a worker gets its
// tasks' records from the master node's record server (master/record_server.hpp). A thread of the
// fetcher's own fetches the ranges the worker asks for, in order, in requests of about
// `request_bytes` with up to `window` of them in flight (across consecutive ranges, so the link
// never waits on a round trip or on the decode), and decodes them (checksums verified) into rows,
// so that the task leased ahead is fetched while the current one trains. The encoded records of fetched
// ranges stay in a bounded memory cache (least recently used out first): a task leased again (a retry, the
// next epoch) needs no network. A server that does not answer (the master killed and being relaunched) is
// asked again until it does; a server's error (a bad range) or a corrupt record fails only that range.
// Its limits and pauses between retries are measured and slept on the clock it is given.
#pragma once

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <list>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "record_spill.hpp"
#include "troupe/core/clock.hpp"
#include "troupe/nn/data/dataset.hpp"
#include "troupe/storage/record_store.hpp"
#include "troupe/wire/rpc.hpp"

namespace troupe::actors {

class record_fetcher {
 public:
  struct options {
    std::size_t cache_bytes = std::size_t{256} << 20;
    std::chrono::milliseconds timeout{10'000};  // one request's
    std::string node = "master", actor = "records";
    std::string spill_dir;                             // the memory cache's second tier (record_spill.hpp)
    std::size_t spill_bytes = 0;                       // 0: no spilling
    std::size_t request_bytes = std::size_t{1} << 20;  // records asked for in one request (>= 1 record)
    std::size_t window = 8;                            // requests in flight (>= 1)
  };
  // `rpc` is used by the fetcher's thread (and by manifest() / test_set() on the caller's) only;
  // `clk` measures the limits below and the pauses before asking a silent server again.
  record_fetcher(wire::rpc_channel& rpc, options o, troupe::clock& clk = troupe::clock::system());
  ~record_fetcher();
  record_fetcher(const record_fetcher&) = delete;
  record_fetcher& operator=(const record_fetcher&) = delete;

  // The training (or test) store's manifest, asking until the server answers or `limit` passes.
  // Blocking. The training manifest is kept: want() decodes with its schema.
  expected<storage::manifest> manifest(bool test, std::chrono::milliseconds limit);
  // Starts fetching training records [first, first + count) (from the cache when it has them);
  // returns the ticket take() asks with. Never blocks.
  std::uint64_t want(std::uint64_t first, std::uint64_t count);
  // nullopt while the ticket's records are on their way; else they are decoded into `out`, or the
  // error (a corrupt record, the server's refusal). The ticket is forgotten then.
  std::optional<expected<void>> take(std::uint64_t ticket, nn::dataset& out);
  // Blocks until take() answers for `ticket` (its records or its error are in) or `deadline` has
  // come on the fetcher's clock; true when take() will answer. Woken by the records themselves.
  bool wait(std::uint64_t ticket, troupe::clock::time_point deadline);
  // The whole test store (blocking; the server is asked until `limit` passes).
  expected<nn::dataset> test_set(std::chrono::milliseconds limit);

  struct stats {
    std::uint64_t fetched = 0, cache_hits = 0, spill_hits = 0, bytes = 0, retries = 0;
  };
  stats counters() const;

 private:
  struct job {
    std::uint64_t ticket, first, count;
  };
  // A range being fetched: its records are decoded into `rows` as replies come (and copied into
  // `bytes` for the cache when there is one).
  struct active {
    job j;
    nn::dataset rows;
    std::string bytes;
    std::uint64_t next = 0;     // the first record not asked for yet
    std::uint64_t missing = 0;  // records not received yet
    std::optional<error> failed;
  };
  // A request in flight: records [first, first + count) of the range with `ticket`.
  struct piece {
    std::uint64_t ticket, first, count, id;
  };
  using time_point = troupe::clock::time_point;
  void run(std::stop_token stop);
  // The next range to fetch (blocking while `block` and none is queued); a range the cache has is
  // answered at once (`answered` set) and nullopt returned.
  std::optional<job> next_job(bool block, const std::stop_token& stop, bool& answered);
  // Sends the requests of the active ranges, in order, until `window` are in flight.
  void ask_ahead(const std::stop_token& stop);
  // Sends the request for `p` into flight_, or (it cannot be sent) asks for it until it is answered.
  void send_piece(piece p, const std::stop_token& stop);
  // A RecordRequest for records [first, first + count) of the training (or test) store.
  wire::rpc_channel::request request_for(bool test, std::uint64_t first, std::uint64_t count) const;
  std::size_t window() const { return std::max<std::size_t>(1, opt_.window); }
  // Records [first, first + count) from a reply to the piece, or from asking again (blocking) when
  // there was none.
  void received(const piece& p, std::optional<expected<message>> reply, const std::stop_token& stop);
  // Records from `first` received for `a`: decoded into its rows (a corrupt one fails it), kept for
  // the cache.
  void land(active& a, std::uint64_t first, const std::vector<std::string_view>& records);
  // A finished range's rows (or its error) into done_; its bytes into the cache.
  void finish(active& a);
  // Whether fetched ranges are kept (a memory cache or a spill file).
  bool caching() const;
  // Encoded records [first, first + count) of a store, asked for until `deadline` (retrying a
  // silent server), or the server's error.
  expected<std::string> fetch(bool test, std::uint64_t first, std::uint64_t count, time_point deadline,
                              const std::stop_token& stop);
  // One request; nullopt when the server did not answer (retry), else the reply's error or records.
  std::optional<expected<std::string>> ask(bool test, std::uint64_t first, std::uint64_t count,
                                           std::string* manifest);
  // The records of a RecordReply to a request for `count` records (views into it, one a record, at
  // most `count`), or its error.
  expected<std::vector<std::string_view>> records_of(const message& reply, std::uint64_t count,
                                                     std::string* manifest) const;
  // The range's bytes from memory, else from the spill file (counted); nullopt when neither has it.
  std::optional<std::string> cached(std::uint64_t first, std::uint64_t count);
  // Into the memory cache (under mu_); what it pushes out goes to the spill file (without mu_).
  void keep(std::uint64_t first, std::uint64_t count, std::string bytes);

  wire::rpc_channel& rpc_;
  options opt_;
  troupe::clock& clock_;
  storage::manifest train_;              // set by manifest(false) before any want()
  std::unique_ptr<record_spill> spill_;  // likewise
  mutable std::mutex mu_;
  std::condition_variable_any cv_;
  std::deque<job> queue_;
  std::map<std::uint64_t, expected<nn::dataset>> done_;
  std::condition_variable landed_;  // with mu_: a ticket's answer went into done_
  std::uint64_t last_ticket_ = 0;
  stats stats_;
  // The cache: encoded records by range, most recently used first.
  using range = std::pair<std::uint64_t, std::uint64_t>;
  std::list<std::pair<range, std::string>> lru_;
  std::map<range, decltype(lru_)::iterator> index_;
  std::size_t cached_bytes_ = 0;
  // The fetcher thread's own: ranges being fetched (in order) and requests in flight (oldest first).
  std::deque<active> active_;
  std::deque<piece> flight_;
  std::jthread thread_;  // last: stopped and joined before the rest goes
};

}  // namespace troupe::actors
