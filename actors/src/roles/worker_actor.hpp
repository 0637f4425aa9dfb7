// The worker actor's behaviour, shared by the CPU worker (worker.cpp) and the GPU worker
// (gpu_worker.cpp): they differ only in the strategy (and device state) setup makes.
#pragma once

#include <caf/stateful_actor.hpp>

#include "worker_state.hpp"

namespace troupe::actors {

using worker_actor = caf::stateful_actor<worker_state>;

// Sets the worker up (throws on failure), then interleaves training ticks with the master's
// requests (evaluate). Spawned detached: training blocks.
caf::behavior run_worker(worker_actor* self, node_runtime* rt, data_paths data, strategy_maker make);

}  // namespace troupe::actors
