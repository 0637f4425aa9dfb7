#include "troupe/actors/testing/idle_worker.hpp"

#include "endpoint_node.hpp"
#include "troupe/wire/rpc.hpp"
#include "worker_state.hpp"

namespace troupe::actors::testing {

struct idle_worker::impl {
  impl(const node_id& self, endpoint& net)
      : node(node_identity{self, cluster::node_role::worker, 0, "", "bench", "bench", 0}, spec, net) {}
  // A default spec, named: a `job::job_spec{}` temporary trips GCC 12's -Wmaybe-uninitialized at -O3.
  job::job_spec spec;
  endpoint_node node;
  std::unique_ptr<wire::rpc_client> rpc;
};

idle_worker::idle_worker(std::unique_ptr<impl> i) : impl_(std::move(i)) {}
idle_worker::~idle_worker() = default;

expected<std::unique_ptr<idle_worker>> idle_worker::create(endpoint& net, const node_id& self) {
  auto s = std::make_unique<impl>(self, net);
  auto rpc = wire::rpc_client::create(net, "rpc", s->node.clock());
  if (!rpc) return rpc.err();
  s->rpc = std::move(*rpc);
  return std::unique_ptr<idle_worker>(new idle_worker(std::move(s)));
}

std::uint64_t idle_worker::run(std::chrono::milliseconds window) {
  auto& clk = clock();
  worker_state st;
  st.node = &impl_->node;
  st.leases = std::make_unique<task_lease_client>(impl_->node, *impl_->rpc);
  st.last_report = clk.now();
  std::uint64_t passes = 0;
  for (const auto start = clk.now(); clk.now() - start < window;) {
    const auto until = clk.now() + tick_budget;  // one tick of the worker actor
    while (clk.now() < until && train_some(st, until)) ++passes;
  }
  return passes;
}

troupe::clock& idle_worker::clock() {
  return impl_->node.clock();
}

}  // namespace troupe::actors::testing
