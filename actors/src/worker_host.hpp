// What a worker's set-up takes from its node beyond node_context: rpc channels of its own on the
// node's endpoint, connections to the PS shards it pulls from, the node's ring listener and the
// job's liveness on this host (what its ring session watches neighbours with). node_runtime
// implements it; the worker's parts (worker/: its PS client, ring context, data feed, GPU
// rendezvous) are built from it and from the rpc channels it opens, never from the runtime itself.
//
// Threading: as node_context. open_rpc() and connect() block (a registration, a dial): call them
// from the worker's own thread, never from the node's io thread.
#pragma once

#include <memory>
#include <string>

#include "node_context.hpp"
#include "troupe/collective/liveness.hpp"
#include "troupe/collective/tcp/link.hpp"
#include "troupe/wire/rpc.hpp"

namespace troupe::actors {

class worker_host : public node_context {
 public:
  // An rpc channel whose replies come to actor `name` on this node (a restarted worker actor opens
  // it anew: an earlier channel of that name stops receiving). Its timeouts read clock(); its waits
  // end once the node leaves (SIGTERM), so a worker that leaves stops waiting for a PS shard that
  // stops with the job.
  virtual expected<std::unique_ptr<wire::rpc_channel>> open_rpc(const std::string& name) = 0;
  // Connects to `node` at `address` unless already connected, so that send() reaches it.
  virtual expected<void> connect(const std::string& node, const std::string& address) = 0;
  // The job's liveness on this host (collective::make_host_liveness): beacons of the job's nodes.
  virtual collective::liveness& liveness() = 0;
  // The node's ring listener, on the host of its advertised address, opened once for the life of
  // the process and advertised in its joins: call before mark_ready().
  virtual expected<collective::tcp_listener*> ring_listener() = 0;
  // The job's token (the ring's TCP links prove they hold it). Never logged.
  virtual const std::string& job_token() const = 0;
  // The master was told that this node leaves: a worker stops waiting for the PS shards then. Until
  // that, a leaving worker takes no step but still settles its pushes (hand_back_on_leave).
  virtual bool stops_waiting() const { return leaving(); }
};

}  // namespace troupe::actors
