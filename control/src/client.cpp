#include "troupe/control/client.hpp"

#include <unistd.h>

#include <thread>

#include <nlohmann/json.hpp>

#include "client_timeline.hpp"
#include "node_runtime.hpp"
#include "rpc.hpp"
#include "status_codec.hpp"
#include "troupe/cluster/job_dir.hpp"
#include "wire.hpp"

namespace troupe::control {

using actors::guarded;
using actors::node_runtime;
using actors::rpc_client;
namespace wire = actors::wire;

expected<std::string> find_job_dir(const std::string& job_dir, const std::string& root) {
  if (!job_dir.empty()) return job_dir;
  auto ids = cluster::job_dir::list(root);
  if (!ids) return ids.err();
  if (ids->empty())
    return make_unexpected(core_errc::invalid_argument, "no job under " + root + " (give --job-dir)");
  return root + "/" + ids->front();
}

namespace {

struct session {
  std::unique_ptr<endpoint> net;
  std::unique_ptr<rpc_client> rpc;
  ~session() {
    rpc.reset();
    net.reset();
  }
};

expected<std::unique_ptr<session>> connect_runner(const std::string& job_dir) {
  auto dir = cluster::job_dir::open(job_dir);
  if (!dir) return dir.err();
  auto nodes = dir->read_nodes();
  if (!nodes) return nodes.err();
  auto token = node_runtime::read_token(job_dir);
  if (!token) return token.err();
  transport_config cfg;
  cfg.token = *token;
  cfg.reconnect_attempts = 0;
  auto s = std::make_unique<session>();
  auto net = endpoint::create(node_id{"cli-" + std::to_string(::getpid()), 0}, cfg);
  if (!net) return net.err();
  s->net = std::move(*net);
  auto peer = s->net->connect(nodes->master_address, false);
  if (!peer)
    return std::move(peer).err().wrap("job " + dir->job_id() + " (runner at " + nodes->master_address +
                                      "; is it still running?)");
  auto rpc = rpc_client::create(*s->net, "cli");
  if (!rpc) return rpc.err();
  s->rpc = std::move(*rpc);
  return s;
}

}  // namespace

expected<std::string> job_status_json(const std::string& job_dir, bool from_timeline) {
  auto s = connect_runner(job_dir);
  if (!s) return from_timeline ? status_from_timeline(job_dir, s.err()) : s.err();
  auto& rpc = *(*s)->rpc;
  auto o = wire::job();
  o.body.initStatusRequest();
  auto reply = rpc.call({"runner", "runner", std::move(o.out)}, std::chrono::seconds(3));
  if (!reply) return reply.err();
  nlohmann::json j;
  bool ok = guarded(
      "status", [&] { j = actors::to_json(actors::read_job_status(reply->body().getJob().getJobStatus())); });
  if (!ok) return make_unexpected(core_errc::parse_error, "malformed status reply from the runner");
  return j.dump();
}

expected<std::uint32_t> scale_job(const std::string& job_dir, std::uint32_t workers) {
  auto s = connect_runner(job_dir);
  if (!s) return s.err();
  auto& rpc = *(*s)->rpc;
  auto o = wire::job();
  o.body.initScale().setWorkers(workers);
  auto reply = rpc.call({"runner", "runner", std::move(o.out)}, std::chrono::seconds(3));
  if (!reply) return reply.err();
  return reply->body().getJob().getScaleReply().getWorkers();
}

expected<void> stop_job(const std::string& job_dir) {
  auto s = connect_runner(job_dir);
  if (!s) return s.err();
  auto o = wire::job();
  o.body.initStop().setReason("troupe stop");
  auto& net = *(*s)->net;
  if (auto r = net.send("runner", "runner", std::move(o.out), "cli", std::chrono::seconds(1)); !r) return r;
  // Returns once the runner has stopped the job and exited (its connection drops).
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(15);
  while (net.connected("runner")) {
    if (std::chrono::steady_clock::now() > deadline)
      return make_unexpected(core_errc::io_error, "the runner did not stop within 15 s");
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return {};
}

}  // namespace troupe::control
