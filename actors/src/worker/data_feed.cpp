#include "data_feed.hpp"

#include <unistd.h>

#include <spdlog/spdlog.h>

#include <filesystem>

#include "troupe/job/data.hpp"

namespace troupe::actors {

expected<std::optional<std::uint64_t>> local_feed::fetch(std::uint64_t first, std::uint64_t count,
                                                         nn::dataset& rows) {
  if (auto r = job::read_records(train_, first, count, rows); !r) return r.err();
  return std::optional<std::uint64_t>();
}

std::optional<expected<void>> local_feed::take(std::uint64_t ticket, nn::dataset&) {
  return expected<void>(make_unexpected(core_errc::invalid_argument,
                                        "no ticket " + std::to_string(ticket) + " of a local store"));
}

expected<nn::dataset> local_feed::test_set() {
  auto store = storage::record_store::open(test_dir_);
  if (!store) return store.err();
  return job::read_all(*store);
}

expected<std::unique_ptr<served_feed>> served_feed::create(std::unique_ptr<wire::rpc_channel> rpc,
                                                           record_fetcher::options o, troupe::clock& clk,
                                                           std::chrono::milliseconds limit) {
  std::unique_ptr<served_feed> f(new served_feed(std::move(rpc), std::move(o), clk));
  auto m = f->fetch_.manifest(false, limit);
  if (!m) return m.err();
  f->manifest_ = std::move(*m);
  return f;
}

expected<std::optional<std::uint64_t>> served_feed::fetch(std::uint64_t first, std::uint64_t count,
                                                          nn::dataset&) {
  return std::optional<std::uint64_t>(fetch_.want(first, count));
}

std::optional<expected<void>> served_feed::take(std::uint64_t ticket, nn::dataset& rows) {
  return fetch_.take(ticket, rows);
}

bool served_feed::wait(std::uint64_t ticket, troupe::clock::time_point deadline) {
  return fetch_.wait(ticket, deadline);
}

expected<nn::dataset> served_feed::test_set() {
  return fetch_.test_set(std::chrono::seconds(60));
}

namespace {

// Records from the master node's record server: its own rpc client (a restarted actor registers
// the name anew) and a fetcher sized by [data].
expected<std::unique_ptr<data_feed>> serve_records(worker_host& rt) {
  auto rpc = rt.open_rpc("records-rpc");
  if (!rpc) return rpc.err();
  const auto& data = rt.spec().nn.data;
  record_fetcher::options o;
  o.cache_bytes = data.cache_mb << 20;
  o.spill_bytes = data.spill_mb << 20;
  o.spill_dir =
      data.spill_dir.empty()
          ? (std::filesystem::temp_directory_path() / ("troupe-record-cache-" + std::to_string(::geteuid())))
                .string()
          : data.spill_dir;
  o.timeout = rt.spec().job.rpc_timeout;
  auto f = served_feed::create(std::move(*rpc), std::move(o), rt.clock(), std::chrono::seconds(60));
  if (!f) return f.err();
  return std::unique_ptr<data_feed>(std::move(*f));
}

}  // namespace

expected<std::unique_ptr<data_feed>> make_data_feed(worker_host& rt, const data_paths& data) {
  const auto& serve = rt.spec().nn.data.serve;
  if (serve != "always") {
    auto train = storage::record_store::open(data.train_dir);
    if (train)
      return std::unique_ptr<data_feed>(std::make_unique<local_feed>(std::move(*train), data.test_dir));
    if (serve == "never" || !(train.err() == storage::storage_errc::not_found)) return train.err();
    spdlog::info("{}: {}: reading records from the master's record server", rt.self().to_string(),
                 train.err().to_string());
  }
  return serve_records(rt);
}

}  // namespace troupe::actors
