// `troupe serve reload`: the client side (serve.hpp). It finds the server through its state
// directory (server.json: the front end's transport address; token), asks for the swap and waits
// for the answer, which comes once the new replicas serve or the model was refused.
#include <signal.h>
#include <unistd.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "troupe/cluster/process.hpp"
#include "troupe/core/client_node.hpp"
#include "troupe/serve/serve.hpp"
#include "troupe/transport/endpoint.hpp"
#include "troupe/transport/message.hpp"
#include "troupe/wire/rpc.hpp"

namespace troupe::serve {

namespace {
// The running server's control address, from its server.json.
expected<std::string> control_address(const std::string& dir, const std::string& root,
                                      const std::string& name) {
  const bool running = server_running(dir);
  std::ifstream in(dir + "/server.json");
  if (!running && !in)
    return make_unexpected(core_errc::io_error, "no server named '" + name + "' runs under " + root);
  // Running, and nothing of this run written yet: its first model is loading (it said "no such
  // file: no server named" of a server that was starting).
  auto starting = [&] {
    return make_unexpected(core_errc::io_error, "the server '" + name +
                                                    "' is starting (its first model loading): reload it once "
                                                    "it serves (troupe serve status)");
  };
  if (!in) return starting();
  std::stringstream text;
  text << in.rdbuf();
  auto j = nlohmann::json::parse(text.str(), nullptr, false);
  const std::string state = j.is_object() && j.contains("state") && j["state"].is_string() ? j["state"] : "";
  if (running && state == "draining")
    return make_unexpected(core_errc::io_error,
                           "the server '" + name + "' is stopping (draining for drain_ms)");
  if (running && state != "serving") return starting();
  if (j.is_discarded() || !j.is_object() || !j.contains("control_address") ||
      !j["control_address"].is_string())
    return make_unexpected(core_errc::parse_error, dir + "/server.json: not a server's state file");
  if (!running || j.value("state", "") != "serving" || !cluster::process_alive(j.value("pid", 0)))
    return make_unexpected(core_errc::io_error,
                           "server '" + name + "' is not running (" + dir + "/server.json)");
  return j["control_address"].get<std::string>();
}
}  // namespace

expected<reload_result> request_reload(const std::string& root, const std::string& name,
                                       const std::string& model_dir, std::chrono::milliseconds timeout) {
  std::string dir = state_dir(root, name);
  auto address = control_address(dir, root, name);
  if (!address) return address.err();
  auto token = load_token(dir + "/token", "", "");
  if (!token) return token.err();
  transport_config cfg;
  cfg.token = *token;
  cfg.reconnect_attempts = 0;
  // The front end heartbeats every 500 ms (docs/serving.md); a swap takes seconds on a loaded
  // machine, and the answer is what this waits for (bounded by `timeout`).
  cfg.heartbeat_interval = std::chrono::milliseconds(500);
  cfg.heartbeat_timeout = std::chrono::milliseconds(10'000);
  auto net = endpoint::create(client_node_id(static_cast<std::uint64_t>(::getpid())), cfg);
  if (!net) return net.err();
  if (auto peer = (*net)->connect(*address, false); !peer)
    return std::move(peer).err().wrap("server '" + name + "' at " + *address);
  auto rpc = wire::rpc_client::create(**net, "cli");
  if (!rpc) return rpc.err();
  outbound out(64);
  out.body().initServe().initReload().setModelDir(model_dir);
  auto reply = (*rpc)->call({"serve", "serve", std::move(out)}, timeout);
  if (!reply) return reply.err();
  try {
    auto r = reply->body().getServe().getReloadReply();
    if (!r.getOk()) return make_unexpected(core_errc::invalid_argument, std::string(r.getError()));
    return reload_result{r.getVersion(), r.getGeneration()};
  } catch (const std::exception& e) {
    return make_unexpected(core_errc::parse_error,
                           std::string("a malformed answer from the server: ") + e.what());
  }
}

}  // namespace troupe::serve
