#include "node_output.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sstream>

namespace troupe::cluster {

std::optional<std::uint64_t> file_size(const std::string& path) {
  struct stat st {};
  if (path.empty() || ::stat(path.c_str(), &st) != 0) return std::nullopt;
  return static_cast<std::uint64_t>(st.st_size);
}

namespace {

// Up to `limit` bytes of the file from `from` to its end (the last ones when there are more).
std::string read_end(int fd, std::uint64_t from, std::uint64_t size, std::size_t limit, bool& cut) {
  cut = size - from > limit;
  std::uint64_t at = cut ? size - limit : from;
  std::string text(static_cast<std::size_t>(size - at), '\0');
  std::size_t got = 0;
  while (got < text.size()) {
    auto n = ::pread(fd, text.data() + got, text.size() - got, static_cast<off_t>(at + got));
    if (n <= 0) break;
    got += static_cast<std::size_t>(n);
  }
  text.resize(got);
  return text;
}

}  // namespace

void read_node_output(const std::string& path, std::uint64_t start, exit_trace& t, const std::string& skip) {
  if (path.empty()) return;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    t.log_missing = true;
    return;
  }
  struct stat st {};
  std::uint64_t size = ::fstat(fd, &st) == 0 ? static_cast<std::uint64_t>(st.st_size) : 0;
  if (size < start) start = 0;  // truncated or replaced since the launch: all of it is new
  t.log_bytes = size - start;
  bool cut = false;
  std::string text = read_end(fd, start, size, exit_trace::output_limit, cut);
  ::close(fd);
  if (cut) {  // begin at a whole line
    auto nl = text.find('\n');
    text.erase(0, nl == std::string::npos ? text.size() : nl + 1);
  }
  std::istringstream in(text);
  std::string out;
  for (std::string line; std::getline(in, line);) {
    if (!skip.empty() && line.rfind(skip, 0) == 0) continue;
    out.append(out.empty() ? "" : "\n").append(line);
  }
  t.output = std::move(out);
}

}  // namespace troupe::cluster
