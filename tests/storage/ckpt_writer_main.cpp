// Test helper for checkpoint_kill_test: writes checkpoints v = latest+1, latest+2, ... of the
// ckpt_gen.hpp contents into DIR until killed (or MAX versions), printing "committed V" after
// each write() returned. Exit 3 on any error (printed).
#include <cstdio>
#include <cstdlib>
#include <string>

#include "ckpt_gen.hpp"

using namespace troupe::storage;

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s DIR [MAX]\n", argv[0]);
    return 2;
  }
  std::uint64_t max = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : ~std::uint64_t{0};
  checkpoint_options o;
  o.keep_full = 2;
  o.env.initial_map_size = 1 << 20;  // grows while the test runs
  auto store = checkpoint_store::open(argv[1], o);
  if (!store) {
    std::fprintf(stderr, "open: %s\n", store.err().to_string().c_str());
    return 3;
  }
  auto latest = store->latest();
  if (!latest) {
    std::fprintf(stderr, "latest: %s\n", latest.err().to_string().c_str());
    return 3;
  }
  std::uint64_t v = latest->value_or(0);
  shard_state state = testing::state_at(v);
  for (++v; v <= max; ++v) {
    auto c = testing::changes(v);
    testing::merge(state, c);
    auto kind = testing::kind_of(v);
    auto r = store->write(kind == checkpoint_kind::full ? state : c, kind);
    if (!r || *r != v) {
      std::fprintf(stderr, "write %llu: %s\n", static_cast<unsigned long long>(v),
                   r ? "unexpected version" : r.err().to_string().c_str());
      return 3;
    }
    std::printf("committed %llu\n", static_cast<unsigned long long>(v));
    std::fflush(stdout);
  }
  return 0;
}
