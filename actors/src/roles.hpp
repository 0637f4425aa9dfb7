// The role actors of a job, as their node spawns them: the one door from node/ (the process) into
// the role folders master/, ps/ and worker/. Each is spawned by its node's root supervisor (so a
// crash restarts it under the same name) and receives its remote traffic through the node's bridge
// (node_runtime::bridge). The master, the dispenser, the record server and the PS shards see their
// node only through node_context (node_context.hpp); a worker through worker_host (worker_host.hpp),
// a node_context with rpc channels, connections, the ring listener and liveness.
#pragma once

#include <caf/fwd.hpp>

#include <cstdint>
#include <string>

#include "node_context.hpp"
#include "troupe/supervision/name_registry.hpp"
#include "worker_host.hpp"

namespace troupe::actors {

struct data_paths {
  std::string train_dir, test_dir;
};

// The task journal's owner (detached: LMDB writes block). Name "dispenser", master node.
caf::actor spawn_dispenser(caf::actor_system& sys, node_context& node, data_paths data);
// Serves the stores' records to workers without them (record_server.hpp; detached: LMDB reads).
// Name "records", master node.
caf::actor spawn_record_server(caf::actor_system& sys, node_context& node, data_paths data);
// Membership, progress, status, evaluation and completion. Name "master", master node.
// `names` is the node's registry, where it finds the dispenser.
caf::actor spawn_master(caf::actor_system& sys, node_context& node, supervision::name_registry& names,
                        std::uint32_t restarts);
// A parameter-server shard (detached: checkpoints block). Name "ps", on ps-<i>.
caf::actor spawn_ps_shard(caf::actor_system& sys, node_context& node, data_paths data);
// A worker (detached: training blocks), its replica on the backend the job names (native CPU,
// CUDA with [job] device = "gpu"). Name "worker", on worker-<i>.
caf::actor spawn_worker(caf::actor_system& sys, worker_host& node, data_paths data);

}  // namespace troupe::actors
