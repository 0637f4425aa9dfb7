#include "record_fetch.hpp"

#include <spdlog/spdlog.h>

#include <kj/exception.h>

#include <algorithm>
#include <cstring>

#include "troupe/job/data.hpp"

namespace troupe::actors {

namespace {
error server_error(const std::string& what) {
  return error(std::error_code(core_errc::io_error), "record server: " + what);
}

// The whole records of `size` bytes at the front of `bytes`, at most `most`.
std::vector<std::string_view> split(std::string_view bytes, std::size_t size, std::uint64_t most) {
  std::vector<std::string_view> out;
  const std::uint64_t n = std::min<std::uint64_t>(bytes.size() / size, most);
  out.reserve(n);
  for (std::uint64_t k = 0; k < n; ++k) out.push_back(bytes.substr(k * size, size));
  return out;
}
}  // namespace

record_fetcher::record_fetcher(wire::rpc_channel& rpc, options o, troupe::clock& clk)
    : rpc_(rpc), opt_(std::move(o)), clock_(clk), thread_([this](std::stop_token s) { run(s); }) {}

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

expected<std::vector<std::string_view>> record_fetcher::records_of(const message& reply, std::uint64_t count,
                                                                   std::string* manifest) const {
  try {
    if (reply.kind() != schema::Envelope::Body::RECORD_REPLY) return server_error("a reply of another kind");
    auto r = reply.body().getRecordReply();
    if (manifest) *manifest = r.getManifest().cStr();
    if (r.which() == schema::RecordReply::ERROR) return server_error(r.getError().cStr());
    if (r.getRecordCount() == 0 && count > 0) return server_error("a reply without records");
    std::vector<std::string_view> out;
    if (r.which() == schema::RecordReply::RECORD_LIST) {
      auto list = r.getRecordList();
      if (list.size() == 0 && count > 0) return server_error("a reply without records");
      out.reserve(std::min<std::uint64_t>(list.size(), count));
      for (auto d : list) {
        if (out.size() == count) break;
        out.emplace_back(reinterpret_cast<const char*>(d.begin()), d.size());
      }
      return out;
    }
    auto data = r.getRecords();
    const std::size_t size = storage::encoded_size(train_.schema);
    out = split({reinterpret_cast<const char*>(data.begin()), data.size()}, size, count);
    if (out.empty() && count > 0)
      return server_error("a reply of " + std::to_string(data.size()) + " bytes for records of " +
                          std::to_string(size));
    return out;
  } catch (const kj::Exception& e) {
    return server_error(std::string("a malformed reply: ") + e.getDescription().cStr());
  }
}

wire::rpc_channel::request record_fetcher::request_for(bool test, std::uint64_t first,
                                                       std::uint64_t count) const {
  wire::rpc_channel::request req{opt_.node, opt_.actor, outbound()};
  auto q = req.out.body().initRecordRequest();
  q.setTest(test);
  q.setFirstRecord(first);
  q.setRecordCount(count);
  return req;
}

std::optional<expected<std::string>> record_fetcher::ask(bool test, std::uint64_t first, std::uint64_t count,
                                                         std::string* manifest) {
  auto reply = rpc_.call(request_for(test, first, count), opt_.timeout);
  if (!reply) return std::nullopt;
  auto v = records_of(*reply, count, manifest);
  if (!v) return expected<std::string>(v.err());
  std::string out;
  for (auto r : *v) out += r;
  return out;
}

expected<std::string> record_fetcher::fetch(bool test, std::uint64_t first, std::uint64_t count,
                                            time_point deadline, const std::stop_token& stop) {
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
    if (stop.stop_requested() || clock_.now() >= deadline)
      return server_error("no answer from " + opt_.node + " (records " + std::to_string(first + got) + "..)");
    {
      std::lock_guard lk(mu_);
      if (stats_.retries++ == 0 || backoff.count() == 50)
        spdlog::warn("record server on {} does not answer: asking again", opt_.node);
    }
    clock_.sleep_for(backoff, stop);
    backoff = std::min(backoff * 2, std::chrono::milliseconds(1000));
  }
  return out;
}

