// The job's token on TCP ring links (collective/src/tcp/ring_auth.hpp): a process that does not
// hold it can neither take a rank's place in the ring nor answer for a rank whose port it holds.
// Ranks are threads on loopback with listeners of their own, as in tcp_link_test.cpp.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "troupe/collective/tcp/link.hpp"

namespace troupe::collective {
namespace {

using namespace std::chrono_literals;

std::unique_ptr<tcp_listener> listen_here() {
  auto l = tcp_listener::open("127.0.0.1");
  EXPECT_TRUE(l) << l.err().to_string();
  return l ? std::move(*l) : nullptr;
}

tcp_link_options rank_options(int rank, int size, std::uint16_t next_port, const std::string& secret) {
  tcp_link_options o;
  o.epoch = 1;
  o.rank = rank;
  o.size = size;
  o.next_address = "127.0.0.1:" + std::to_string(next_port);
  o.secret = secret;
  o.timeout = 5s;
  return o;
}

std::vector<float> ones(std::size_t n, float v) {
  return std::vector<float>(n, v);
}

// A process that knows the ring's epoch and ranks but not the job's token dials rank 0 first,
// naming itself rank 1: rank 0 refuses it and links with the real rank 1, and the sum holds only
// the two ranks' numbers.
TEST(tcp_ring_auth, a_rank_without_the_jobs_token_cannot_take_a_place_in_the_ring) {
  auto l0 = listen_here(), l1 = listen_here(), stranger_listener = listen_here();
  ASSERT_TRUE(l0 && l1 && stranger_listener);
  std::string stranger_err;
  std::thread stranger([&] {
    auto o = rank_options(1, 2, l0->port(), "not-the-token");
    o.timeout = 1s;
    auto link = tcp_ring_link::connect(o, *stranger_listener);
    stranger_err = link ? "" : link.err().to_string();
    if (link) {
      auto junk = ones(100, 1000.f);
      (void)ring_allreduce(**link, 1, 2, junk, 1, 1);
    }
  });
  std::this_thread::sleep_for(100ms);  // its hello waits in rank 0's backlog, ahead of rank 1's
  std::vector<std::vector<float>> got{ones(100, 1.f), ones(100, 2.f)};
  std::vector<std::string> errs(2);
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r)
    ranks.emplace_back([&, r] {
      auto o = rank_options(r, 2, r == 0 ? l1->port() : l0->port(), "the-token");
      auto link = tcp_ring_link::connect(o, r == 0 ? *l0 : *l1);
      if (!link) return void(errs[static_cast<std::size_t>(r)] = link.err().to_string());
      if (auto s = ring_allreduce(**link, r, 2, got[static_cast<std::size_t>(r)], 1, 1); !s)
        errs[static_cast<std::size_t>(r)] = s.err().to_string();
    });
  for (auto& t : ranks) t.join();
  stranger.join();
  EXPECT_EQ(errs[0], "");
  EXPECT_EQ(errs[1], "");
  EXPECT_EQ(got[0], ones(100, 3.f)) << "rank 0's sum holds only the job's ranks";
  EXPECT_EQ(got[1], ones(100, 3.f));
  EXPECT_NE(stranger_err, "") << "the stranger never linked";
}

// Two ranks whose tokens differ (two jobs' workers given each other's addresses) never link: each
// refuses the other's hello, and both fail within the rendezvous timeout.
TEST(tcp_ring_auth, ranks_with_different_tokens_never_link) {
  auto l0 = listen_here(), l1 = listen_here();
  ASSERT_TRUE(l0 && l1);
  std::vector<std::string> errs(2);
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r)
    ranks.emplace_back([&, r] {
      auto o = rank_options(r, 2, r == 0 ? l1->port() : l0->port(), r == 0 ? "job-a" : "job-b");
      o.timeout = 1s;
      auto link = tcp_ring_link::connect(o, r == 0 ? *l0 : *l1);
      errs[static_cast<std::size_t>(r)] = link ? "" : link.err().to_string();
    });
  for (auto& t : ranks) t.join();
  EXPECT_NE(errs[0], "");
  EXPECT_NE(errs[1], "");
}

// Another process holds the next rank's port and welcomes every hello with the right magic but no
// proof of the token: the link fails at once, naming the address, instead of sending the ring's
// numbers to it.
TEST(tcp_ring_auth, a_next_rank_answering_without_the_token_fails_the_link) {
  auto squat = listen_here(), l0 = listen_here(), l2 = listen_here();
  ASSERT_TRUE(squat && l0 && l2);
  std::thread squatter([&] {
    int fd = ::accept(squat->fd(), nullptr, nullptr);
    if (fd < 0) return;
    unsigned char hello[64];
    if (::recv(fd, hello, sizeof hello, MSG_WAITALL) == static_cast<ssize_t>(sizeof hello)) {
      unsigned char welcome[36] = {};
      const std::uint32_t magic = 0x74726e61;  // "trna"
      std::memcpy(welcome, &magic, sizeof magic);
      (void)::send(fd, welcome, sizeof welcome, MSG_NOSIGNAL);
    }
    std::this_thread::sleep_for(500ms);
    ::close(fd);
  });
  // Rank 2 (real) dials rank 0, so rank 0 gets past its accept and reads its next rank's welcome.
  std::thread rank2([&] {
    auto o = rank_options(2, 3, l0->port(), "the-token");
    o.timeout = 1s;
    (void)tcp_ring_link::connect(o, *l2);
  });
  auto o = rank_options(0, 3, squat->port(), "the-token");
  auto link = tcp_ring_link::connect(o, *l0);
  rank2.join();
  squatter.join();
  ASSERT_FALSE(link);
  const auto why = link.err().to_string();
  EXPECT_NE(why.find("without the job's token"), std::string::npos) << why;
  EXPECT_NE(why.find(o.next_address), std::string::npos) << why;
}

}  // namespace
}  // namespace troupe::collective
