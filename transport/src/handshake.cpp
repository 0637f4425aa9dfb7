#include "handshake.hpp"

#include <cstring>
#include <stdexcept>
#include <vector>

#include <sodium.h>

namespace troupe::detail {
namespace {
void ensure_sodium() {
  static const int rc = sodium_init();
  if (rc < 0) throw std::runtime_error("libsodium initialisation failed");
}

std::vector<unsigned char> mac_input(bool prover_dialled, const node_id& prover, const node_id& verifier,
                                     const nonce& pn, const nonce& vn) {
  static constexpr char label[] = "troupe-auth-v1";
  std::vector<unsigned char> in(label, label + sizeof(label));
  in.push_back(prover_dialled ? 1 : 2);
  in.insert(in.end(), prover.name.begin(), prover.name.end());
  in.push_back(0);
  for (int i = 0; i < 8; ++i) in.push_back(static_cast<unsigned char>(prover.incarnation >> (8 * i)));
  in.insert(in.end(), verifier.name.begin(), verifier.name.end());
  in.push_back(0);
  in.insert(in.end(), pn.begin(), pn.end());
  in.insert(in.end(), vn.begin(), vn.end());
  return in;
}
}  // namespace

auth_key derive_key(const std::string& token) {
  ensure_sodium();
  static constexpr char domain[] = "troupe-cluster-token-v1";
  auth_key k;
  crypto_generichash(k.data(), k.size(), reinterpret_cast<const unsigned char*>(token.data()), token.size(),
                     reinterpret_cast<const unsigned char*>(domain), sizeof(domain) - 1);
  return k;
}

nonce make_nonce() {
  ensure_sodium();
  nonce n;
  randombytes_buf(n.data(), n.size());
  return n;
}

mac compute_mac(const auth_key& key, bool prover_dialled, const node_id& prover, const node_id& verifier,
                const nonce& pn, const nonce& vn) {
  static_assert(crypto_auth_BYTES == 32 && crypto_auth_KEYBYTES == 32);
  auto in = mac_input(prover_dialled, prover, verifier, pn, vn);
  mac m;
  crypto_auth(m.data(), in.data(), in.size(), key.data());
  return m;
}

bool verify_mac(const auth_key& key, bool prover_dialled, const node_id& prover, const node_id& verifier,
                const nonce& pn, const nonce& vn, std::span<const unsigned char> got) {
  if (got.size() != crypto_auth_BYTES) return false;
  auto in = mac_input(prover_dialled, prover, verifier, pn, vn);
  return crypto_auth_verify(got.data(), in.data(), in.size(), key.data()) == 0;
}

}  // namespace troupe::detail