expected<storage::manifest> record_fetcher::manifest(bool test, std::chrono::milliseconds limit) {
  auto deadline = clock_.now() + limit;
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
    if (clock_.now() + wait >= deadline)
      return server_error("no answer from " + opt_.node + " within " + std::to_string(limit.count()) + " ms");
    clock_.sleep_for(wait);
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

bool record_fetcher::wait(std::uint64_t ticket, troupe::clock::time_point deadline) {
  std::unique_lock lk(mu_);
  return troupe::wait_until(clock_, landed_, lk, deadline, [&] { return done_.count(ticket) > 0; });
}

expected<nn::dataset> record_fetcher::test_set(std::chrono::milliseconds limit) {
  auto m = manifest(true, limit);
  if (!m) return m.err();
  if (m->schema != train_.schema) return server_error("the test store's schema is not the training store's");
  auto bytes = fetch(true, 0, m->record_count, clock_.now() + limit, thread_.get_stop_token());
  if (!bytes) return bytes.err();
  nn::dataset d;
  troupe::job::size_rows(*m, m->source, static_cast<std::size_t>(m->record_count), d);
  if (auto r = troupe::job::decode_rows(m->schema, 0, *bytes, d, 0, "served test record"); !r) return r.err();
  return d;
}

void record_fetcher::run(std::stop_token stop) {
  while (!stop.stop_requested()) {
    // Take the next ranges while the ones taken are all asked for and the window has room; block
    // only when nothing is under way.
    auto asked = [](const active& a) { return a.failed || a.next == a.j.first + a.j.count; };
    while (flight_.size() < window() && (active_.empty() || asked(active_.back()))) {
      bool answered = false;
      auto j = next_job(active_.empty() && flight_.empty(), stop, answered);
      if (stop.stop_requested()) return;
      if (!j && !answered) break;  // none queued: go on with what is under way
      if (!j) continue;            // answered from the cache
      active a{*j, nn::dataset(), std::string(), j->first, j->count, std::nullopt};
      troupe::job::size_rows(train_, train_.source, static_cast<std::size_t>(j->count), a.rows);
      if (caching()) a.bytes.resize(j->count * storage::encoded_size(train_.schema));
      active_.push_back(std::move(a));
    }
    ask_ahead(stop);
    // Ranges are finished in order: all their records in (no request of theirs in flight then), or
    // failed (the answers still on their way are dropped).
    while (!active_.empty() && (active_.front().missing == 0 || active_.front().failed)) {
      finish(active_.front());
      active_.pop_front();
    }
    if (flight_.empty()) continue;
    const piece p = flight_.front();
    rpc_.wait(p.id, std::chrono::milliseconds(20));
    auto reply = rpc_.poll(p.id);
    if (!reply) continue;
    flight_.pop_front();
    received(p, std::move(reply), stop);
  }
}

std::optional<record_fetcher::job> record_fetcher::next_job(bool block, const std::stop_token& stop,
                                                            bool& answered) {
  job j{};
  {
    std::unique_lock lk(mu_);
    if (block) {
      if (!cv_.wait(lk, stop, [&] { return !queue_.empty(); })) return std::nullopt;
    } else if (queue_.empty()) {
      return std::nullopt;
    }
    j = queue_.front();
    queue_.pop_front();
  }
  if (auto bytes = cached(j.first, j.count)) {
    nn::dataset d;
    troupe::job::size_rows(train_, train_.source, static_cast<std::size_t>(j.count), d);
    if (troupe::job::decode_rows(train_.schema, j.first, *bytes, d, 0, "cached record")) {
      std::lock_guard lk(mu_);
      done_.emplace(j.ticket, std::move(d));
      landed_.notify_all();
      answered = true;
      return std::nullopt;
    }
    spdlog::warn("served records: cached records {}..: corrupt, fetching them again", j.first);
  }
  return j;
}

void record_fetcher::ask_ahead(const std::stop_token& stop) {
  const std::size_t size = storage::encoded_size(train_.schema);
  const std::uint64_t per_request = std::max<std::uint64_t>(1, opt_.request_bytes / size);
  for (auto& a : active_) {
    const std::uint64_t end = a.j.first + a.j.count;
    while (!a.failed && a.next < end && flight_.size() < window()) {
      const std::uint64_t n = std::min(per_request, end - a.next);
      piece p{a.j.ticket, a.next, n, 0};
      a.next += n;
      send_piece(p, stop);
    }
  }
}

void record_fetcher::send_piece(piece p, const std::stop_token& stop) {
  if (auto id = rpc_.send(request_for(false, p.first, p.count), opt_.timeout)) {
    p.id = *id;
    flight_.push_back(p);
  } else {
    received(p, std::nullopt, stop);  // not sent (no connection now): ask until it answers
  }
}

void record_fetcher::received(const piece& p, std::optional<expected<message>> reply,
                              const std::stop_token& stop) {
  auto a =
      std::find_if(active_.begin(), active_.end(), [&](const active& x) { return x.j.ticket == p.ticket; });
  if (a == active_.end() || a->failed) return;  // the range already failed: this part is not needed
  if (reply && *reply) {
    auto v = records_of(**reply, p.count, nullptr);
    if (!v) {
      a->failed = v.err();
      return;
    }
    const std::uint64_t n = v->size();
    land(*a, p.first, *v);
    if (!a->failed && n < p.count) send_piece({p.ticket, p.first + n, p.count - n, 0}, stop);  // the rest
    return;
  }
  // No answer (a timeout, the server's node went down, nothing sent): ask until it answers.
  {
    std::lock_guard lk(mu_);
    stats_.retries += 1;
  }
  auto bytes = fetch(false, p.first, p.count, time_point::max(), stop);
  if (!bytes) {
    a->failed = bytes.err();
    return;
  }
  auto records = split(*bytes, storage::encoded_size(train_.schema), p.count);
  if (records.size() < p.count) {
    a->failed = server_error("records " + std::to_string(p.first) + "..: " + std::to_string(bytes->size()) +
                             " bytes are not " + std::to_string(p.count) + " records");
    return;
  }
  land(*a, p.first, records);
}

void record_fetcher::land(active& a, std::uint64_t first, const std::vector<std::string_view>& records) {
  static const std::string where = "served record";
  const std::size_t size = storage::encoded_size(train_.schema);
  const std::size_t at = static_cast<std::size_t>(first - a.j.first);
  for (std::size_t k = 0; k < records.size(); ++k) {
    if (auto ok = troupe::job::decode_row(train_.schema, first + k, records[k], a.rows, at + k, where); !ok) {
      a.failed = ok.err();
      return;
    }
    if (!a.bytes.empty()) std::memcpy(a.bytes.data() + (at + k) * size, records[k].data(), size);
  }
  a.missing -= records.size();
}

void record_fetcher::finish(active& a) {
  expected<nn::dataset> r =
      a.failed ? expected<nn::dataset>(*a.failed) : expected<nn::dataset>(std::move(a.rows));
  if (r) {
    {
      std::lock_guard lk(mu_);
      stats_.fetched += 1;
      stats_.bytes += a.j.count * storage::encoded_size(train_.schema);
    }
    if (!a.bytes.empty()) keep(a.j.first, a.j.count, std::move(a.bytes));
  }
  std::lock_guard lk(mu_);
  done_.emplace(a.j.ticket, std::move(r));
  landed_.notify_all();
}

bool record_fetcher::caching() const {
  return opt_.cache_bytes > 0 || (spill_ && opt_.spill_bytes > 0);
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

void record_fetcher::keep(std::uint64_t first, std::uint64_t count, std::string bytes) {
  std::vector<std::pair<range, std::string>> out;
  {
    std::lock_guard lk(mu_);
    if (index_.count({first, count})) return;
    cached_bytes_ += bytes.size();
    lru_.emplace_front(range{first, count}, std::move(bytes));
    index_[{first, count}] = lru_.begin();
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
