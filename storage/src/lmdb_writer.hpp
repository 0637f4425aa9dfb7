// The single writer thread of one environment: a queue of write functions, each batch run in one
// transaction (functions in nested transactions when batched), grown and retried on MAP_FULL.
#pragma once

#include <condition_variable>
#include <deque>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

#include "troupe/storage/lmdb.hpp"

namespace troupe::storage {

class lmdb_writer {
 public:
  explicit lmdb_writer(lmdb_env& env);
  ~lmdb_writer();  // fails the queued jobs with writer_stopped, joins the thread
  std::future<expected<void>> submit(write_fn fn);
  bool on_writer_thread() const { return std::this_thread::get_id() == thread_.get_id(); }

 private:
  struct job {
    write_fn fn;
    std::promise<expected<void>> done;
  };
  void run();
  void run_batch(std::vector<job>& batch);
  // One attempt at the batch; returns true when it hit MAP_FULL (nothing committed).
  bool attempt(std::vector<job>& batch, std::vector<expected<void>>& results);
  bool run_nested(MDB_txn* parent, job& j, expected<void>& result);

  lmdb_env& env_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<job> queue_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace troupe::storage
