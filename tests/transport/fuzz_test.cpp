// Mutation fuzzing of the frame decoder and the message decode: a seed corpus of valid frames of
// every kind is mutated (bit flips, byte and u32 overwrites, truncation, insertion, splicing),
// fed to a frame_reader in random chunks, and every frame it emits is decoded and, when valid,
// walked completely (stringified). Nothing may crash, hang or leak; rejections are fine.
// TROUPE_FUZZ_ITERATIONS sets the number of inputs (default below; 1M in the `slow` variant).
#include <chrono>
#include <cstdlib>
#include <cstring>

#include <capnp/serialize.h>
#include <gtest/gtest.h>
#include <kj/exception.h>

#include "troupe/transport/frame.hpp"
#include "troupe/transport/message.hpp"

// The two binaries need distinct test names: ctest properties (the `slow` label) go by name.
#ifndef TROUPE_FUZZ_DEFAULT_ITERATIONS
#define TROUPE_FUZZ_DEFAULT_ITERATIONS 100000
#define FUZZ_SUITE frame_fuzz
#else
#define FUZZ_SUITE frame_fuzz_slow
#endif

namespace troupe {
namespace {

using bytes = std::vector<std::byte>;

struct rng {
  std::uint64_t s;
  std::uint64_t next() {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    return s;
  }
  std::size_t below(std::size_t n) { return n ? next() % n : 0; }
};

bytes multi_segment_seed() {
  capnp::MallocMessageBuilder b(4, capnp::AllocationStrategy::FIXED_SIZE);
  auto env = b.initRoot<schema::Envelope>();
  env.setTo("worker/1");
  auto m = env.getBody().initMembership();
  m.setEpoch(7);
  auto members = m.initMembers(3);
  for (unsigned i = 0; i < 3; ++i) {
    const char name[] = {'w', static_cast<char>('0' + i), '\0'};
    members[i].getNode().setName(name);
    members[i].setAddress("127.0.0.1:1");
  }
  auto flat = capnp::messageToFlatArray(b);
  bytes out(flat.asBytes().size());
  std::memcpy(out.data(), flat.asBytes().begin(), out.size());
  return out;
}

std::vector<bytes> seed_corpus() {
  std::vector<bytes> seeds;
  auto add = [&](auto build) {
    outbound o(16);
    o.envelope().setTo("ps/0");
    o.envelope().setFrom("worker/3");
    build(o.body());
    seeds.push_back(o.to_bytes());
  };
  using B = schema::Envelope::Body::Builder;
  add([](B b) {
    b.initHello().getNode().setName("node-a");
    b.getHello().initNonce(32);
  });
  add([](B b) { b.initAuth().initMac(32); });
  add([](B b) { b.initHeartbeat().setSeq(3); });
  add([](B b) { b.initWatch().setName("svc"); });
  add([](B b) { b.initDown().setReason("gone"); });
  add([](B b) { b.initPing().initPayload(40); });
  add([](B b) { b.initJoin().setAddress("127.0.0.1:7000"); });
  add([](B b) { b.initTaskLease().initTask().setRecordCount(512); });
  add([](B b) { b.initTaskReport().setFailed("bad record"); });
  add([](B b) { b.initTaskRenew().initLeases(3)[1].setAttempt(2); });
  add([](B b) {
    auto p = b.initPsPull();
    p.initDense(2).set(0, "w1");
    p.initSparse(1)[0].initIds(4).set(2, 99);
  });
  add([](B b) {
    auto p = b.initPsPullReply();
    p.initDense(1)[0].initValues(6);
    p.initSparse(1)[0].initIds(2);
  });
  add([](B b) { b.initPsPush().initSparse(2)[1].initValues(8); });
  add([](B b) { b.initJob().initJobStatus().initMembers(2)[1].setRole("worker"); });
  add([](B b) { b.initOpaque().initAs<capnp::List<capnp::List<std::uint32_t>>>(2).init(1, 3); });
  seeds.push_back(multi_segment_seed());
  return seeds;
}

void mutate(bytes& d, rng& r, const std::vector<bytes>& seeds) {
  static constexpr std::uint32_t interesting[] = {
      0,      1,      2,       7,          8,          63,          64,          65,
      0x7fff, 0xffff, 0x10000, 0x1fffffff, 0x7fffffff, 0x80000000u, 0xfffffffeu, 0xffffffffu};
  const int n = 1 + static_cast<int>(r.below(4));
  for (int k = 0; k < n; ++k) {
    switch (r.below(8)) {
      case 0:
        if (!d.empty()) d[r.below(d.size())] ^= std::byte(1u << r.below(8));
        break;
      case 1:
        if (!d.empty()) d[r.below(d.size())] = std::byte(r.next());
        break;
      case 2:
        if (d.size() >= 4) {
          std::uint32_t v = interesting[r.below(std::size(interesting))];
          std::memcpy(d.data() + (r.below(d.size() / 4) * 4), &v, 4);
        }
        break;
      case 3:
        if (d.size() >= 8) {
          std::uint64_t v = r.next();
          std::memcpy(d.data() + (r.below(d.size() / 8) * 8), &v, 8);
        }
        break;
      case 4:
        d.resize(r.below(d.size() + 1));
        break;
      case 5: {
        bytes extra(1 + r.below(32));
        for (auto& x : extra) x = std::byte(r.next());
        d.insert(d.begin() + static_cast<std::ptrdiff_t>(r.below(d.size() + 1)), extra.begin(), extra.end());
        break;
      }
      case 6:
        if (!d.empty()) {
          auto at = r.below(d.size());
          d.erase(d.begin() + static_cast<std::ptrdiff_t>(at),
                  d.begin() + static_cast<std::ptrdiff_t>(std::min(d.size(), at + 1 + r.below(16))));
        }
        break;
      default: {
        const bytes& other = seeds[r.below(seeds.size())];
        auto cut = r.below(d.size() + 1), from = r.below(other.size() + 1);
        d.resize(cut);
        d.insert(d.end(), other.begin() + static_cast<std::ptrdiff_t>(from), other.end());
      }
    }
  }
}

struct outcome {
  std::size_t stream_errors = 0, decoded = 0, rejected = 0, walk_errors = 0;
};

void run_one(const bytes& input, rng& r, outcome& out) {
  frame_limits lim;
  lim.max_frame_bytes = 1 << 20;
  frame_reader reader(lim);
  auto sink = [&](frame&& f) {
    auto m = decode_frame(std::move(f), lim, node_id{"fuzz", 0});
    if (!m) {
      ++out.rejected;
      return;
    }
    ++out.decoded;
    try {
      auto text = m->envelope().toString().flatten();
      (void)m->to();
      (void)m->kind();
    } catch (const kj::Exception&) {
      ++out.walk_errors;
    }
  };
  // As a connection reads: the rest of a large frame straight into it, other bytes through
  // consume() from a buffer the reader does not own (every other input: through feed(), as tests do).
  const bool as_connection = r.below(2) == 0;
  std::size_t off = 0;
  while (off < input.size()) {
    auto n = std::min(input.size() - off, 1 + r.below(r.below(2) ? 16 : 4096));
    expected<void> ok;
    if (!as_connection) {
      ok = reader.feed({input.data() + off, n}, sink);
    } else if (auto d = reader.direct(); !d.empty()) {
      auto dst = reader.prepare();
      n = std::min(n, dst.size());
      std::memcpy(dst.data(), input.data() + off, n);
      ok = reader.commit(n, sink);
    } else {
      ok = reader.consume({input.data() + off, n}, sink);
    }
    if (!ok) {
      ++out.stream_errors;
      return;
    }
    off += n;
  }
}

std::size_t iterations() {
  if (const char* v = std::getenv("TROUPE_FUZZ_ITERATIONS"); v && *v) return std::strtoull(v, nullptr, 10);
  return TROUPE_FUZZ_DEFAULT_ITERATIONS;
}

TEST(FUZZ_SUITE, seeds_decode_cleanly) {
  for (auto& s : seed_corpus()) {
    frame_reader reader(frame_limits{});
    int frames = 0;
    ASSERT_TRUE(reader.feed(s, [&](frame&& f) {
      auto m = decode_frame(std::move(f), frame_limits{}, node_id{"fuzz", 0});
      EXPECT_TRUE(m) << m.err().to_string();
      ++frames;
    }));
    EXPECT_EQ(frames, 1);
  }
}

TEST(FUZZ_SUITE, mutated_frames_never_crash_hang_or_leak) {
  const auto seeds = seed_corpus();
  const std::size_t total = iterations();
  rng r{0x9e3779b97f4a7c15ull};
  outcome out;
  const auto start = std::chrono::steady_clock::now();
  for (std::size_t i = 0; i < total; ++i) {
    bytes input;
    const std::size_t frames = 1 + r.below(3);  // sometimes a stream of several frames
    for (std::size_t k = 0; k < frames; ++k) {
      bytes one = seeds[r.below(seeds.size())];
      mutate(one, r, seeds);
      input.insert(input.end(), one.begin(), one.end());
    }
    run_one(input, r, out);
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf(
      "fuzz: %zu inputs in %.1f s: %zu frames decoded, %zu rejected by decode, %zu streams cut by the "
      "frame reader, %zu walks stopped by a reader exception\n",
      total, secs, out.decoded, out.rejected, out.stream_errors, out.walk_errors);
  // The mutations must reach both the accept and the reject paths, else the fuzzing is toothless.
  if (total >= 1000) {
    EXPECT_GT(out.decoded, total / 100);
    EXPECT_GT(out.rejected + out.stream_errors, total / 100);
  }
}

}  // namespace
}  // namespace troupe
