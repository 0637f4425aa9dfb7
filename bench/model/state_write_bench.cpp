// A ring checkpoint's write (model::write_state: a checkpoint store version, fsynced, and state.json)
// against the plain file a program would write instead: the same bytes, write() and fsync() (issue
// 46's checkpoint target: >= 0.8x the plain file). Alternating, REPS of each per size.
// Usage: state_write_bench DIR [MB...] (default 8 32 128), REPS=5 in the environment to change it.
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "troupe/model/state.hpp"

namespace {

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// A replica's state of about `mb` MB: tensors of 1 MB each (names as a model's), no rows.
troupe::storage::flat_state state_of(std::size_t mb) {
  troupe::storage::flat_state s;
  for (std::size_t i = 0; i < mb; ++i)
    s.dense.emplace_back("dense_" + std::to_string(i) + "/weight",
                         std::vector<float>(262144, 0.001f * float(i)));
  return s;
}

double plain_file(const std::string& path, const troupe::storage::flat_state& s) {
  auto t = std::chrono::steady_clock::now();
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  for (const auto& [name, v] : s.dense)
    if (::write(fd, v.data(), v.size() * sizeof(float)) < 0) std::abort();
  ::fsync(fd);
  ::close(fd);
  return seconds_since(t);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: state_write_bench DIR [MB...]\n");
    return 2;
  }
  const std::string dir = argv[1];
  std::vector<std::size_t> sizes;
  for (int i = 2; i < argc; ++i) sizes.push_back(std::strtoul(argv[i], nullptr, 10));
  if (sizes.empty()) sizes = {8, 32, 128};
  const int reps = std::getenv("REPS") ? std::atoi(std::getenv("REPS")) : 5;
  for (auto mb : sizes) {
    const auto s = state_of(mb);
    // A ring job's writer keeps its store open and the newest two versions: the steady state.
    std::filesystem::remove_all(dir + "/state");
    auto writer = troupe::model::state_writer::open(dir + "/state");
    if (!writer) {
      std::fprintf(stderr, "%s\n", writer.err().to_string().c_str());
      return 1;
    }
    for (int r = 0; r < reps; ++r) {
      const double plain = plain_file(dir + "/plain.bin", s);
      auto t = std::chrono::steady_clock::now();
      troupe::model::state_meta meta;
      meta.from = "checkpoint";
      if (auto w = writer->write(s, meta); !w) {
        std::fprintf(stderr, "%s\n", w.err().to_string().c_str());
        return 1;
      }
      const double ckpt = seconds_since(t);
      std::printf(
          "{\"mb\":%zu,\"rep\":%d,\"plain_s\":%.4f,\"checkpoint_s\":%.4f,\"plain_mb_s\":%.1f,"
          "\"checkpoint_mb_s\":%.1f,\"ratio\":%.3f}\n",
          mb, r, plain, ckpt, double(mb) / plain, double(mb) / ckpt, plain / ckpt);
      std::fflush(stdout);
    }
  }
  return 0;
}
