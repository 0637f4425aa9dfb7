#include "record_fetch.hpp"

#include <spdlog/spdlog.h>

#include <kj/exception.h>

#include "troupe/actors/data.hpp"

namespace troupe::actors {

namespace {
struct part {
  std::string bytes;
  std::uint64_t count = 0;
};

error server_error(const std::string& what) {
  return error(std::error_code(core_errc::io_error), "record server: " + what);
}
}  // namespace

record_fetcher::record_fetcher(rpc_channel& rpc, options o)
    : rpc_(rpc), opt_(std::move(o)), thread_([this](std::stop_token s) { run(s); }) {}

record_fetcher::~record_fetcher() {
  thread_.request_stop();
  thread_.join();
  auto s = counters();
  spdlog::info(
      "served records: {} ranges fetched ({:.1f} MB, {} retries), {} from the cache ({} of them "
      "from the spill file)",
      s.fetched, static_cast<double>(s.bytes) / 1e6, s.retries, s.cache_hits + s.spill_hits, s.spill_hits);
}

record_fetcher::stats record_fetcher::counters() const {
  std::lock_guard lk(mu_);
  return stats_;
}

std::optional<expected<std::string>> record_fetcher::ask(bool test, std::uint64_t first, std::uint64_t count,
                                                         std::string* manifest) {
  rpc_channel::request req{opt_.node, opt_.actor, outbound()};
  auto q = req.out.body().initRecordRequest();
  q.setTest(test);
  q.setFirstRecord(first);
  q.setRecordCount(count);
  auto reply = rpc_.call(std::move(req), opt_.timeout);
  if (!reply) return std::nullopt;
  try {
    if (reply->kind() != schema::Envelope::Body::RECORD_REPLY) return server_error("a reply of another kind");
    auto r = reply->body().getRecordReply();
    if (manifest) *manifest = r.getManifest().cStr();
    if (r.which() == schema::RecordReply::ERROR) return server_error(r.getError().cStr());
    auto data = r.getRecords();
    if (r.getRecordCount() == 0 && count > 0) return server_error("a reply without records");
    return std::string(reinterpret_cast<const char*>(data.begin()), data.size());
  } catch (const kj::Exception& e) {
    return server_error(std::string("a malformed reply: ") + e.getDescription().cStr());
  }
}

expected<std::string> record_fetcher::fetch(bool test, std::uint64_t first, std::uint64_t count,
                                            clock::time_point deadline, const std::stop_token& stop) {
  std::string out;
  const std::size_t size = storage::encoded_size(train_.schema);
  auto backoff = std::chrono::milliseconds(50);
  while (out.size() < count * size) {
    const std::uint64_t got = out.size() / size;
    auto r = ask(test, first + got, count - got, nullptr);
    if (r && !*r) return r->err();
    if (r) {
      if (out.empty())
        out = std::move(**r);  // a task within one reply (most): no second copy
      else
        out += **r;
      continue;
    }
    if (stop.stop_requested() || clock::now() >= deadline)
      return server_error("no answer from " + opt_.node + " (records " + std::to_string(first + got) + "..)");
    std::unique_lock lk(mu_);
    if (stats_.retries++ == 0 || backoff.count() == 50)
      spdlog::warn("record server on {} does not answer: asking again", opt_.node);
    cv_.wait_for(lk, stop, backoff, [] { return false; });
    backoff = std::min(backoff * 2, std::chrono::milliseconds(1000));
  }
  return out;
}

expected<storage::manifest> record_fetcher::manifest(bool test, std::chrono::milliseconds limit) {
  auto deadline = clock::now() + limit;
  for (auto wait = std::chrono::milliseconds(20);;
       wait = std::min(wait * 2, std::chrono::milliseconds(500))) {
    std::string text;
    auto r = ask(test, 0, 0, &text);
    if (r && !*r) return r->err();
    if (r) {
      auto m = storage::manifest::parse(text, "record server on " + opt_.node);
      if (m && !test && !spill_) {
        train_ = *m;
        spill_ = std::make_unique<record_spill>(opt_.spill_dir, text, opt_.spill_bytes);
      }
      return m;
    }
    if (clock::now() + wait >= deadline)
      return server_error("no answer from " + opt_.node + " within " + std::to_string(limit.count()) + " ms");
    std::this_thread::sleep_for(wait);
  }
}

std::uint64_t record_fetcher::want(std::uint64_t first, std::uint64_t count) {
  std::lock_guard lk(mu_);
  queue_.push_back({++last_ticket_, first, count});
  cv_.notify_all();
  return last_ticket_;
}

std::optional<expected<void>> record_fetcher::take(std::uint64_t ticket, nn::dataset& out) {
  std::lock_guard lk(mu_);
  auto it = done_.find(ticket);
  if (it == done_.end()) return std::nullopt;
  expected<void> r;
  if (it->second)
    std::swap(out, *it->second);
  else
    r = it->second.err();
  done_.erase(it);
  return r;
}

expected<nn::dataset> record_fetcher::test_set(std::chrono::milliseconds limit) {
  auto m = manifest(true, limit);
  if (!m) return m.err();
  if (m->schema != train_.schema) return server_error("the test store's schema is not the training store's");
  auto bytes = fetch(true, 0, m->record_count, clock::now() + limit, thread_.get_stop_token());
  if (!bytes) return bytes.err();
  nn::dataset d;
  size_rows(*m, m->source, static_cast<std::size_t>(m->record_count), d);
  if (auto r = decode_rows(m->schema, 0, *bytes, d, 0, "served test record"); !r) return r.err();
  return d;
}

void record_fetcher::run(std::stop_token stop) {
  for (;;) {
    job j{};
    {
      std::unique_lock lk(mu_);
      if (!cv_.wait(lk, stop, [&] { return !queue_.empty(); })) return;
      j = queue_.front();
      queue_.pop_front();
    }
    auto r = serve(j, stop);
    if (stop.stop_requested()) return;
    std::lock_guard lk(mu_);
    done_.emplace(j.ticket, std::move(r));
  }
}

expected<nn::dataset> record_fetcher::serve(const job& j, std::stop_token stop) {
  nn::dataset d;
  size_rows(train_, train_.source, static_cast<std::size_t>(j.count), d);
  if (auto bytes = cached(j.first, j.count)) {
    if (decode_rows(train_.schema, j.first, *bytes, d, 0, "cached record")) return d;
    spdlog::warn("served records: cached records {}..: corrupt, fetching them again", j.first);
  }
  auto bytes = fetch(false, j.first, j.count, clock::time_point::max(), stop);
  if (!bytes) return bytes.err();
  if (auto r = decode_rows(train_.schema, j.first, *bytes, d, 0, "served record"); !r) return r.err();
  {
    std::lock_guard lk(mu_);
    stats_.fetched += 1;
    stats_.bytes += bytes->size();
  }
  keep(j.first, j.count, *bytes);
  return d;
}

std::optional<std::string> record_fetcher::cached(std::uint64_t first, std::uint64_t count) {
  {
    std::lock_guard lk(mu_);
    if (auto it = index_.find({first, count}); it != index_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second);
      stats_.cache_hits += 1;
      return it->second->second;
    }
  }
  auto spilled = spill_ ? spill_->get(first, count) : std::nullopt;
  if (spilled) {
    std::lock_guard lk(mu_);
    stats_.spill_hits += 1;
  }
  return spilled;
}

void record_fetcher::keep(std::uint64_t first, std::uint64_t count, const std::string& bytes) {
  std::vector<std::pair<range, std::string>> out;
  {
    std::lock_guard lk(mu_);
    if (index_.count({first, count})) return;
    lru_.emplace_front(range{first, count}, bytes);
    index_[{first, count}] = lru_.begin();
    cached_bytes_ += bytes.size();
    while (cached_bytes_ > opt_.cache_bytes) {
      cached_bytes_ -= lru_.back().second.size();
      index_.erase(lru_.back().first);
      out.push_back(std::move(lru_.back()));
      lru_.pop_back();
    }
  }
  for (const auto& [r, b] : out)
    if (spill_) spill_->put(r.first, r.second, b);
}

}  // namespace troupe::actors
