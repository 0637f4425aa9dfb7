// main() of every gtest binary (instead of gtest_main): runs the tests, then removes the scratch
// this process left in the temporary directory when all of them passed, and names it when one
// failed. Scratch is what the helpers make there, named after the process: troupe-*-<pid>
// (job_harness.cpp's test_root, the data and torch job tests) and troupe-test-<pid>-<n>-<name>
// (run_command.hpp's temp_path). ctest runs each test in a process of its own, so a failed test
// keeps its own files and nothing else. The shared dataset cache (troupe-test-datasets) is kept.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

namespace {

std::vector<std::filesystem::path> own_scratch() {
  namespace fs = std::filesystem;
  const std::string pid = std::to_string(::getpid());
  const std::string suffix = "-" + pid, temp_prefix = "troupe-test-" + pid + "-";
  std::vector<fs::path> found;
  std::error_code ec;
  for (fs::directory_iterator it(fs::temp_directory_path(ec), ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.rfind("troupe-", 0) != 0) continue;
    const bool named_after_pid =
        name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
    if (named_after_pid || name.rfind(temp_prefix, 0) == 0) found.push_back(it->path());
  }
  return found;
}

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  const int rc = RUN_ALL_TESTS();
  for (const auto& p : own_scratch()) {
    if (rc != 0) {
      std::fprintf(stderr, "test scratch kept for inspection: %s\n", p.c_str());
      continue;
    }
    std::error_code ec;
    std::filesystem::remove_all(p, ec);
    if (ec) std::fprintf(stderr, "could not remove test scratch %s: %s\n", p.c_str(), ec.message().c_str());
  }
  return rc;
}
