#include "troupe/actors/testing/ps_shard_host.hpp"

#include <caf/all.hpp>

#include "caf_types.hpp"
#include "endpoint_node.hpp"
#include "roles.hpp"

namespace troupe::actors::testing {

struct ps_shard_host::impl {
  impl() : sys(cfg) {}
  caf::actor_system_config cfg;
  caf::actor_system sys;
  std::unique_ptr<endpoint> net;
  std::unique_ptr<endpoint_node> node;
  caf::actor shard;
};

ps_shard_host::ps_shard_host(std::unique_ptr<impl> i) : impl_(std::move(i)) {}

expected<std::unique_ptr<ps_shard_host>> ps_shard_host::start(const job::job_spec& spec,
                                                              const job::prepared_data& data,
                                                              const std::string& work,
                                                              const std::string& host, std::uint16_t port) {
  std::unique_ptr<ps_shard_host> h(new ps_shard_host(std::make_unique<impl>()));
  impl& s = *h->impl_;
  transport_config cfg = spec.transport;
  cfg.token = "ps-bench";
  auto net = endpoint::create(node_id{"ps-0", 1}, cfg);
  if (!net) return net.err();
  s.net = std::move(*net);
  node_identity who{node_id{"ps-0", 1}, cluster::node_role::ps, 0, work, "ps-bench", "ps-bench", 0};
  s.node = std::make_unique<endpoint_node>(who, spec, *s.net);
  s.shard = spawn_ps_shard(s.sys, *s.node, data_paths{data.train_dir, data.test_dir});
  caf::actor a = s.shard;
  if (auto r = s.net->register_name("ps", [a](const message& m) { caf::anon_send(a, m); }); !r)
    return r.err();
  auto addr = s.net->listen(host, port);
  if (!addr) return addr.err();
  s.node->set_address(*addr);
  return h;
}

ps_shard_host::~ps_shard_host() {
  caf::anon_send_exit(impl_->shard, caf::exit_reason::user_shutdown);
  impl_->sys.await_all_actors_done();  // the shard may still send through the endpoint until it is gone
  impl_->net.reset();
}

const std::string& ps_shard_host::bound() const {
  return impl_->node->address();
}

}  // namespace troupe::actors::testing
