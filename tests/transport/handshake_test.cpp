#include "handshake.hpp"

#include <gtest/gtest.h>

namespace troupe::detail {
namespace {

TEST(handshake, mac_verifies_only_with_the_same_token_role_and_nonces) {
  auto k = derive_key("secret");
  node_id a{"alpha", 1}, b{"beta", 0};
  auto na = make_nonce(), nb = make_nonce();
  ASSERT_NE(na, nb);
  auto m = compute_mac(k, true, a, b, na, nb);
  EXPECT_TRUE(verify_mac(k, true, a, b, na, nb, m));
  EXPECT_FALSE(verify_mac(derive_key("Secret"), true, a, b, na, nb, m)) << "other token";
  EXPECT_FALSE(verify_mac(derive_key(""), true, a, b, na, nb, m)) << "no token";
  EXPECT_FALSE(verify_mac(k, false, a, b, na, nb, m)) << "reflected role";
  EXPECT_FALSE(verify_mac(k, true, a, b, nb, na, m)) << "swapped nonces";
  EXPECT_FALSE(verify_mac(k, true, node_id{"alpha", 2}, b, na, nb, m)) << "other incarnation";
  EXPECT_FALSE(verify_mac(k, true, a, b, na, nb, std::span(m.data(), 16))) << "truncated";
}

}  // namespace
}  // namespace troupe::detail
