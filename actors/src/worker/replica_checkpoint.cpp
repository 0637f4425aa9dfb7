#include "replica_checkpoint.hpp"

#include <spdlog/spdlog.h>

#include "replica_state.hpp"

namespace troupe::actors {

checkpoint_writer::checkpoint_writer(std::string dir) : dir_(std::move(dir)), thread_([this] { run(); }) {}

checkpoint_writer::~checkpoint_writer() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  cv_.notify_one();
  thread_.join();
}

bool checkpoint_writer::busy() const {
  std::lock_guard lk(mu_);
  return writing_ || pending_.has_value();
}

bool checkpoint_writer::offer(storage::flat_state s, model::state_meta meta) {
  {
    std::lock_guard lk(mu_);
    if (writing_ || pending_) return false;
    pending_.emplace(std::move(s), std::move(meta));
  }
  cv_.notify_one();
  return true;
}

std::uint64_t checkpoint_writer::written() const {
  std::lock_guard lk(mu_);
  return written_;
}

std::string checkpoint_writer::last_error() const {
  std::lock_guard lk(mu_);
  return error_;
}

expected<std::optional<std::uint64_t>> ring_checkpoints::restore_latest(trainer_backend& b,
                                                                        std::vector<float>* strategy_state) {
  // The replica keeps its initial weights (no checkpoint, or one that could not be read or restored:
  // restore leaves the replica as it was): every step's rows were lost.
  auto initial_weights = [&] {
    if (on_restored) on_restored(0);
  };
  auto s = model::read_state_or_older(dir_);
  if (!s) {
    initial_weights();
    return s.err();
  }
  if (!*s) {
    initial_weights();
    return std::optional<std::uint64_t>();
  }
  auto r = restore(b, (*s)->state, true, true);
  if (!r) {
    initial_weights();
    error e = r.err();
    return e.wrap(dir_ + " version " + std::to_string((*s)->meta.version));
  }
  const std::uint64_t step = model::held_steps(**s);
  spdlog::info("restored {} tensors, {} buffers and {} optimizer slot sets from {} (version {}, step {})",
               r->tensors, r->buffers, r->slots, dir_, (*s)->meta.version, step);
  if (strategy_state) {
    auto kept = (*s)->state.dense_slots.find(strategy_key);
    if (kept != (*s)->state.dense_slots.end())
      *strategy_state = std::move(kept->second);
    else
      strategy_state->clear();
  }
  if (on_restored) on_restored(step);
  return std::optional<std::uint64_t>(step);
}

void checkpoint_writer::run() {
  std::unique_lock lk(mu_);
  for (;;) {
    cv_.wait(lk, [&] { return stop_ || pending_; });
    if (!pending_) return;  // stopping, nothing left to write
    auto [state, meta] = std::move(*pending_);
    pending_.reset();
    writing_ = true;
    lk.unlock();
    if (!store_) {
      auto w = model::state_writer::open(dir_);
      if (w) store_.emplace(std::move(*w));
    }
    auto v = store_ ? store_->write(state, meta) : model::write_state(dir_, state, meta);
    lk.lock();
    writing_ = false;
    if (v) {
      ++written_;
      error_.clear();
      spdlog::debug("replica checkpoint {} written (step {})", *v, meta.step);
    } else if (error_ != v.err().to_string()) {
      error_ = v.err().to_string();
      spdlog::warn("replica checkpoint: {}", error_);
    }
  }
}

}  // namespace troupe::actors
