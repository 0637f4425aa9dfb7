// The proof that both ends of a TCP ring link belong to the job (docs/wire_format.md, "Ring
// links"). The dialling rank's hello carries a fresh nonce and a MAC over its rank, the ring's epoch
// and the nonce; the accepting rank answers with a MAC over its own rank, the epoch and the same
// nonce. Both MACs are HMAC-SHA-512-256 (libsodium crypto_auth) keyed by
//   key = BLAKE2b-256(job token), keyed by the label "troupe-ring-link-v1"
// so a process without the job's token can neither take a rank's place in the ring (and add its
// numbers to the job's sums) nor answer for a rank whose port it took. The role byte keeps a hello's
// MAC from passing as a welcome. Not encryption: like every troupe link, the numbers cross the
// network in the clear.
#pragma once

#include <array>
#include <cstdint>
#include <string>

namespace troupe::collective::tcp_detail {

using ring_key = std::array<unsigned char, 32>;
using ring_nonce = std::array<unsigned char, 16>;
using ring_mac = std::array<unsigned char, 32>;

enum class ring_role : unsigned char { hello = 1, welcome = 2 };

ring_key derive_ring_key(const std::string& job_token);
ring_nonce make_ring_nonce();
ring_mac ring_proof(const ring_key& key, ring_role role, int rank, std::uint64_t epoch, const ring_nonce& n);
// Constant-time comparison with the proof `rank` would give.
bool ring_proof_ok(const ring_key& key, ring_role role, int rank, std::uint64_t epoch, const ring_nonce& n,
                   const ring_mac& got);

}  // namespace troupe::collective::tcp_detail
