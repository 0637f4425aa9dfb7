// Sends JobMessage.inject to one node of a job: the node turns on its transport fault knob.
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "troupe/cluster/job_dir.hpp"
#include "troupe/control/chaos.hpp"
#include "troupe/control/client.hpp"
#include "troupe/core/clock.hpp"
#include "troupe/transport/endpoint.hpp"
#include "troupe/wire/job_token.hpp"
#include "troupe/wire/messages.hpp"

namespace troupe::control {

namespace {

// nodes.json has only the master's address; the membership in the runner's status has them all.
std::string address_from_status(const std::string& job_dir, const std::string& node) {
  auto s = job_status_json(job_dir);
  if (!s) return {};
  auto j = nlohmann::json::parse(*s, nullptr, false);
  if (j.is_discarded() || !j.contains("members")) return {};
  for (const auto& m : j["members"]) {
    auto id = node_id::parse(m.value("node", std::string()));
    if (id && id->name == node && m.value("state", std::string()) == "alive")
      return m.value("address", std::string());
  }
  return {};
}

}  // namespace

expected<void> inject_messages(const std::string& job_dir, const std::string& node, double drop_probability,
                               std::uint64_t delay_us, std::uint64_t duration_ms) {
  auto dir = cluster::job_dir::open(job_dir);
  if (!dir) return dir.err();
  auto nodes = dir->read_nodes();
  if (!nodes) return nodes.err();
  std::string address;
  for (const auto& n : nodes->nodes)
    if (n.id.name == node && n.state != "exited") address = n.address;
  if (address.empty()) address = address_from_status(job_dir, node);
  if (address.empty())
    return make_unexpected(core_errc::invalid_argument, "no running node '" + node + "' with an address");
  auto token = wire::read_job_token(job_dir);
  if (!token) return token.err();
  transport_config cfg;
  cfg.token = *token;
  cfg.reconnect_attempts = 0;
  auto net = endpoint::create(node_id{"chaos-" + std::to_string(::getpid()), 0}, cfg);
  if (!net) return net.err();
  auto peer = (*net)->connect(address, false);
  if (!peer) return std::move(peer).err().wrap("inject into " + node + " at " + address);
  auto o = wire::job();
  auto in = o.body.initInject();
  in.setDropProbability(drop_probability);
  in.setDelayUs(delay_us);
  in.setDurationMs(duration_ms);
  if (auto r = (*net)->send(peer->name, "node", std::move(o.out), "chaos", std::chrono::seconds(1)); !r)
    return r;
  // Wait for the frame to leave before the endpoint closes the connection. The transport has no
  // event for a drained send queue, so its size is polled, for 500 ms at most; then 20 ms more for
  // the frame on the wire (the node acknowledges nothing).
  auto& clk = troupe::clock::system();
  const auto deadline = clk.now() + std::chrono::milliseconds(500);
  while ((*net)->stats().queued_bytes > 0 && clk.now() < deadline)
    clk.sleep_for(std::chrono::milliseconds(5));
  clk.sleep_for(std::chrono::milliseconds(20));
  return {};
}

}  // namespace troupe::control
