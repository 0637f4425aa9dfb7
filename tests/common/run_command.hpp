// Running a real command from a test: the `troupe` binary under test (TROUPE_BIN) or any shell
// command, with its exit code and output. Header-only; every test target has tests/common on its
// include path (tests/CMakeLists.txt).
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

namespace troupe::test_util {

struct command_result {
  int code = -1;    // the exit status; -1 when the command did not exit (killed by a signal)
  std::string out;  // stdout (and stderr with stderr_mode::join)
  std::string err;  // stderr with stderr_mode::separate, else empty
};

enum class stderr_mode {
  join,      // stderr joins stdout (2>&1)
  separate,  // stderr captured on its own (through a temporary file)
  as_given,  // nothing added: the command redirects (or inherits) stderr itself
};

// A path in the temporary directory unique to this process and call: troupe-test-<pid>-<n>-<name>.
inline std::filesystem::path temp_path(const std::string& name) {
  static std::atomic<unsigned> next{0};
  return std::filesystem::temp_directory_path() /
         ("troupe-test-" + std::to_string(::getpid()) + "-" + std::to_string(next++) + "-" + name);
}

// Writes `text` to a new temp_path(name) and returns the path.
inline std::string write_temp(const std::string& name, const std::string& text) {
  auto path = temp_path(name);
  std::ofstream(path) << text;
  return path.string();
}

// Runs `command` with /bin/sh (popen) and waits for it. A command that cannot be started reads as
// code -1 with empty output.
inline command_result run_command(const std::string& command, stderr_mode mode = stderr_mode::join) {
  std::filesystem::path err_path;
  std::string cmd = command;
  if (mode == stderr_mode::join) cmd += " 2>&1";
  if (mode == stderr_mode::separate) {
    err_path = temp_path("stderr");
    cmd += " 2>" + err_path.string();
  }
  command_result r;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf;
  while (std::size_t n = std::fread(buf.data(), 1, buf.size(), p)) r.out.append(buf.data(), n);
  const int status = ::pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  if (!err_path.empty()) {
    std::ifstream f(err_path);
    r.err.assign(std::istreambuf_iterator<char>(f), {});
    std::filesystem::remove(err_path);
  }
  return r;
}

#ifdef TROUPE_BIN
// `troupe <args>`, the binary this build made.
inline command_result run_troupe(const std::string& args, stderr_mode mode = stderr_mode::join) {
  return run_command(std::string(TROUPE_BIN) + " " + args, mode);
}
#endif

}  // namespace troupe::test_util
