#include "lmdb_writer.hpp"

#include <algorithm>

namespace troupe::storage {

lmdb_writer::lmdb_writer(lmdb_env& env) : env_(env) {
  thread_ = std::thread([this] { run(); });
}

lmdb_writer::~lmdb_writer() {
  {
    std::lock_guard l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::future<expected<void>> lmdb_writer::submit(write_fn fn) {
  job j{std::move(fn), {}};
  auto f = j.done.get_future();
  {
    std::lock_guard l(mu_);
    if (stop_) {
      j.done.set_value(make_unexpected(storage_errc::writer_stopped, env_.dir()));
      return f;
    }
    queue_.push_back(std::move(j));
  }
  cv_.notify_one();
  return f;
}

void lmdb_writer::run() {
  for (;;) {
    std::vector<job> batch;
    {
      std::unique_lock l(mu_);
      cv_.wait(l, [&] { return stop_ || !queue_.empty(); });
      if (stop_) {
        for (auto& j : queue_) j.done.set_value(make_unexpected(storage_errc::writer_stopped, env_.dir()));
        queue_.clear();
        return;
      }
      std::size_t n = std::min<std::size_t>(queue_.size(), std::max(1u, env_.opts_.max_batch));
      for (std::size_t i = 0; i < n; ++i) {
        batch.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
    }
    run_batch(batch);
  }
}

void lmdb_writer::run_batch(std::vector<job>& batch) {
  std::vector<expected<void>> results(batch.size());
  for (;;) {
    if (!attempt(batch, results)) break;
    std::size_t cur = env_.map_size();
    if (cur >= env_.opts_.max_map_size) {
      std::fill(
          results.begin(), results.end(),
          expected<void>(make_unexpected(storage_errc::map_full, env_.dir() + ": map at its maximum size " +
                                                                     std::to_string(cur) + " bytes")));
      break;
    }
    if (auto r = env_.resize(std::min(cur * 2, env_.opts_.max_map_size)); !r) {
      std::fill(results.begin(), results.end(), r);
      break;
    }
  }
  for (std::size_t i = 0; i < batch.size(); ++i) batch[i].done.set_value(std::move(results[i]));
}

bool lmdb_writer::attempt(std::vector<job>& batch, std::vector<expected<void>>& results) {
  MDB_txn* txn = nullptr;
  int rc = mdb_txn_begin(env_.env_, nullptr, 0, &txn);
  if (rc == MDB_MAP_RESIZED) {
    if (auto r = env_.resize(0); !r) {
      std::fill(results.begin(), results.end(), r);
      return false;
    }
    rc = mdb_txn_begin(env_.env_, nullptr, 0, &txn);
  }
  if (rc != 0) {
    std::fill(results.begin(), results.end(), expected<void>(lmdb_error(rc, env_.dir() + ": begin write")));
    return false;
  }
  bool any_ok = false;
  for (std::size_t i = 0; i < batch.size(); ++i) {
    bool map_full = batch.size() == 1 ? false : run_nested(txn, batch[i], results[i]);
    if (batch.size() == 1) {
      write_txn w(env_, txn);
      results[i] = batch[i].fn(w);
      map_full = w.hit_map_full() || (!results[i] && results[i].err() == storage_errc::map_full);
    }
    if (map_full) {
      mdb_txn_abort(txn);
      return true;
    }
    any_ok = any_ok || results[i].has_value();
  }
  if (!any_ok) {
    mdb_txn_abort(txn);
    return false;
  }
  rc = mdb_txn_commit(txn);
  if (rc == MDB_MAP_FULL) return true;  // the commit freed the txn
  if (rc != 0) {
    for (auto& r : results)
      if (r) r = lmdb_error(rc, env_.dir() + ": commit");
  }
  return false;
}

bool lmdb_writer::run_nested(MDB_txn* parent, job& j, expected<void>& result) {
  MDB_txn* child = nullptr;
  int rc = mdb_txn_begin(env_.env_, parent, 0, &child);
  if (rc != 0) {
    result = lmdb_error(rc, env_.dir() + ": begin nested write");
    return rc == MDB_MAP_FULL;
  }
  write_txn w(env_, child);
  result = j.fn(w);
  if (w.hit_map_full() || (!result && result.err() == storage_errc::map_full)) {
    mdb_txn_abort(child);
    return true;
  }
  if (!result) {
    mdb_txn_abort(child);
    return false;
  }
  rc = mdb_txn_commit(child);
  if (rc == MDB_MAP_FULL) return true;
  if (rc != 0) result = lmdb_error(rc, env_.dir() + ": commit nested write");
  return false;
}

}  // namespace troupe::storage
