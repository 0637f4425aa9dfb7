// A ring job's replica made durable (docs/job.md, "Ring checkpoints"): every [job]
// checkpoint_every_ms one worker — the alive worker of the lowest index, so exactly one whatever the
// membership — copies its replica (replica_state.hpp: parameters, buffers, optimizer state) on its
// own thread between two steps and hands the copy to this writer, whose thread writes it to
// <job dir>/checkpoints/ring (model/state.hpp). The ring never waits for the disk: a checkpoint
// still being written when the next is due is skipped. `troupe run --resume` starts the replicas
// from the latest one; `troupe export` writes a model from it.
//
// Threading: offer() from the worker's thread; the writer thread is joined by the destructor (a
// write under way is finished first).
#pragma once

#include <condition_variable>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "troupe/actors/strategy.hpp"
#include "troupe/model/state.hpp"
#include "troupe/storage/checkpoint_store.hpp"

namespace troupe::actors {

class checkpoint_writer {
 public:
  explicit checkpoint_writer(std::string dir);
  ~checkpoint_writer();
  checkpoint_writer(const checkpoint_writer&) = delete;
  checkpoint_writer& operator=(const checkpoint_writer&) = delete;

  // Whether a write is under way (a new one would be skipped).
  bool busy() const;
  // Queues `s` for writing; false (nothing done) while a write is under way.
  bool offer(storage::flat_state s, model::state_meta meta);
  // Versions written so far, and the last error ("" when none).
  std::uint64_t written() const;
  std::string last_error() const;

 private:
  void run();
  std::string dir_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::optional<std::pair<storage::flat_state, model::state_meta>> pending_;
  bool writing_ = false, stop_ = false;
  std::uint64_t written_ = 0;
  std::string error_;
  std::optional<model::state_writer> store_;  // the writer thread's, kept open between versions
  std::thread thread_;                        // last: started once the rest is built
};

// The ring's checkpoints as the strategies see them (replica_store): the latest one restored into a
// replica, and the writer of new ones.
class ring_checkpoints final : public replica_store {
 public:
  explicit ring_checkpoints(std::string dir) : dir_(dir), writer_(std::move(dir)) {}
  expected<std::optional<std::uint64_t>> restore_latest(
      trainer_backend& b, std::vector<float>* strategy_state = nullptr) override;
  // The dense slot a checkpoint keeps strategy::durable_state() under (a name no parameter has).
  static constexpr const char* strategy_key = "#strategy";
  checkpoint_writer& writer() { return writer_; }
  // Called by restore_latest before it returns, with the restored replica's step (0: there was no
  // checkpoint, or one that could not be read or restored, and the replica keeps its initial
  // weights): the worker tells the master, which puts what later steps applied back to TODO before
  // the ring trains (a ring restored so lost every replica that had trained; a job's first ring
  // finds nothing to put back).
  std::function<void(std::uint64_t step)> on_restored;

 private:
  std::string dir_;
  checkpoint_writer writer_;
};

}  // namespace troupe::actors
