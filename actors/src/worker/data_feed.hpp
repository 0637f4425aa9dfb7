// A worker's data feed: the records of the tasks it leases and the test set it evaluates on, from
// one of two places behind one interface: the local record store (local_feed), or the master node's
// record server (served_feed: [data] serve, docs/data.md; fetched ahead by a record_fetcher,
// record_fetch.hpp, while the current task trains).
//
// Contract:
// - fetch() never blocks on the network: the local store's records are read at once (an LMDB read),
//   served ones come later, taken with their ticket. wait() blocks until a ticket's records are in
//   or a deadline on the feed's clock has come, woken by the records themselves.
// - Errors are values: a record that cannot be read or decoded (a corrupt record, a bad range) fails
//   its task's fetch or take, never the feed; test_set() fails with the store's error.
// - The training thread that owns the feed calls it; served_feed's own thread fetches.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "record_fetch.hpp"
#include "roles.hpp"
#include "troupe/core/clock.hpp"
#include "troupe/core/error.hpp"
#include "troupe/nn/data/dataset.hpp"
#include "troupe/storage/record_store.hpp"
#include "troupe/wire/rpc.hpp"
#include "worker_host.hpp"

namespace troupe::actors {

class data_feed {
 public:
  virtual ~data_feed() = default;

  // The training store's manifest.
  virtual const storage::manifest& manifest() const = 0;
  // What job::info_of names the store by: the local store's directory, or the served manifest's source.
  virtual std::string source() const = 0;
  // True for records served by the master node.
  virtual bool served() const = 0;
  // Training records [first, first + count): read into `rows` (nullopt), or on their way (the ticket
  // take() asks with), or the read's error.
  virtual expected<std::optional<std::uint64_t>> fetch(std::uint64_t first, std::uint64_t count,
                                                       nn::dataset& rows) = 0;
  // nullopt while the ticket's records are on their way; else they are in `rows`, or the error. The
  // ticket is forgotten then.
  virtual std::optional<expected<void>> take(std::uint64_t ticket, nn::dataset& rows) = 0;
  // Blocks until take() answers for `ticket` or `deadline` has come; true when take() will answer.
  virtual bool wait(std::uint64_t ticket, troupe::clock::time_point deadline) = 0;
  // The whole test store (blocking).
  virtual expected<nn::dataset> test_set() = 0;
};

// Records read from the local store; the test store opened when the test set is asked for.
class local_feed final : public data_feed {
 public:
  local_feed(storage::record_store train, std::string test_dir)
      : train_(std::move(train)), test_dir_(std::move(test_dir)) {}

  const storage::manifest& manifest() const override { return train_.info(); }
  std::string source() const override { return train_.dir(); }
  bool served() const override { return false; }
  expected<std::optional<std::uint64_t>> fetch(std::uint64_t first, std::uint64_t count,
                                               nn::dataset& rows) override;
  // There are no tickets: an error.
  std::optional<expected<void>> take(std::uint64_t ticket, nn::dataset& rows) override;
  bool wait(std::uint64_t, troupe::clock::time_point) override { return true; }
  expected<nn::dataset> test_set() override;

 private:
  storage::record_store train_;
  std::string test_dir_;
};

// Records served by the master node's record server, over `rpc` (owned), fetched ahead and cached
// by a record_fetcher.
class served_feed final : public data_feed {
 public:
  // Asks for the training store's manifest until the server answers or `limit` passes (blocking:
  // a job's start-up may be under way).
  static expected<std::unique_ptr<served_feed>> create(std::unique_ptr<wire::rpc_channel> rpc,
                                                       record_fetcher::options o, troupe::clock& clk,
                                                       std::chrono::milliseconds limit);

  const storage::manifest& manifest() const override { return manifest_; }
  std::string source() const override { return manifest_.source; }
  bool served() const override { return true; }
  expected<std::optional<std::uint64_t>> fetch(std::uint64_t first, std::uint64_t count,
                                               nn::dataset& rows) override;
  std::optional<expected<void>> take(std::uint64_t ticket, nn::dataset& rows) override;
  bool wait(std::uint64_t ticket, troupe::clock::time_point deadline) override;
  // Asked for until the server answers, at most a minute.
  expected<nn::dataset> test_set() override;

 private:
  served_feed(std::unique_ptr<wire::rpc_channel> rpc, record_fetcher::options o, troupe::clock& clk)
      : rpc_(std::move(rpc)), fetch_(*rpc_, std::move(o), clk) {}
  std::unique_ptr<wire::rpc_channel> rpc_;  // before the fetcher, whose thread uses it
  record_fetcher fetch_;
  storage::manifest manifest_;
};

// The feed of a worker on `rt`: the local store at data.train_dir, or served records ([data] serve
// = "always", or "auto" on a host without the store). Fails with the store's or the server's error.
expected<std::unique_ptr<data_feed>> make_data_feed(worker_host& rt, const data_paths& data);

}  // namespace troupe::actors
