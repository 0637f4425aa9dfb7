// A replica's state in and out of its trainer backend (model/state.hpp's format): what a ring
// job's checkpoints, the job's final state and `[model] init` hold.
//
// - snapshot(): copies of the trainable tensors (by layout name), the buffers (by buffer_names())
//   and the optimizer's slots (each with its step); a device backend is read through to_host().
//   On the worker's thread; the copy is what a writer thread then writes, so training goes on.
// - restore(): writes a state's tensors into the backend (every trainable tensor and buffer it
//   names; with `optimizer`, the slots too). A tensor of another size is an error naming it and
//   both sizes; one the state lacks is an error for a trainable tensor when `complete` (a resumed
//   replica must have all), else counted in `missing`. Every tensor is checked before any is
//   written: on an error the replica is as it was.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "troupe/actors/trainer_backend.hpp"
#include "troupe/storage/checkpoint_store.hpp"

namespace troupe::actors {

expected<storage::flat_state> snapshot(trainer_backend& b);
// The buffers alone (an async_ps worker's: its parameters are the shards').
expected<storage::flat_state> snapshot_buffers(trainer_backend& b);

struct restore_report {
  std::size_t tensors = 0, buffers = 0, slots = 0;
  std::vector<std::string> missing;
};
expected<restore_report> restore(trainer_backend& b, const storage::shard_state& s, bool optimizer,
                                 bool complete);

}  // namespace troupe::actors
