// A connection's handshake: each side sends a Hello (its name, incarnation and a nonce), answers the
// peer's with an Auth (a MAC over both nonces under the cluster key) and opens once the peer's Auth
// checks out (docs/wire_format.md).
#include "connection.hpp"

namespace troupe::detail {
namespace {
constexpr std::uint32_t protocol_version = 2;  // 2: correlation ids, dead fields gone

std::span<const unsigned char> as_uchars(capnp::Data::Reader d) {
  return {d.begin(), d.size()};
}
}  // namespace

void connection::send_hello() {
  outbound o(64);
  auto h = o.body().initHello();
  h.setProtocol(protocol_version);
  h.getNode().setName(params_->self.name);
  h.getNode().setIncarnation(params_->self.incarnation);
  h.setNonce(kj::arrayPtr(hs_->mine.data(), hs_->mine.size()));
  (void)push(make_frame(std::move(o)), {});
}

void connection::refuse(const std::string& why, transport_errc code) {
  if (code == transport_errc::auth_failed) ++params_->stats->auth_refused;
  close("refused: " + why, code);
}

void connection::on_handshake(const message& m) {
  if (!hs_) return refuse("handshake message after the handshake", transport_errc::handshake_failed);
  try {
    auto body = m.body();
    if (body.isHello() && !hs_->got_hello) return on_hello(m);
    if (body.isAuth() && hs_->got_hello) return on_auth(m);
    refuse("unexpected message before authentication", transport_errc::handshake_failed);
  } catch (const std::exception& e) {
    refuse(std::string("malformed handshake: ") + e.what(), transport_errc::handshake_failed);
  }
}

void connection::on_hello(const message& m) {
  auto& hs = *hs_;
  auto h = m.body().getHello();
  auto n = h.getNode();
  std::string name = n.getName();
  if (h.getProtocol() != protocol_version)
    return refuse("protocol version " + std::to_string(h.getProtocol()), transport_errc::handshake_failed);
  if (!valid_node_name(name)) return refuse("invalid node name in hello", transport_errc::handshake_failed);
  if (h.getNonce().size() != hs.peers.size()) return refuse("bad nonce", transport_errc::handshake_failed);
  peer_ = node_id{name, n.getIncarnation()};
  std::copy(h.getNonce().begin(), h.getNonce().end(), hs.peers.begin());
  hs.got_hello = true;
  outbound o(64);
  auto mac = compute_mac(params_->key, dialled_, params_->self, peer_, hs.mine, hs.peers);
  o.body().initAuth().setMac(kj::arrayPtr(mac.data(), mac.size()));
  (void)push(make_frame(std::move(o)), {});
}

void connection::on_auth(const message& m) {
  auto& hs = *hs_;
  if (!verify_mac(params_->key, !dialled_, peer_, params_->self, hs.peers, hs.mine,
                  as_uchars(m.body().getAuth().getMac())))
    return refuse("wrong cluster token (peer claims to be " + peer_.to_string() + ")",
                  transport_errc::auth_failed);
  phase_ = phase::open;
  hs_.reset();
  reader_.set_limits(params_->limits);
  params_->owner->on_open(shared_from_this());
}

}  // namespace troupe::detail
