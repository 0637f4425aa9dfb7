// The challenge-response of the handshake (docs/wire_format.md, "Handshake"). Each side sends a
// Hello with a fresh 32-byte nonce, then an Auth whose MAC (HMAC-SHA-512-256, libsodium
// crypto_auth) proves it knows the cluster token without revealing it:
//   key = BLAKE2b-256(token)    (crypto_generichash, keyed by the domain label)
//   mac = HMAC(key, "troupe-auth-v1" | role | prover name | prover incarnation | verifier name |
//                   prover nonce | verifier nonce)
// role (1 = the side that dialled, 2 = the side that accepted) stops a MAC from being reflected
// back on the same connection; the nonces make every MAC single-use.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>

#include "troupe/core/ids.hpp"

namespace troupe::detail {

using auth_key = std::array<unsigned char, 32>;
using nonce = std::array<unsigned char, 32>;
using mac = std::array<unsigned char, 32>;

auth_key derive_key(const std::string& token);
nonce make_nonce();
mac compute_mac(const auth_key& key, bool prover_dialled, const node_id& prover, const node_id& verifier_name,
                const nonce& prover_nonce, const nonce& verifier_nonce);
// Constant-time check of a MAC received from `prover`.
bool verify_mac(const auth_key& key, bool prover_dialled, const node_id& prover, const node_id& verifier,
                const nonce& prover_nonce, const nonce& verifier_nonce, std::span<const unsigned char> got);

}  // namespace troupe::detail
