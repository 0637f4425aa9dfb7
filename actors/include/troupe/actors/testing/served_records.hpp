// For benchmarks and tests: both ends of served records (docs/data.md, [data] serve) without a job.
// record_server_host is the master's record server over a training store, answering on a transport
// endpoint of its own; record_client is a worker's record fetcher (its request window and memory
// cache), behind the calls a client makes. served_records_bench measures one against the other.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "troupe/core/error.hpp"
#include "troupe/nn/data/dataset.hpp"
#include "troupe/storage/record_store.hpp"
#include "troupe/wire/rpc.hpp"

namespace troupe::actors {
class record_fetcher;
}

namespace troupe::actors::testing {

class record_server_host {
 public:
  // The server's largest reply: what one request may ask for.
  static constexpr std::size_t max_reply_bytes = std::size_t{4} << 20;

  // The record server of the store in `train_dir` as node "master" (its job directory `work`),
  // under the name "records" on an endpoint listening on host:port (port 0: any; token "bench"),
  // answering on the endpoint's io thread. `copy`: every record copied into the replies, none sent
  // straight from the map. Errors: the store's (it cannot be opened), the endpoint's.
  static expected<std::unique_ptr<record_server_host>> start(const std::string& train_dir,
                                                             const std::string& work, bool copy,
                                                             const std::string& host, std::uint16_t port);
  ~record_server_host();
  record_server_host(const record_server_host&) = delete;
  record_server_host& operator=(const record_server_host&) = delete;

  // The address it listens on.
  const std::string& address() const;

 private:
  struct impl;
  explicit record_server_host(std::unique_ptr<impl> i);
  std::unique_ptr<impl> impl_;
};

class record_client {
 public:
  struct options {
    std::size_t cache_bytes = 0;    // the memory cache (0: none)
    std::size_t request_bytes = 0;  // records asked for in one request
    std::size_t window = 0;         // requests in flight
  };
  // A worker's defaults.
  static options defaults();

  // Fetches from node "master"'s "records" through `rpc`, which outlives it.
  record_client(wire::rpc_channel& rpc, const options& o);
  ~record_client();
  record_client(const record_client&) = delete;
  record_client& operator=(const record_client&) = delete;

  // The training store's manifest, asking until the server answers or `limit` passes. Blocking;
  // before want().
  expected<storage::manifest> manifest(std::chrono::milliseconds limit);
  // Starts fetching records [first, first + count); the ticket take() asks with. Never blocks.
  std::uint64_t want(std::uint64_t first, std::uint64_t count);
  // nullopt while the ticket's records are on their way; else they are decoded into `out`, or the
  // error. The ticket is forgotten then.
  std::optional<expected<void>> take(std::uint64_t ticket, nn::dataset& out);

 private:
  std::unique_ptr<record_fetcher> fetcher_;
};

}  // namespace troupe::actors::testing
