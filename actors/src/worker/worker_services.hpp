// The worker's implementations of the strategy services: PS access over the transport (rpc to
// the shards named in the membership view) and the allreduce ring (the collective module's session
// over this node's ring context).
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "ps_window.hpp"
#include "troupe/actors/strategy.hpp"
#include "troupe/collective/mixed/session.hpp"
#include "troupe/collective/ring_context.hpp"
#include "troupe/collective/tcp/link.hpp"
#include "troupe/wire/rpc.hpp"
#include "worker_host.hpp"

namespace troupe::actors {

// The worker's PS client: requests to the shards named in the membership view, with pushes and
// the next batch's pull in flight (ps_window.hpp: order, staleness, failures).
class remote_ps final : public ps_client {
 public:
  remote_ps(worker_host& rt, wire::rpc_channel& rpc);
  expected<void> pull(trainer_backend& m, const nn::batch& b) override;
  expected<void> push(trainer_backend& m, std::size_t batch_rows) override;
  std::optional<pushed_noise> noise_from_pushes() const override;
  void prefetch(trainer_backend& m, const nn::batch& next) override;
  expected<void> settle() override;
  std::size_t unsettled_pushes() const override { return window_.unacknowledged(); }
  // Pulls so far, and how many of them took a prefetched pull's replies.
  std::uint64_t pulls() const { return pulls_; }
  std::uint64_t prefetched() const { return prefetched_; }

 private:
  // A pull sent ahead: the unique ids it asked for, and its requests.
  struct sent_pull {
    std::vector<std::uint64_t> ids;
    ps_window::group requests;
  };
  // The node name of shard i, connected; error while it is not in the view (restarting).
  expected<std::string> shard_node(std::uint32_t i);
  // The batch's ids, de-duplicated, in first-seen order, into `out`.
  void unique_ids(const nn::batch& b, std::vector<std::uint64_t>& out);
  // Sends the pulls of the dense tensors and of the rows of `ids`, one request per shard.
  expected<ps_window::group> send_pulls(trainer_backend& m, const std::vector<std::uint64_t>& ids);
  expected<void> read_pull_replies(trainer_backend& m, const std::vector<message>& replies);
  void drop_prefetch();
  void read_noise(const message& push_reply);
  worker_host& rt_;
  ps_window window_;
  std::optional<sent_pull> ahead_;  // the prefetched pull, until the pull of its batch takes it
  std::uint64_t pulls_ = 0, prefetched_ = 0;
  std::vector<std::vector<std::uint64_t>> ids_by_shard_;
  nn::id_slots slot_;
  std::vector<std::uint64_t> unique_;
  std::vector<float> rows_;
  // The latest noise estimate in each shard's push replies, by its node; the shards whose slice of
  // the dense gradient is not empty (their estimates make the sum).
  std::map<std::string, pushed_noise> noise_;
  std::vector<std::string> dense_shards_;
};

// The sum of the `shards`' latest push-reply estimates (by node name), the worker's estimate under
// async_ps (docs/goodput.md): none while a shard has none, or while the shards' kinds differ (plain
// and preconditioned norms do not mix: a shard's Adam weights start a push later than another's, or a
// restarted shard is behind); the caller keeps its last sum until they agree again.
std::optional<pushed_noise> sum_pushed_noise(const std::map<std::string, pushed_noise>& latest,
                                             const std::vector<std::string>& shards);

// This node as the ring session's context (troupe/collective/ring_context.hpp): its job, its id,
// the worker ring of its latest membership view (a member's host key is the host of its advertised
// address), its ring listener, and the master to tell of a dead neighbour.
class node_ring_context final : public collective::ring_context {
 public:
  explicit node_ring_context(worker_host& rt) : rt_(rt) {}
  // Opens the node's ring listener (worker_host::ring_listener). Call before the node joins. Without
  // it (an error), neighbours on other hosts cannot link to this worker; those on its host still can.
  const std::string& job() const override {
    return rt_.who().host_key.empty() ? rt_.who().job_id : rt_.who().host_key;
  }
  const node_id& self() const override { return rt_.self(); }
  collective::ring_members members() const override;
  const std::atomic<std::uint64_t>& ring_epoch() const override { return rt_.ring_epoch(); }
  void report_gone(const node_id& node, const std::string& why) override;
  collective::liveness& live() override { return rt_.liveness(); }
  expected<void> listen();
  collective::tcp_listener* ring_listener() override { return listener_; }
  const std::string& ring_secret() const override { return rt_.job_token(); }

 private:
  worker_host& rt_;
  collective::tcp_listener* listener_ = nullptr;
};

// The worker's ring session: links per pair of neighbours (shared memory inside a host, TCP across
// hosts), sized and timed by the job file.
std::unique_ptr<collective::mixed_ring_session> make_ring_session(node_ring_context& ctx,
                                                                  const job::job_spec& spec);

}  // namespace troupe::actors
