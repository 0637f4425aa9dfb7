#include "troupe/actors/testing/served_records.hpp"

#include <stdexcept>

#include "endpoint_node.hpp"
#include "record_server.hpp"

namespace troupe::actors::testing {

static_assert(record_server_host::max_reply_bytes == record_server::default_max_reply_bytes);

struct record_server_host::impl {
  impl(const std::string& train_dir, const std::string& work, bool copy, endpoint& net)
      : node(node_identity{node_id{"master", 0}, cluster::node_role::master, 0, work, "b", "b", 0}, spec,
             net),
        server(node, data_paths{train_dir, ""}, record_server::default_max_reply_bytes,
               copy ? SIZE_MAX : record_server::min_uncopied_record_bytes) {}
  // A default spec, named: a `job::job_spec{}` temporary trips GCC 12's -Wmaybe-uninitialized at -O3.
  job::job_spec spec;
  endpoint_node node;
  record_server server;
  // Declared last, so destroyed first: its io thread answers with the server.
  std::unique_ptr<endpoint> net;
};

record_server_host::record_server_host(std::unique_ptr<impl> i) : impl_(std::move(i)) {}

record_server_host::~record_server_host() = default;

expected<std::unique_ptr<record_server_host>> record_server_host::start(const std::string& train_dir,
                                                                        const std::string& work, bool copy,
                                                                        const std::string& host,
                                                                        std::uint16_t port) {
  transport_config cfg;
  cfg.token = "bench";
  auto net = endpoint::create(node_id{"master", 0}, cfg);
  if (!net) return net.err();
  std::unique_ptr<impl> s;
  try {
    s = std::make_unique<impl>(train_dir, work, copy, **net);
  } catch (const std::runtime_error& e) {  // the store cannot be opened
    return make_unexpected(core_errc::io_error, e.what());
  }
  s->net = std::move(*net);
  record_server& server = s->server;
  endpoint& e = *s->net;
  (void)e.register_name("records", [&e, &server](const message& m) {
    (void)wire::send_reply(e, m, server.answer(m), "records");
  });
  auto addr = e.listen(host, port);
  if (!addr) return addr.err();
  s->node.set_address(*addr);
  return std::unique_ptr<record_server_host>(new record_server_host(std::move(s)));
}

const std::string& record_server_host::address() const {
  return impl_->node.address();
}

}  // namespace troupe::actors::testing
