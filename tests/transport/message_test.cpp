#include "troupe/transport/message.hpp"

#include <cstring>

#include <gtest/gtest.h>

#include "troupe/transport/errc.hpp"

namespace troupe {
namespace {

frame to_frame(const std::vector<std::byte>& b) {
  frame f;
  f.word_count = b.size() / 8;
  f.words = std::make_unique<std::uint64_t[]>(f.word_count);
  std::memcpy(f.words.get(), b.data(), f.word_count * 8);
  return f;
}

TEST(message, round_trips_a_ps_push_with_dense_and_sparse_values) {
  outbound o;
  o.envelope().setTo("ps/0");
  o.envelope().setFrom("worker/3");
  o.set_correlation_id(42);
  auto push = o.body().initPsPush();
  auto sp = push.initSparse(1)[0];
  sp.setTable("emb");
  sp.setDim(2);
  auto ids = sp.initIds(2);
  ids.set(0, 7);
  ids.set(1, 9);
  auto vals = sp.initValues(4);
  for (unsigned i = 0; i < 4; ++i) vals.set(i, 0.5f * i);
  auto m = decode_frame(to_frame(o.to_bytes()), frame_limits{}, node_id{"worker-3", 2});
  ASSERT_TRUE(m) << m.err().to_string();
  EXPECT_EQ(m->kind(), schema::Envelope::Body::PS_PUSH);
  EXPECT_EQ(m->to(), "ps/0");
  EXPECT_EQ(m->from(), "worker/3");
  EXPECT_EQ(m->from_node().incarnation, 2u);
  EXPECT_EQ(m->correlation_id(), 42u);
  auto r = m->body().getPsPush().getSparse()[0];
  EXPECT_EQ(r.getIds()[1], 9u);
  EXPECT_FLOAT_EQ(r.getValues()[3], 1.5f);
  message copy = *m;  // shared, cheap
  EXPECT_EQ(copy.words().data(), m->words().data());
}

TEST(message, a_reply_carries_the_correlation_id_of_its_request) {
  outbound req;
  req.set_correlation_id(77);
  req.envelope().setFrom("rpc");
  req.body().initPsPull();
  auto m = decode_frame(to_frame(req.to_bytes()), frame_limits{}, node_id{"worker-1", 1});
  ASSERT_TRUE(m) << m.err().to_string();
  outbound rep = reply_to(*m);
  rep.body().initPsPullReply().setError("five");
  auto r = decode_frame(to_frame(rep.to_bytes()), frame_limits{}, node_id{"ps-0", 1});
  ASSERT_TRUE(r) << r.err().to_string();
  EXPECT_EQ(r->correlation_id(), 77u);
  EXPECT_EQ(std::string(r->body().getPsPullReply().getError().cStr()), "five");
  outbound plain;  // not part of an exchange
  plain.body().initHeartbeat();
  auto p = decode_frame(to_frame(plain.to_bytes()), frame_limits{}, node_id{"a", 0});
  ASSERT_TRUE(p);
  EXPECT_EQ(p->correlation_id(), 0u);
}

TEST(message, a_task_renewal_names_each_lease_by_task_and_attempt) {
  outbound o;
  auto l = o.body().initTaskRenew().initLeases(2);
  l[0].setTaskId(3);
  l[0].setAttempt(1);
  l[1].setTaskId(9);
  l[1].setAttempt(4);
  auto m = decode_frame(to_frame(o.to_bytes()), frame_limits{}, node_id{"a", 0});
  ASSERT_TRUE(m);
  auto r = m->body().getTaskRenew().getLeases();
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[1].getTaskId(), 9u);
  EXPECT_EQ(r[1].getAttempt(), 4u);
}

TEST(message, rejects_garbage_and_bad_names) {
  std::vector<std::byte> junk(64, std::byte{0xab});
  std::memset(junk.data(), 0, 8);  // one segment of 0 words... then a size mismatch
  junk[4] = std::byte{7};
  auto m = decode_frame(to_frame(junk), frame_limits{}, node_id{"a", 0});
  ASSERT_FALSE(m);
  EXPECT_EQ(m.err(), transport_errc::malformed_frame);

  outbound o;
  o.envelope().setTo("Bad Name!");
  auto m2 = decode_frame(to_frame(o.to_bytes()), frame_limits{}, node_id{"a", 0});
  ASSERT_FALSE(m2);
  EXPECT_NE(m2.err().context().find("name"), std::string::npos);
}

template <int N>
struct nest {
  using type = capnp::List<typename nest<N - 1>::type>;
};
template <>
struct nest<0> {
  using type = capnp::List<std::uint32_t>;
};
template <int N>
void fill(typename nest<N>::type::Builder b) {
  if constexpr (N == 0) {
    b.set(0, 1);
  } else {
    fill<N - 1>(b.init(0, 1));
  }
}

TEST(message, nesting_beyond_the_limit_is_malformed) {
  outbound deep;
  fill<24>(deep.body().initOpaque().initAs<nest<24>::type>(1));
  auto m = decode_frame(to_frame(deep.to_bytes()), frame_limits{}, node_id{"a", 0});
  ASSERT_FALSE(m);
  EXPECT_EQ(m.err(), transport_errc::malformed_frame);

  outbound shallow;
  fill<4>(shallow.body().initOpaque().initAs<nest<4>::type>(1));
  EXPECT_TRUE(decode_frame(to_frame(shallow.to_bytes()), frame_limits{}, node_id{"a", 0}));
}

}  // namespace
}  // namespace troupe
