#include "tcp/ring_auth.hpp"

#include <sodium.h>

#include <stdexcept>
#include <vector>

namespace troupe::collective::tcp_detail {

namespace {

void ensure_sodium() {
  static const int rc = sodium_init();
  if (rc < 0) throw std::runtime_error("libsodium initialisation failed");
}

std::vector<unsigned char> proof_input(ring_role role, int rank, std::uint64_t epoch, const ring_nonce& n) {
  static constexpr char label[] = "troupe-ring-v1";
  std::vector<unsigned char> in(label, label + sizeof(label));
  in.push_back(static_cast<unsigned char>(role));
  const auto r = static_cast<std::uint32_t>(rank);
  for (int i = 0; i < 4; ++i) in.push_back(static_cast<unsigned char>(r >> (8 * i)));
  for (int i = 0; i < 8; ++i) in.push_back(static_cast<unsigned char>(epoch >> (8 * i)));
  in.insert(in.end(), n.begin(), n.end());
  return in;
}

}  // namespace

ring_key derive_ring_key(const std::string& job_token) {
  ensure_sodium();
  static constexpr char domain[] = "troupe-ring-link-v1";  // 16 to 64 bytes, as a BLAKE2b key
  static_assert(sizeof(domain) - 1 >= crypto_generichash_KEYBYTES_MIN);
  ring_key k;
  crypto_generichash(k.data(), k.size(), reinterpret_cast<const unsigned char*>(job_token.data()),
                     job_token.size(), reinterpret_cast<const unsigned char*>(domain), sizeof(domain) - 1);
  return k;
}

ring_nonce make_ring_nonce() {
  ensure_sodium();
  ring_nonce n;
  randombytes_buf(n.data(), n.size());
  return n;
}

ring_mac ring_proof(const ring_key& key, ring_role role, int rank, std::uint64_t epoch, const ring_nonce& n) {
  static_assert(crypto_auth_BYTES == 32 && crypto_auth_KEYBYTES == 32);
  auto in = proof_input(role, rank, epoch, n);
  ring_mac m;
  crypto_auth(m.data(), in.data(), in.size(), key.data());
  return m;
}

bool ring_proof_ok(const ring_key& key, ring_role role, int rank, std::uint64_t epoch, const ring_nonce& n,
                   const ring_mac& got) {
  auto in = proof_input(role, rank, epoch, n);
  return crypto_auth_verify(got.data(), in.data(), in.size(), key.data()) == 0;
}

}  // namespace troupe::collective::tcp_detail
