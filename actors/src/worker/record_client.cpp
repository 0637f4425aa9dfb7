#include "troupe/actors/testing/served_records.hpp"

#include "record_fetch.hpp"

namespace troupe::actors::testing {

record_client::options record_client::defaults() {
  const record_fetcher::options o;
  return {o.cache_bytes, o.request_bytes, o.window};
}

record_client::record_client(wire::rpc_channel& rpc, const options& o)
    : fetcher_(std::make_unique<record_fetcher>(rpc, [&] {
        record_fetcher::options f;
        f.cache_bytes = o.cache_bytes;
        f.request_bytes = o.request_bytes;
        f.window = o.window;
        return f;
      }())) {}

record_client::~record_client() = default;

expected<storage::manifest> record_client::manifest(std::chrono::milliseconds limit) {
  return fetcher_->manifest(false, limit);
}

std::uint64_t record_client::want(std::uint64_t first, std::uint64_t count) {
  return fetcher_->want(first, count);
}

std::optional<expected<void>> record_client::take(std::uint64_t ticket, nn::dataset& out) {
  return fetcher_->take(ticket, out);
}

}  // namespace troupe::actors::testing
